# CPack .deb settings (installer/package.sh).

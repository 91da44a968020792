# CPack: a Debian package with both executables, the desktop integration files that
# resources/CMakeLists.txt installs (desktop file, AppStream metainfo, MIME type, icons) and the
# experiment presets. installer/package.sh drives it; tests/packaging checks the file list.
include(GNUInstallDirs)

foreach(executable fragscope fragscope-cli)
  if(TARGET ${executable})
    install(TARGETS ${executable} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT fragscope)
  endif()
endforeach()
install(DIRECTORY ${CMAKE_SOURCE_DIR}/experiments/ DESTINATION ${CMAKE_INSTALL_DATADIR}/fragscope/experiments
        COMPONENT fragscope FILES_MATCHING PATTERN "*.json" PATTERN "*.md" PATTERN "*.py" PATTERN "*.yml"
        PATTERN "__pycache__" EXCLUDE)
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT fragscope)

set(CPACK_PACKAGE_NAME "fragscope")
set(CPACK_PACKAGE_VENDOR "FragScope developers")
set(CPACK_PACKAGE_CONTACT "FragScope developers <fragscope@users.noreply.github.com>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Workbench for CUDA memory fragmentation in PyTorch")
set(CPACK_PACKAGE_DESCRIPTION
    "FragScope opens PyTorch memory snapshots, replays them on an exact model of PyTorch's CUDA caching allocator, explains out-of-memory errors that happen while memory looks free, and runs what-if experiments (max_split_size_mb, expandable segments, checkpointing, accumulation) with reports.")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_FILE_NAME "fragscope_${PROJECT_VERSION}_amd64")
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE "amd64")
set(CPACK_DEBIAN_PACKAGE_SECTION "science")
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/fragscope/fragscope")
# Library dependencies come from the binaries themselves (dpkg-shlibdeps), so they are exact.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_STRIP_FILES ON)
include(CPack)

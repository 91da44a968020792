// Linked with one engine layer whole (see CMakeLists.txt): building it is the check.
int main() {
  return 0;
}

#pragma once
// Runs fragscope-cli as a child process and captures what it printed, for CLI contract tests.
#include <string>
#include <vector>

namespace fragscope::test {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Arguments are passed as-is (no shell), so paths with spaces and '' stay intact.
CliResult run_cli(const std::vector<std::string>& args);
// The same, run in the working directory `cwd`.
CliResult run_cli_in(const std::string& cwd, const std::vector<std::string>& args);

}  // namespace fragscope::test

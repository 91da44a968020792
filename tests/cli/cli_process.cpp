#include "cli/cli_process.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace fragscope::test {
namespace {
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}
}  // namespace

CliResult run_cli(const std::vector<std::string>& args) {
  return run_cli_in("", args);
}

CliResult run_cli_in(const std::string& cwd, const std::vector<std::string>& args) {
  char out_template[] = "/tmp/fragscope-cli-out-XXXXXX";
  char err_template[] = "/tmp/fragscope-cli-err-XXXXXX";
  const int out_fd = mkstemp(out_template);
  const int err_fd = mkstemp(err_template);
  CliResult result;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    if (!cwd.empty() && chdir(cwd.c_str()) != 0)
      _exit(126);
    std::vector<char*> argv;
    std::string program = FRAGSCOPE_CLI;
    argv.push_back(program.data());
    std::vector<std::string> copies = args;
    for (auto& a : copies)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  close(out_fd);
  close(err_fd);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = slurp(out_template);
  result.err = slurp(err_template);
  std::remove(out_template);
  std::remove(err_template);
  return result;
}

}  // namespace fragscope::test

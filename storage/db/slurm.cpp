#include "storage/db/slurm.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "engine/core/error.h"

extern char** environ;

namespace fragscope::storage {
namespace {

std::string trim(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.pop_back();
  std::size_t start = 0;
  while (start < text.size() && std::isspace(static_cast<unsigned char>(text[start])))
    ++start;
  return text.substr(start);
}

std::string first_line(const std::string& text) {
  return trim(text.substr(0, text.find('\n')));
}

}  // namespace

ProcessOutput run_captured(const std::vector<std::string>& argv) {
  ProcessOutput result;
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  std::vector<char*> args;
  for (const std::string& arg : argv)
    args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (spawned != 0) {
    close(pipe_fds[0]);
    result.status = 127;
    result.out = argv[0] + ": " + std::strerror(spawned);
    return result;
  }
  std::array<char, 4096> buffer;
  for (;;) {
    const ssize_t n = read(pipe_fds[0], buffer.data(), buffer.size());
    if (n > 0) {
      result.out.append(buffer.data(), static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      throw std::runtime_error(std::string("waitpid: ") + std::strerror(errno));
  }
  result.status = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  return result;
}

std::string submit_batch_script(const std::filesystem::path& script) {
  const ProcessOutput out = run_captured({"sbatch", "--parsable", script.string()});
  if (out.status != 0)
    throw InputError("sbatch " + script.string() + " failed (exit " + std::to_string(out.status) +
                     "): " + trim(out.out) +
                     (out.status == 127 ? " (is Slurm installed and on PATH?)" : ""));
  // --parsable prints "JOBID" or "JOBID;CLUSTER", possibly after warnings.
  std::string id;
  std::istringstream lines(out.out);
  for (std::string line; std::getline(lines, line);) {
    line = trim(line);
    if (!line.empty() && std::isdigit(static_cast<unsigned char>(line.front())))
      id = line.substr(0, line.find(';'));
  }
  if (id.empty())
    throw InputError("sbatch " + script.string() + " printed no job id: " + trim(out.out));
  return id;
}

std::string slurm_task_state(const std::string& job_id, int task) {
  if (job_id.empty())
    return {};
  const std::string id = job_id + "_" + std::to_string(task);
  if (const ProcessOutput q = run_captured({"squeue", "-h", "-r", "-j", id, "-o", "%T"});
      q.status == 0 && !first_line(q.out).empty())
    return first_line(q.out);
  if (const ProcessOutput s = run_captured({"scontrol", "-o", "show", "job", id}); s.status == 0) {
    const std::size_t at = s.out.find("JobState=");
    if (at != std::string::npos) {
      const std::size_t start = at + std::strlen("JobState=");
      return s.out.substr(start, s.out.find_first_of(" \n", start) - start);
    }
  }
  if (const ProcessOutput a = run_captured({"sacct", "-n", "-P", "-X", "-j", id, "-o", "State"});
      a.status == 0 && !first_line(a.out).empty())
    return first_line(a.out);
  return {};
}

}  // namespace fragscope::storage

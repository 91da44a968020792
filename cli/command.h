#pragma once
// fragscope-cli's subcommands register themselves here, one file each, so that adding a command
// never touches main.cpp.
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace fragscope::cli {

// Thrown for a malformed command line; main prints it with the command's usage and exits 2.
struct UsageError {
  std::string message;
};

using CommandFn = std::function<int(const std::vector<std::string>& args)>;

struct CommandInfo {
  std::string name;
  std::string usage;    // e.g. "replay SNAPSHOT [--alloc-conf STRING] ..."
  std::string summary;  // one line for `fragscope-cli help`
  CommandFn run;
};

const std::vector<CommandInfo>& commands();
bool register_command(CommandInfo info);

// Parses `--name VALUE`, `--name=VALUE`, boolean `--flag` and positional arguments. Unknown
// options are a UsageError, so a typo never silently does something else.
class Args {
 public:
  Args(const std::vector<std::string>& argv, std::set<std::string> flags,
       std::set<std::string> options);

  bool flag(const std::string& name) const { return flags_set_.count(name) != 0; }
  std::optional<std::string> option(const std::string& name) const;
  std::string option_or(const std::string& name, std::string fallback) const;
  // Integer option; a non-number or a negative value is a UsageError naming the option.
  std::optional<std::uint64_t> uint_option(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // Exactly `count` positional arguments, else a UsageError.
  void expect_positional(std::size_t count, std::string_view what) const;

 private:
  std::set<std::string> flags_set_;
  std::vector<std::pair<std::string, std::string>> options_;
  std::vector<std::string> positional_;
};

// Writes `value` to `target` ("-" = stdout) as pretty JSON with a trailing newline. A regular
// file is written to a temporary name and renamed, so a failure never leaves half a file behind;
// anything else (/dev/null, a FIFO, a terminal) is written through, never replaced.
void write_json(const nlohmann::json& value, const std::string& target);

}  // namespace fragscope::cli

#define FRAGSCOPE_CLI_CONCAT_INNER(a, b) a##b
#define FRAGSCOPE_CLI_CONCAT(a, b) FRAGSCOPE_CLI_CONCAT_INNER(a, b)
// FRAGSCOPE_CLI_COMMAND({"name", "usage", "summary", function});
#define FRAGSCOPE_CLI_COMMAND(...)                                                 \
  [[maybe_unused]] static const bool FRAGSCOPE_CLI_CONCAT(registered_, __LINE__) = \
      ::fragscope::cli::register_command(::fragscope::cli::CommandInfo __VA_ARGS__)

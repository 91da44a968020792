#include "cli/command.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"

namespace fragscope::cli {

namespace {
std::vector<CommandInfo>& registry() {
  static std::vector<CommandInfo> all;
  return all;
}
}  // namespace

const std::vector<CommandInfo>& commands() {
  return registry();
}

bool register_command(CommandInfo info) {
  registry().push_back(std::move(info));
  return true;
}

Args::Args(const std::vector<std::string>& argv, std::set<std::string> flags,
           std::set<std::string> options) {
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg.size() > 2 && arg.rfind("--", 0) == 0) {
      std::string name = arg;
      std::optional<std::string> inline_value;
      if (auto eq = arg.find('='); eq != std::string::npos) {
        name = arg.substr(0, eq);
        inline_value = arg.substr(eq + 1);
      }
      if (flags.count(name)) {
        if (inline_value)
          throw UsageError{name + " takes no value"};
        flags_set_.insert(name);
      } else if (options.count(name)) {
        if (inline_value) {
          options_.emplace_back(name, *inline_value);
        } else {
          if (i + 1 >= argv.size())
            throw UsageError{name + " needs a value"};
          options_.emplace_back(name, argv[++i]);
        }
      } else {
        throw UsageError{"unknown option " + name};
      }
    } else {
      positional_.push_back(arg);
    }
  }
}

std::optional<std::string> Args::option(const std::string& name) const {
  std::optional<std::string> found;
  for (const auto& [key, value] : options_) {
    if (key == name)
      found = value;  // the last one wins, as in most CLIs
  }
  return found;
}

std::string Args::option_or(const std::string& name, std::string fallback) const {
  auto value = option(name);
  return value ? *value : std::move(fallback);
}

std::optional<std::uint64_t> Args::uint_option(const std::string& name) const {
  auto text = option(name);
  if (!text)
    return std::nullopt;
  if (text->empty() || text->find_first_not_of("0123456789") != std::string::npos) {
    throw UsageError{name + " expects a non-negative integer, got '" + *text + "'"};
  }
  try {
    return std::stoull(*text);
  } catch (const std::exception&) {
    throw UsageError{name + " is out of range: '" + *text + "'"};
  }
}

void Args::expect_positional(std::size_t count, std::string_view what) const {
  if (positional_.size() != count) {
    throw UsageError{"expected " + std::string(what) + ", got " +
                     std::to_string(positional_.size()) + " positional argument(s)"};
  }
}

namespace {

std::string write_failure(const std::string& target, int error) {
  if (error == ENOSPC)
    return target + ": the disk is full; nothing was written";
  return target + ": write failed" +
         (error != 0 ? " (" + std::string(std::strerror(error)) + ")" : "");
}

// Writes `text` into `path` as it is: for what is not a regular file (/dev/null, a FIFO, a
// terminal), which a rename would replace with a regular file.
void write_through(const std::string& text, const std::string& path, const std::string& target) {
  std::ofstream out(path, std::ios::binary);
  if (!out)
    throw InputError(target + ": cannot open for writing");
  out << text;
  out.flush();
  if (!out)
    throw InputError(write_failure(target, errno));
}

}  // namespace

void write_json(const nlohmann::json& value, const std::string& target) {
  const std::string text =
      value.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (target == "-") {
    std::cout << text << std::flush;
    return;
  }
  std::error_code error;
  const auto status = std::filesystem::status(target, error);
  if (!error && status.type() != std::filesystem::file_type::regular &&
      status.type() != std::filesystem::file_type::not_found) {
    if (status.type() == std::filesystem::file_type::directory)
      throw InputError(target + ": is a directory");
    write_through(text, target, target);
    return;
  }
  // A regular file (or a new one) is replaced atomically: written beside it, then renamed, so a
  // failure never leaves half a file. Through a symlink, the file it points to is replaced.
  std::filesystem::path final_path(target);
  if (std::filesystem::is_symlink(final_path, error))
    final_path = std::filesystem::weakly_canonical(final_path, error);
  std::filesystem::path temp_path = final_path;
  temp_path += ".partial";
  {
    std::ofstream out(temp_path, std::ios::binary | std::ios::trunc);
    if (!out)
      throw InputError(target + ": cannot open for writing");
    out << text;
    out.flush();
    if (!out) {
      const int saved = errno;
      std::filesystem::remove(temp_path, error);
      throw InputError(write_failure(target, saved));
    }
  }
  std::error_code rename_error;
  std::filesystem::rename(temp_path, final_path, rename_error);
  if (rename_error) {
    std::filesystem::remove(temp_path, error);
    throw InputError(target + ": cannot replace the file (" + rename_error.message() + ")");
  }
}

}  // namespace fragscope::cli

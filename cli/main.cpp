// fragscope-cli: FragScope without the GUI (engine + storage only). Exit codes: 0 success (an OOM
// inside a trace is a result, not a failure), 2 bad input or usage, 1 internal error.
#include <algorithm>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "engine/core/error.h"
#include "fragscope/version.h"

namespace {

void print_help(std::ostream& out) {
  out << "fragscope-cli " << fragscope::kVersion << " (" << fragscope::kGitRevision
      << ") - CUDA memory fragmentation workbench\n\nUsage: fragscope-cli COMMAND [ARGS]\n\n"
         "Commands:\n";
  auto sorted = fragscope::cli::commands();
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  for (const auto& command : sorted) {
    out << "  " << command.usage << "\n      " << command.summary << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    print_help(std::cout);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::cout << "fragscope-cli " << fragscope::kVersion << " " << fragscope::kGitRevision << "\n";
    return 0;
  }
  const auto& all = fragscope::cli::commands();
  auto it = std::find_if(all.begin(), all.end(), [&](const auto& c) { return c.name == args[0]; });
  if (it == all.end()) {
    std::cerr << "fragscope-cli: unknown command '" << args[0] << "' (try 'fragscope-cli help')\n";
    return 2;
  }
  try {
    return it->run(std::vector<std::string>(args.begin() + 1, args.end()));
  } catch (const fragscope::cli::UsageError& e) {
    std::cerr << "fragscope-cli " << it->name << ": " << e.message << "\nusage: fragscope-cli "
              << it->usage << "\n";
    return 2;
  } catch (const fragscope::InputError& e) {
    std::cerr << "fragscope-cli " << it->name << ": error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "fragscope-cli " << it->name << ": internal error: " << e.what() << "\n";
    return 1;
  }
}

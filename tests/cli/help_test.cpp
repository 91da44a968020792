#include <gtest/gtest.h>

#include "cli/cli_process.h"

namespace fragscope::test {
namespace {

TEST(CliHelp, ListsCommandsAndExitsZero) {
  auto result = run_cli({"help"});
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.out.find("Usage: fragscope-cli COMMAND"), std::string::npos);
}

TEST(CliHelp, UnknownCommandIsUsageError) {
  auto result = run_cli({"no-such-command"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.err.find("unknown command 'no-such-command'"), std::string::npos);
}

TEST(CliHelp, NoArgumentsPrintsHelpAndExitsTwo) {
  auto result = run_cli({});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.out.find("Commands:"), std::string::npos);
}

}  // namespace
}  // namespace fragscope::test

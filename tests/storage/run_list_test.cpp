#include "storage/db/run_list.h"

#include <gtest/gtest.h>

#include "engine/core/error.h"

namespace fragscope::storage {
namespace {

std::string error_of(std::string_view text) {
  try {
    parse_run_list(text);
  } catch (const InputError& error) {
    return error.what();
  }
  return {};
}

TEST(ParseRunList, CommasWithOrWithoutSpaces) {
  EXPECT_EQ(parse_run_list("3,7"), (std::vector<RunId>{RunId{3}, RunId{7}}));
  EXPECT_EQ(parse_run_list(" 3, 7 ,12"), (std::vector<RunId>{RunId{3}, RunId{7}, RunId{12}}));
  EXPECT_EQ(parse_run_list("5"), (std::vector<RunId>{RunId{5}}));
}

TEST(ParseRunList, AnythingElseQuotesTheItem) {
  EXPECT_NE(error_of("3,x").find("\"x\" is not a run id"), std::string::npos);
  EXPECT_NE(error_of("3,,7").find("\"\" is not a run id"), std::string::npos);
  EXPECT_NE(error_of("3,").find("\"\" is not a run id"), std::string::npos);
  EXPECT_NE(error_of("0").find("\"0\""), std::string::npos);
  EXPECT_NE(error_of("-4").find("\"-4\""), std::string::npos);
  EXPECT_NE(error_of("+4").find("\"+4\""), std::string::npos);
  EXPECT_NE(error_of("7x").find("\"7x\""), std::string::npos);
  EXPECT_NE(error_of("99999999999999999999").find("is not a run id"), std::string::npos);
  EXPECT_NE(error_of("").find("no run ids given"), std::string::npos);
  EXPECT_NE(error_of("  ").find("no run ids given"), std::string::npos);
}

}  // namespace
}  // namespace fragscope::storage

// Errors in a snapshot's allocator_settings name the field once: the allocator's reader already
// says "allocator_settings: 'KEY' ...", and replay once prefixed it again.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/replay/replay.h"

namespace fragscope::replay {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string error_of(const nlohmann::json& settings) {
  try {
    (void)config_from_settings(settings);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SettingsMessages, TheFieldIsNamedOnce) {
  const std::string wrong_type = error_of({{"max_split_size", "big"}});
  EXPECT_THAT(wrong_type, StartsWith("allocator_settings: 'max_split_size'"));
  EXPECT_THAT(wrong_type, Not(HasSubstr("allocator_settings: allocator_settings")));
  const std::string not_a_dict = error_of(nlohmann::json::array());
  EXPECT_THAT(not_a_dict, StartsWith("allocator_settings: expected a dict"));
  EXPECT_THAT(not_a_dict, Not(HasSubstr("allocator_settings: allocator_settings")));
}

TEST(SettingsMessages, DivisionsAboveInt64AreQuotedAsWritten) {
  // Read as int64, 2^64 - 1 looked negative and the message said it was not "non-negative".
  const std::string huge =
      error_of({{"roundup_power2_divisions", {{"1", std::numeric_limits<std::uint64_t>::max()}}}});
  EXPECT_THAT(huge, HasSubstr("needs an integer in [0, 2^63)"));
  EXPECT_THAT(huge, HasSubstr("got 18446744073709551615"));
  EXPECT_THAT(error_of({{"roundup_power2_divisions", {{"1", -2}}}}), HasSubstr("got -2"));
}

}  // namespace
}  // namespace fragscope::replay

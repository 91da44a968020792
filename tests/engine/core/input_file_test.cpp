// Reading user files: FIFOs and directories refused at once, deep JSON and out-of-range numbers
// refused with the file and the place, nothing recursing on hostile nesting.
#include "engine/core/input_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/core/error.h"

namespace fragscope {
namespace {

using ::testing::HasSubstr;

std::filesystem::path scratch(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("fragscope-input-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir / name;
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(InputFile, RefusesAFifoWithoutOpeningIt) {
  const auto fifo = scratch("pipe.json");
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Opening a FIFO with no writer blocks forever: the check must come before any open().
  const std::string message = error_of([&] { read_json_file(fifo, "experiment file"); });
  EXPECT_THAT(message, HasSubstr(fifo.string()));
  EXPECT_THAT(message, HasSubstr("FIFO"));
  std::filesystem::remove(fifo);
}

TEST(InputFile, RefusesADirectoryAndAMissingFile) {
  const auto dir = scratch("a-directory");
  std::filesystem::create_directories(dir);
  EXPECT_THAT(error_of([&] { require_regular_file(dir, "stats file"); }), HasSubstr("directory"));
  EXPECT_THAT(error_of([&] { require_regular_file(scratch("missing.json"), "stats file"); }),
              HasSubstr("no such file"));
}

TEST(InputFile, DeepNestingIsRefusedWithItsPlace) {
  const std::string deep = std::string(200'000, '[') + std::string(200'000, ']');
  const std::string message = error_of([&] { parse_json_text(deep, "deep.json"); });
  EXPECT_THAT(message, HasSubstr("deep.json: line 1, column 65: JSON nested deeper than 64"));
  // Within the limit it parses.
  EXPECT_NO_THROW(parse_json_text(std::string(64, '[') + std::string(64, ']'), "ok.json"));
  // Brackets inside strings do not count.
  EXPECT_NO_THROW(parse_json_text("{\"a\": \"" + std::string(1000, '[') + "\"}", "ok.json"));
}

TEST(InputFile, NumberOutOfRangeNamesTheFileAndPlace) {
  const std::string message =
      error_of([&] { parse_json_text("{\n  \"x\": 1e400\n}", "case.json"); });
  EXPECT_THAT(message, HasSubstr("case.json: line 2, column 8: the number 1e400 is out of range"));
  EXPECT_NO_THROW(parse_json_text("[1e300, -1e-400, 18446744073709551615]", "ok.json"));
}

TEST(InputFile, SyntaxErrorsAreInputErrorsWithoutNlohmannsPrefix) {
  const std::string message = error_of([&] { parse_json_text("{\"a\": }", "bad.json"); });
  EXPECT_THAT(message, HasSubstr("bad.json: not valid JSON: parse error at line 1"));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("[json.exception")));
}

TEST(InputFile, OversizedFileIsRefusedBeforeReading) {
  const auto file = scratch("big.json");
  {
    std::ofstream out(file);
    out << "[" << std::string(1000, ' ') << "]";
  }
  JsonLimits limits;
  limits.max_bytes = 100;
  EXPECT_THAT(error_of([&] { read_json_file(file, "stats file", limits); }),
              HasSubstr("1002 bytes; at most 100"));
  EXPECT_TRUE(read_json_file(file, "stats file").is_array());
}

}  // namespace
}  // namespace fragscope

#include "storage/db/database.h"

#include <gtest/gtest.h>

namespace fragscope::storage {
namespace {

class DatabaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db.exec("CREATE TABLE t(id INTEGER PRIMARY KEY, value TEXT, data BLOB)");
  }
  std::int64_t rows() { return db.query_int("SELECT count(*) FROM t"); }
  Database db{":memory:"};
};

TEST_F(DatabaseTest, BindsAndReadsEveryType) {
  auto insert = db.prepare("INSERT INTO t(id, value, data) VALUES (?, ?, ?)");
  const std::vector<std::uint8_t> blob = {0, 1, 2, 255};
  insert.bind_int(1, 7).bind_text(2, "seven").bind_blob(3, blob);
  insert.run();
  insert.reset();
  insert.bind_int(1, 8).bind_null(2).bind_blob(3, {});
  insert.run();

  auto query = db.prepare("SELECT id, value, data FROM t ORDER BY id");
  ASSERT_TRUE(query.step());
  EXPECT_EQ(query.column_int(0), 7);
  EXPECT_EQ(query.column_text(1), "seven");
  const auto read = query.column_blob(2);
  EXPECT_EQ(std::vector<std::uint8_t>(read.begin(), read.end()), blob);
  ASSERT_TRUE(query.step());
  EXPECT_TRUE(query.column_is_null(1));
  EXPECT_FALSE(query.column_is_null(2));  // an empty blob is not NULL
  EXPECT_TRUE(query.column_blob(2).empty());
  EXPECT_FALSE(query.step());
}

TEST_F(DatabaseTest, BadSqlNamesTheDatabaseAndTheStatement) {
  try {
    db.prepare("SELEKT 1");
    FAIL() << "expected DatabaseError";
  } catch (const DatabaseError& e) {
    EXPECT_NE(std::string(e.what()).find(":memory:"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("SELEKT"), std::string::npos);
  }
}

TEST_F(DatabaseTest, RefusesMoreThanOneStatement) {
  EXPECT_THROW(db.prepare("SELECT 1; DROP TABLE t"), DatabaseError);
  EXPECT_NO_THROW(db.prepare("SELECT 1;  "));
}

TEST_F(DatabaseTest, ConstraintViolationIsDatabaseError) {
  db.exec("INSERT INTO t(id) VALUES (1)");
  auto insert = db.prepare("INSERT INTO t(id) VALUES (1)");
  EXPECT_THROW(insert.run(), DatabaseError);
}

TEST_F(DatabaseTest, TransactionRollsBackUnlessCommitted) {
  {
    Transaction transaction(db);
    db.exec("INSERT INTO t(id) VALUES (1)");
  }
  EXPECT_EQ(rows(), 0);
  {
    Transaction transaction(db);
    db.exec("INSERT INTO t(id) VALUES (1)");
    transaction.commit();
  }
  EXPECT_EQ(rows(), 1);
}

TEST_F(DatabaseTest, ExceptionLeavingScopeRollsBack) {
  try {
    Transaction transaction(db);
    db.exec("INSERT INTO t(id) VALUES (2)");
    throw std::runtime_error("simulated failure");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(rows(), 0);
  EXPECT_FALSE(db.in_transaction());
}

TEST_F(DatabaseTest, DoubleCommitThrows) {
  Transaction transaction(db);
  transaction.commit();
  EXPECT_THROW(transaction.commit(), DatabaseError);
}

TEST(DatabaseOpen, MissingFileWithoutCreateIsClearError) {
  try {
    Database db("/nonexistent-dir/fragscope.db", OpenMode::read_write);
    FAIL() << "expected DatabaseError";
  } catch (const DatabaseError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/fragscope.db"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos);
  }
}

}  // namespace
}  // namespace fragscope::storage

#include <gtest/gtest.h>

#include <string>

#include "util/error.h"

namespace spindle {
namespace {

constexpr unsigned kCheckLine = __LINE__ + 3;  // the line of SPINDLE_CHECK below

int check_positive(int n) {
  SPINDLE_CHECK(n > 0, "n must be positive, got {}", n);
  return n;
}

TEST(ErrorTest, CheckPassesThrough) { EXPECT_EQ(check_positive(3), 3); }

TEST(ErrorTest, CheckThrowsWithMessageAndLocation) {
  try {
    check_positive(-2);
    FAIL() << "expected spindle::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "n must be positive, got -2");
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("n must be positive, got -2 [", 0), 0u) << what;
    EXPECT_NE(what.find("error_test.cc:" + std::to_string(kCheckLine) + "]"), std::string::npos)
        << what;
    EXPECT_EQ(e.where().line(), kCheckLine);
  }
}

TEST(ErrorTest, FailAlwaysThrows) {
  EXPECT_THROW(SPINDLE_FAIL("boom {}", 1), Error);
}

}  // namespace
}  // namespace spindle

// util/shared_library.h: the first library of a list that opens, typed symbols, and the errors
// that name what is missing (libm stands in for the vendor libraries, which need a GPU host).
#include "util/shared_library.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace spindle {
namespace {

using ::testing::HasSubstr;

TEST(SharedLibraryTest, TheFirstNameThatOpensIsUsedAndTheOthersAreSaid) {
  const OpenedLibrary lib = open_first_library({"libspindle-no-such-library.so.0", "libm.so.6"});
  ASSERT_NE(lib.handle, nullptr) << lib.failures;
  EXPECT_EQ(lib.path, "libm.so.6");
  EXPECT_THAT(lib.failures, HasSubstr("libspindle-no-such-library.so.0: "));
  double (*cosine)(double) = nullptr;
  std::string error;
  ASSERT_TRUE(resolve_symbol(lib.handle, "cos", cosine, error)) << error;
  EXPECT_EQ(cosine(0.0), 1.0);
  EXPECT_TRUE(error.empty());
}

TEST(SharedLibraryTest, AMissingSymbolIsFalseAndNamed) {
  const OpenedLibrary lib = open_first_library({"libm.so.6"});
  ASSERT_NE(lib.handle, nullptr) << lib.failures;
  void (*fn)() = nullptr;
  std::string error;
  EXPECT_FALSE(resolve_symbol(lib.handle, "spindle_no_such_symbol", fn, error));
  EXPECT_EQ(fn, nullptr);
  EXPECT_THAT(error, HasSubstr("no symbol spindle_no_such_symbol"));
}

TEST(SharedLibraryTest, NoNameOpensEveryFailureIsListed) {
  const OpenedLibrary lib = open_first_library({"libspindle-a.so", "libspindle-b.so"});
  EXPECT_EQ(lib.handle, nullptr);
  EXPECT_TRUE(lib.path.empty());
  EXPECT_THAT(lib.failures, HasSubstr("libspindle-a.so: "));
  EXPECT_THAT(lib.failures, HasSubstr("; libspindle-b.so: "));
}

}  // namespace
}  // namespace spindle

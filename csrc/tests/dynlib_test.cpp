#include <gtest/gtest.h>

#include "common/dynlib.h"

TEST(DynLib, MissingLibraryReportsErrorInsteadOfCrashing) {
  parallax::DynLib lib;
  EXPECT_FALSE(lib.open({"libparallax_does_not_exist.so.1"}));
  EXPECT_FALSE(lib.loaded());
  EXPECT_NE(lib.error().find("libparallax_does_not_exist.so.1"), std::string::npos);
  EXPECT_EQ(lib.symbol("anything"), nullptr);
}

TEST(DynLib, LoadsSystemLibraryAndFindsSymbol) {
  parallax::DynLib lib;
  ASSERT_TRUE(lib.open({"libm.so.6"}));
  EXPECT_NE(lib.symbol("cos"), nullptr);
  EXPECT_EQ(lib.symbol("parallax_no_such_symbol"), nullptr);
}

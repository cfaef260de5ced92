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

// An optional symbol that is missing leaves its pointer null and the table complete; a
// required one that is missing is named.
TEST(DynLib, OptionalSymbolsNeverMakeTheTableIncomplete) {
  parallax::DynLib lib;
  ASSERT_TRUE(lib.open({"libm.so.6"}));
  parallax::SymbolBinder binder(lib);
  double (*cosine)(double) = nullptr;
  double (*absent)(double) = reinterpret_cast<double (*)(double)>(0x1);
  binder.bind_optional(cosine, {"parallax_no_such_symbol", "cos"});
  binder.bind_optional(absent, {"parallax_no_such_symbol"});
  EXPECT_NE(cosine, nullptr);
  EXPECT_EQ(cosine(0.0), 1.0);
  EXPECT_EQ(absent, nullptr);
  EXPECT_TRUE(binder.complete());
  double (*required)(double) = nullptr;
  binder.bind(required, {"parallax_required_symbol"});
  EXPECT_FALSE(binder.complete());
  EXPECT_EQ(binder.error(), lib.path() + " lacks parallax_required_symbol");
}

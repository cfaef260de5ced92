// Token files: header checks, truncation, damaged ids, and how windows pack documents.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <vector>

#include "loader/token_file.h"
#include "loader_test_util.h"

using namespace parallax::loader;
using namespace parallax::loader::testing_util;

namespace {
std::string error_of(const std::string& path) {
  try {
    TokenFile file(path);
  } catch (const LoaderError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(LoaderTokenFile, ReadsHeaderAndTokens) {
  TempTokenFile f("read.bin", {5, 6, 7, 0, 8}, 1000, 0);
  TokenFile file(f.path);
  EXPECT_EQ(file.n_tokens(), 5u);
  EXPECT_EQ(file.vocab_size(), 1000u);
  EXPECT_EQ(file.eos_id(), 0u);
  EXPECT_EQ(file.tokens()[3], 0);
  EXPECT_EQ(file.tokens()[4], 8);
}

TEST(LoaderTokenFile, WindowCountIsFloorOfNMinusOneOverSeqLen) {
  TempTokenFile f("count.bin", std::vector<uint16_t>(17, 1));
  TokenFile file(f.path);
  EXPECT_EQ(file.num_windows(4), 4u);   // (17 - 1) / 4
  EXPECT_EQ(file.num_windows(5), 3u);   // 16 / 5
  EXPECT_EQ(file.num_windows(16), 1u);  // exactly one window of 17 tokens
  EXPECT_EQ(file.num_windows(17), 0u);
}

TEST(LoaderTokenFile, TruncatedFileIsNamed) {
  TempTokenFile f("truncated.bin", std::vector<uint16_t>(100, 3));
  ASSERT_EQ(::truncate(f.path.c_str(), 64 + 2 * 100 - 1), 0);
  const std::string message = error_of(f.path);
  EXPECT_NE(message.find(f.path), std::string::npos) << message;
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
  EXPECT_NE(message.find("100 tokens"), std::string::npos) << message;
  ASSERT_EQ(::truncate(f.path.c_str(), 10), 0);
  EXPECT_NE(error_of(f.path).find("less than the 64-byte header"), std::string::npos);
}

TEST(LoaderTokenFile, TrailingBytesBadMagicMissingAndEmptyAreErrors) {
  TempTokenFile f("bad.bin", std::vector<uint16_t>(10, 3));
  { std::ofstream(f.path, std::ios::app | std::ios::binary) << "xy"; }
  EXPECT_NE(error_of(f.path).find("damaged"), std::string::npos);

  { std::ofstream(f.path, std::ios::binary) << std::string(100, 'z'); }
  EXPECT_NE(error_of(f.path).find("bad magic"), std::string::npos);

  EXPECT_NE(error_of(temp_path("missing.bin")).find("cannot open"), std::string::npos);

  TempTokenFile empty("empty.bin", {});
  EXPECT_NE(error_of(empty.path).find("holds no tokens"), std::string::npos);
}

TEST(LoaderTokenFile, WindowsPackAcrossDocumentsKeepingEosInPlace) {
  const uint64_t seq = 8;
  TempTokenFile f("pack.bin", packed_documents(200, 0, 1000));
  TokenFile file(f.path);
  std::vector<int32_t> row(seq + 1);
  uint64_t eos_seen = 0;
  for (uint64_t w = 0; w < file.num_windows(seq); ++w) {
    file.copy_window(w, seq, row.data());
    for (uint64_t t = 0; t <= seq; ++t) {
      EXPECT_EQ(row[t], f.tokens[w * seq + t]);  // the file's tokens, in file order
      if (t > 0 && row[t] == 0) ++eos_seen;      // EOS as a target, where the file has it
    }
  }
  // Documents of 3, 4, 5, ... tokens: EOS at 3, 8, 14, ... Every target position 1..N' once.
  uint64_t expected = 0;
  for (uint64_t i = 1; i <= file.num_windows(seq) * seq; ++i) expected += f.tokens[i] == 0;
  EXPECT_EQ(eos_seen, expected);
  EXPECT_EQ(f.tokens[3], 0);
  EXPECT_EQ(f.tokens[8], 0);
  EXPECT_EQ(f.tokens[14], 0);
  EXPECT_GT(expected, 10u);
}

TEST(LoaderTokenFile, OutOfVocabularyIdIsReportedWithItsPosition) {
  std::vector<uint16_t> tokens(50, 4);
  tokens[21] = 1000;
  TempTokenFile f("oov.bin", tokens, 1000, 0);
  TokenFile file(f.path);
  std::vector<int32_t> row(11);
  file.copy_window(0, 10, row.data());  // tokens 0..10 are fine
  try {
    file.copy_window(2, 10, row.data());  // tokens 20..30
    FAIL() << "expected a LoaderError";
  } catch (const LoaderError& e) {
    EXPECT_NE(std::string(e.what()).find("token id 1000 at position 21"), std::string::npos) << e.what();
  }
}

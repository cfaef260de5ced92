#pragma once
// Helpers shared by the loader tests: temporary token files with known contents.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "loader/token_file.h"

namespace parallax::loader::testing_util {

inline std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "parallax_" + std::to_string(::getpid()) + "_" + name;
}

// Documents of lengths 3, 4, 5, ... tokens (ids 1..), each followed by `eos`, until `n` tokens.
inline std::vector<uint16_t> packed_documents(uint64_t n, uint16_t eos, uint16_t vocab) {
  std::vector<uint16_t> tokens;
  uint64_t length = 3;
  uint16_t next = 1;
  while (tokens.size() < n) {
    for (uint64_t i = 0; i < length && tokens.size() < n; ++i) {
      tokens.push_back(next);
      next = static_cast<uint16_t>(next % (vocab - 1) + 1);  // never eos (0)
    }
    if (tokens.size() < n) tokens.push_back(eos);
    ++length;
  }
  return tokens;
}

struct TempTokenFile {
  std::string path;
  std::vector<uint16_t> tokens;
  TempTokenFile(const std::string& name, std::vector<uint16_t> t, uint32_t vocab = 1000, uint32_t eos = 0)
      : path(temp_path(name)), tokens(std::move(t)) {
    write_token_file(path, tokens.data(), tokens.size(), vocab, eos);
  }
  ~TempTokenFile() { std::remove(path.c_str()); }
};

}  // namespace parallax::loader::testing_util

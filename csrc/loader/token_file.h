#pragma once
// A prepared token file (written by `parallax data prepare`), memory-mapped read-only.
//
// Layout, little-endian: a 64-byte header, then n_tokens uint16 token ids.
//   offset  0  char[8]  magic "PLXTOKNS"
//   offset  8  uint32   format version (1)
//   offset 12  uint32   bytes per token (2)
//   offset 16  uint64   n_tokens
//   offset 24  uint32   vocab_size of the tokenizer that wrote it
//   offset 28  uint32   eos_id (<|endoftext|>)
//   offset 32  32 bytes reserved, zero
// The file size must be exactly 64 + 2 * n_tokens: anything else is a truncated or damaged
// file, reported with its path.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace parallax::loader {

constexpr char kMagic[8] = {'P', 'L', 'X', 'T', 'O', 'K', 'N', 'S'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderBytes = 64;

// Bad input the user can fix (a missing, truncated or corrupt file; an impossible request).
class LoaderError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class TokenFile {
 public:
  // Maps `path` and checks its header and size; throws LoaderError naming the file.
  explicit TokenFile(const std::string& path);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  const uint16_t* tokens() const { return tokens_; }
  uint64_t n_tokens() const { return n_tokens_; }
  uint32_t vocab_size() const { return vocab_size_; }
  uint32_t eos_id() const { return eos_id_; }

  // Windows of seq_len + 1 tokens starting at multiples of seq_len: floor((N - 1) / seq_len).
  uint64_t num_windows(uint64_t seq_len) const;

  // Copies window `window` (tokens [window*seq_len, window*seq_len + seq_len]) into `out` as
  // int32. Throws LoaderError when a token id is >= vocab_size (a damaged file).
  void copy_window(uint64_t window, uint64_t seq_len, int32_t* out) const;

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  uint64_t n_tokens_ = 0;
  uint32_t vocab_size_ = 0;
  uint32_t eos_id_ = 0;
};

// Writes a token file (tests and the benchmark build their inputs with it; Python's
// parallax.data.prepare writes the same layout).
void write_token_file(const std::string& path, const uint16_t* tokens, uint64_t n_tokens,
                      uint32_t vocab_size, uint32_t eos_id);

}  // namespace parallax::loader

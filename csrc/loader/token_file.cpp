#include "loader/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace parallax::loader {

namespace {

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t token_bytes;
  uint64_t n_tokens;
  uint32_t vocab_size;
  uint32_t eos_id;
  uint8_t reserved[32];
};
static_assert(sizeof(Header) == kHeaderBytes, "the header is 64 bytes");

const char* kFix = "; re-run `parallax data prepare` (with --force) to rebuild it";

[[noreturn]] void fail(const std::string& path, const std::string& what, bool fixable = true) {
  throw LoaderError("token file " + path + ": " + what + (fixable ? kFix : ""));
}

}  // namespace

TokenFile::TokenFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open (") + std::strerror(errno) + ")", false);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail(path, std::string("cannot stat (") + std::strerror(err) + ")", false);
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderBytes) {
    ::close(fd);
    fail(path, "truncated: " + std::to_string(size) + " bytes, less than the 64-byte header");
  }
  map_ = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  int map_err = errno;
  ::close(fd);  // the mapping stays valid without the descriptor
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    fail(path, std::string("cannot map (") + std::strerror(map_err) + ")", false);
  }
  map_bytes_ = size;
  Header h;
  std::memcpy(&h, map_, sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) fail(path, "not a Parallax token file (bad magic)");
  if (h.version != kFormatVersion)
    fail(path, "format version " + std::to_string(h.version) + ", this Parallax reads version " +
                   std::to_string(kFormatVersion));
  if (h.token_bytes != 2) fail(path, std::to_string(h.token_bytes) + "-byte tokens, expected 2");
  const uint64_t expected = kHeaderBytes + 2 * h.n_tokens;
  if (h.n_tokens > (UINT64_MAX - kHeaderBytes) / 2 || size != expected)
    fail(path, std::string(size < expected ? "truncated" : "damaged") + ": the header promises " +
                   std::to_string(h.n_tokens) + " tokens (" + std::to_string(expected) +
                   " bytes) but the file has " + std::to_string(size) + " bytes");
  if (h.n_tokens == 0) fail(path, "holds no tokens");
  if (h.vocab_size == 0 || h.vocab_size > 65536 || h.eos_id >= h.vocab_size)
    fail(path, "damaged header (vocab_size " + std::to_string(h.vocab_size) + ", eos_id " +
                   std::to_string(h.eos_id) + ")");
  tokens_ = reinterpret_cast<const uint16_t*>(static_cast<const char*>(map_) + kHeaderBytes);
  n_tokens_ = h.n_tokens;
  vocab_size_ = h.vocab_size;
  eos_id_ = h.eos_id;
}

TokenFile::~TokenFile() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

uint64_t TokenFile::num_windows(uint64_t seq_len) const {
  if (seq_len == 0 || n_tokens_ < 1) return 0;
  return (n_tokens_ - 1) / seq_len;
}

void TokenFile::copy_window(uint64_t window, uint64_t seq_len, int32_t* out) const {
  const uint16_t* src = tokens_ + window * seq_len;
  uint32_t largest = 0;
  // One pass that both widens and finds the largest id; the compiler vectorizes it.
  for (uint64_t t = 0; t <= seq_len; ++t) {
    const uint32_t id = src[t];
    out[t] = static_cast<int32_t>(id);
    largest = id > largest ? id : largest;
  }
  if (largest >= vocab_size_) {
    uint64_t at = 0;
    while (src[at] < vocab_size_) ++at;
    throw LoaderError("token file " + path_ + ": token id " + std::to_string(src[at]) +
                      " at position " + std::to_string(window * seq_len + at) +
                      " is not below the vocabulary size " + std::to_string(vocab_size_) + kFix);
  }
}

void write_token_file(const std::string& path, const uint16_t* tokens, uint64_t n_tokens,
                      uint32_t vocab_size, uint32_t eos_id) {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kFormatVersion;
  h.token_bytes = 2;
  h.n_tokens = n_tokens;
  h.vocab_size = vocab_size;
  h.eos_id = eos_id;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw LoaderError("cannot write " + path + ": " + std::strerror(errno));
  bool ok = std::fwrite(&h, sizeof h, 1, f) == 1 &&
            (n_tokens == 0 || std::fwrite(tokens, 2, n_tokens, f) == n_tokens);
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) throw LoaderError("cannot write " + path);
}

}  // namespace parallax::loader

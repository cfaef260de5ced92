#pragma once
// The order in which training windows are drawn: a seeded Fisher–Yates permutation per
// epoch (docs/data.md states the algorithm so that anyone can re-derive it).
//
//   mix64(z)      the SplitMix64 finalizer
//   rng state     s0 = mix64(mix64(seed) + epoch); next() = mix64(s += 0x9E3779B97F4A7C15)
//   below(n)      uniform in [0, n): draw x until x >= 2^64 mod n, return x mod n
//   permutation   p = [0, 1, ..., n-1]; for i = n-1 down to 1: swap(p[i], p[below(i + 1)])
//   batch k       global draws g = k*B ... k*B + B - 1; window = perm(epoch g / n)[g mod n]
//
// Integer arithmetic only, so every machine, compiler and framework sees the same order.
#include <cstdint>
#include <vector>

namespace parallax::loader {

uint64_t mix64(uint64_t z);

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t next();
  uint64_t below(uint64_t n);  // n >= 1

 private:
  uint64_t state_;
};

// The permutation of [0, n) that orders epoch `epoch` of seed `seed`.
std::vector<uint64_t> window_order(uint64_t n, uint64_t seed, uint64_t epoch);

// Maps a global draw index to a window, keeping the current epoch's permutation.
class WindowSampler {
 public:
  WindowSampler(uint64_t n_windows, uint64_t seed);
  uint64_t n_windows() const { return n_; }
  uint64_t window(uint64_t draw);

 private:
  uint64_t n_;
  uint64_t seed_;
  uint64_t epoch_ = UINT64_MAX;
  std::vector<uint64_t> order_;
};

}  // namespace parallax::loader

#include "loader/sampler.h"

#include <numeric>
#include <utility>

namespace parallax::loader {

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::next() {
  state_ += 0x9E3779B97F4A7C15ULL;
  return mix64(state_);
}

uint64_t SplitMix64::below(uint64_t n) {
  // Rejecting the lowest 2^64 mod n values leaves a multiple of n outcomes: no modulo bias.
  const uint64_t threshold = (0 - n) % n;
  uint64_t x = next();
  while (x < threshold) x = next();
  return x % n;
}

std::vector<uint64_t> window_order(uint64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<uint64_t> order(n);
  std::iota(order.begin(), order.end(), uint64_t{0});
  SplitMix64 rng(mix64(mix64(seed) + epoch));
  for (uint64_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  return order;
}

WindowSampler::WindowSampler(uint64_t n_windows, uint64_t seed) : n_(n_windows), seed_(seed) {}

uint64_t WindowSampler::window(uint64_t draw) {
  const uint64_t epoch = draw / n_;
  if (epoch != epoch_) {
    order_ = window_order(n_, seed_, epoch);
    epoch_ = epoch;
  }
  return order_[draw % n_];
}

}  // namespace parallax::loader

#include "probe/gemm_inputs.h"

namespace parallax {

namespace {

// splitmix64: tiny, fast, and good enough to make operands look like data.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

// sign | exponent 125 or 126 (2^-2, 2^-1) | 7 random mantissa bits.
uint16_t random_bf16(uint64_t r) {
  const uint16_t sign = (r & 1) << 15;
  const uint16_t exponent = static_cast<uint16_t>(125 + ((r >> 1) & 1)) << 7;
  return sign | exponent | ((r >> 2) & 0x7F);
}

// E4M3 (bias 7): exponent field 5..8 (2^-2 … 2^1), never 0 (zero/subnormal) nor NaN (0x7F).
uint8_t random_e4m3(uint64_t r) {
  const uint8_t sign = (r & 1) << 7;
  const uint8_t exponent = static_cast<uint8_t>(5 + ((r >> 1) & 3)) << 3;
  return sign | exponent | ((r >> 3) & 7);
}

// E2M1 nibble: sign | magnitude code 1..7 (0.5, 1, 1.5, 2, 3, 4, 6); code 0 is zero.
uint8_t random_e2m1(uint64_t r) { return static_cast<uint8_t>(((r & 1) << 3) | (1 + (r >> 1) % 7)); }

// Unsigned E4M3 scale: exponent field 6 or 7 (0.5 … 1.875), sign bit clear.
uint8_t random_ue4m3(uint64_t r) { return static_cast<uint8_t>(((6 + (r & 1)) << 3) | ((r >> 1) & 7)); }

}  // namespace

size_t element_bytes(Element element, int64_t count) {
  const auto n = static_cast<size_t>(count);
  switch (element) {
    case Element::bf16: return 2 * n;
    case Element::e2m1: return (n + 1) / 2;
    default: return n;
  }
}

void fill_random(Element element, unsigned char* data, size_t size, uint64_t seed) {
  Rng rng{seed};
  for (size_t i = 0; i < size;) {
    const uint64_t r = rng.next();
    switch (element) {
      case Element::bf16: {
        const uint16_t v = random_bf16(r);
        data[i++] = v & 0xFF;  // little endian, as the GPU reads it
        if (i < size) data[i++] = v >> 8;
        break;
      }
      case Element::e4m3: data[i++] = random_e4m3(r); break;
      case Element::e2m1: data[i++] = static_cast<uint8_t>(random_e2m1(r) | (random_e2m1(r >> 16) << 4)); break;
      case Element::ue4m3: data[i++] = random_ue4m3(r); break;
    }
  }
}

}  // namespace parallax

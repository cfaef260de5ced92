#pragma once
// Random GEMM operands, generated on the host. Never zeros: a GEMM on zeros draws less power
// and can clock higher than one on real data, which would flatter the ceiling.
#include <cstddef>
#include <cstdint>

namespace parallax {

enum class Element {
  bf16,   // 2 bytes
  e4m3,   // fp8 E4M3, 1 byte
  e2m1,   // fp4 E2M1, two per byte (NVFP4 values)
  ue4m3,  // unsigned E4M3, 1 byte (NVFP4 block scales)
};

// Bytes that `count` elements occupy (E2M1 rounds up to whole bytes).
size_t element_bytes(Element element, int64_t count);

// Fills `size` bytes with finite, non-zero values of `element`, magnitudes near 1 (so long
// sums neither overflow nor vanish); the same seed gives the same bytes.
//   bf16  ±[0.25, 1)      e4m3  ±[0.25, 3.75]      e2m1  ±{0.5 … 6}      ue4m3  [0.5, 1.875]
void fill_random(Element element, unsigned char* data, size_t size, uint64_t seed);

}  // namespace parallax

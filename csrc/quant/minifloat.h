#pragma once
// Small floating-point formats, encoded and decoded on the CPU exactly as a later CUDA
// kernel must (docs: csrc/quant/README.md).
//
//   E2M1 (FP4)  sign | 2 exp | 1 mantissa, bias 1, no inf/NaN. Magnitudes of codes 0..7:
//               0, 0.5, 1, 1.5, 2, 3, 4, 6.
//   E4M3 (FP8)  bias 7, no inf; 0x7F/0xFF are NaN; max finite 448 (0x7E); min subnormal 2^-9.
//   E5M2 (FP8)  bias 15, IEEE-like; 0x7C = inf, 0x7D..0x7F NaN; max finite 57344 (0x7B);
//               min subnormal 2^-16.
//
// Encoding is round-to-nearest, ties to the even code, of the exact float32 value. The sign
// is always kept (-0.0 and negatives that round to zero give the signed zero code).
//   E2M1  |x| > 6 and ±inf saturate to ±6. NaN -> 0x7 (+6); the format has no NaN, the block
//         quantizer (nvfp4.h) carries NaN in the block scale instead.
//   E4M3  saturate=true (default): overflow and ±inf -> ±448. saturate=false: -> NaN.
//         NaN -> 0x7F | sign.
//   E5M2  saturate=false (default): values that round past 57344 (>= 61440) and ±inf -> ±inf.
//         saturate=true: -> ±57344 (inf input too). NaN -> 0x7F | sign.
#include <cstdint>

namespace parallax::quant {

enum class Fp8Format { kE4M3, kE5M2 };

uint8_t e2m1_encode(float x);
float e2m1_decode(uint8_t code);  // low 4 bits used

uint8_t e4m3_encode(float x, bool saturate = true);
float e4m3_decode(uint8_t code);
uint8_t e5m2_encode(float x, bool saturate = false);
float e5m2_decode(uint8_t code);

uint8_t fp8_encode(float x, Fp8Format f, bool saturate);
float fp8_decode(uint8_t code, Fp8Format f);
bool fp8_default_saturate(Fp8Format f);  // E4M3 true, E5M2 false

// The counter-based hash of stochastic rounding and of the Hadamard signs, integer-only so
// that every platform gets the same bits (G = 0x9E3779B97F4A7C15, all arithmetic mod 2^64):
//   mix64(z):  z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB;
//              z ^= z >> 31
//   hash32(seed, i) = uint32( mix64( mix64(seed + G) + i * G ) >> 32 )
//   uniform(seed, i) = float(hash32(seed, i) >> 8) * 2^-24      in [0, 1), exact in float
uint64_t quant_mix64(uint64_t z);
uint32_t hash32(uint64_t seed, uint64_t index);
float uniform01(uint64_t seed, uint64_t index);

}  // namespace parallax::quant

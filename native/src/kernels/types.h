// GGML block layouts and exact fp16 <-> fp32 conversions (software, round-to-nearest-even).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace np {

enum GgmlType : int { T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q8_0 = 8 };
constexpr int QK = 32;  // elements per Q4_0 / Q8_0 block

#pragma pack(push, 1)
struct BlockQ4_0 {
  uint16_t d;       // fp16 scale
  uint8_t qs[16];   // element j<16: low nibble of qs[j]; j>=16: high nibble of qs[j-16]
};
struct BlockQ8_0 {
  uint16_t d;       // fp16 scale
  int8_t qs[32];
};
#pragma pack(pop)
static_assert(sizeof(BlockQ4_0) == 18, "q4_0 block");
static_assert(sizeof(BlockQ8_0) == 34, "q8_0 block");

inline bool typeKnown(int t) { return t == T_F32 || t == T_F16 || t == T_Q4_0 || t == T_Q8_0; }
inline bool typeQuantized(int t) { return t == T_Q4_0 || t == T_Q8_0; }
// Bytes of a row of `cols` elements (cols must be a multiple of QK for quantised types).
inline size_t rowBytesOf(int t, int64_t cols) {
  switch (t) {
    case T_F32: return (size_t)cols * 4;
    case T_F16: return (size_t)cols * 2;
    case T_Q4_0: return (size_t)(cols / QK) * sizeof(BlockQ4_0);
    case T_Q8_0: return (size_t)(cols / QK) * sizeof(BlockQ8_0);
  }
  return 0;
}

inline uint32_t f32Bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float f32FromBits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// Exact fp16 -> fp32 (M. Dukhan's FP16 algorithm, as in ggml).
inline float fp16ToF32(uint16_t h) {
  const uint32_t w = (uint32_t)h << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = 0xE0u << 23;
  const float exp_scale = 0x1.0p-112f;
  const float normalized = f32FromBits((two_w >> 4) + exp_offset) * exp_scale;
  const uint32_t magic_mask = 126u << 23;
  const float magic_bias = 0.5f;
  const float denormalized = f32FromBits((two_w >> 17) | magic_mask) - magic_bias;
  const uint32_t cutoff = 1u << 27;
  const uint32_t result = sign | (two_w < cutoff ? f32Bits(denormalized) : f32Bits(normalized));
  return f32FromBits(result);
}

// fp32 -> fp16, round to nearest even (same algorithm as ggml's software path; needs
// no fp contraction, which the build disables).
inline uint16_t f32ToFp16(float f) {
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = f32Bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = f32FromBits((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = f32Bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

}  // namespace np

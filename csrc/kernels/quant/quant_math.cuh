// Per-token (per query row) FP8 quantization and dequantization, shared by the three quantization kernels.
//
// Numerics (docs/numerics_contract.md sections 2-3), all in fp32 from the bf16 inputs, bit-identical to snapmla_ext.reference:
//   amax = max_d |c_d|                 over the 512 content dims, NaN propagating (fmaxf would drop a NaN)
//   a    = min(max(amax, AMAX_FLOOR), CONTENT_MAX)   NaN propagating; +inf and anything above 2^16 -> 2^16
//   s    = a / 448                     IEEE division (the build has no --use_fast_math): the stored scale
//   inv  = 448 / a                     IEEE division, once per row
//   c8_d = e4m3(c_d * inv)              round to nearest even, saturate finite and inf to +-448, NaN stays NaN
//                                       (cvt.rn.satfinite = clamp to +-448, then cast): |c| > 2^16 saturates
//   r'_d = bf16(clamp(r_d, +-ROPE_MAX) * inv)   round to nearest even; NaN stays NaN, +-inf saturates (2^32)
// CONTENT_MAX and ROPE_MAX are the input range of kv_layout.h: they keep every decode result finite.
// c * inv is within one fp32 ulp of c / s; it replaces 576 correctly rounded divisions per row (about ten
// instructions each, which made append and Q-quant issue-bound: 76% of the copy ceiling, 12 us for Q-quant at
// b = 128, h_q = 128) by two divisions and 576 multiplies. The reference computes the same products.
// Dequantization: c = bf16(float(c8) * s), r = bf16(float(r') * s): one fp32 product, rounded once to bf16.
//
// Work split: one warp owns one 576-wide row. Lane l holds content chunks l and l + 32 (8 elements = 16 B of
// bf16 each, so one warp-wide load reads 512 contiguous bytes) and, for l < 8, RoPE chunk l. A warp therefore
// reads the whole 1152-B row with 3 coalesced 16-B loads per lane and reduces amax with 5 shuffles.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kv_layout.h"

namespace snapmla::quant {

namespace L = snapmla::kv_layout;

inline constexpr int WARP_SIZE = 32;
inline constexpr int CHUNK_ELEMS = 8;                             // one 16-B load of bf16
inline constexpr int CONTENT_CHUNKS = L::D_CONTENT / CHUNK_ELEMS;  // 64: two per lane
inline constexpr int ROPE_CHUNKS = L::D_ROPE / CHUNK_ELEMS;        // 8: lanes 0..7
inline constexpr int CONTENT_CHUNKS_PER_LANE = CONTENT_CHUNKS / WARP_SIZE;  // 2
static_assert(CONTENT_CHUNKS == CONTENT_CHUNKS_PER_LANE * WARP_SIZE, "content chunks split evenly over lanes");
static_assert(ROPE_CHUNKS <= WARP_SIZE, "one RoPE chunk per lane at most");

// One lane's share of a bf16 row: 8 bf16 per uint4.
struct RowChunks {
  uint4 content[CONTENT_CHUNKS_PER_LANE];  // content elements [8 (lane + 32 i), +8)
  uint4 rope;                               // RoPE elements [8 lane, +8), lanes < ROPE_CHUNKS only
};

// A NaN-propagating max: returns NaN when either argument is NaN (fmaxf returns the other argument).
__device__ __forceinline__ float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }
__device__ __forceinline__ float nan_min(float a, float b) { return (a < b || a != a) ? a : b; }

// A RoPE value clamped to [-ROPE_MAX, ROPE_MAX], NaN kept (fminf / fmaxf would turn a NaN into a bound).
__device__ __forceinline__ float clamp_rope(float x) {
  return fabsf(x) > L::ROPE_MAX ? copysignf(L::ROPE_MAX, x) : x;
}

__device__ __forceinline__ float2 bf162_to_float2(uint32_t packed) {
  __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(&packed);
  return __bfloat1622float2(v);
}

__device__ __forceinline__ uint32_t float2_to_bf162(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // each rounded to nearest even
  return *reinterpret_cast<const uint32_t*>(&v);
}

// row: (576,) bf16, 16-B aligned (the host checks the base pointer and the row strides). Plain loads with the
// default cache policy, so a q that the projection just wrote is served from L2.
// content: (512,) bf16 and rope: (64,) bf16, each 16-B aligned: the two halves of a row from two tensors (an
// engine's kv_c and k_pe), or of one row (load_row).
__device__ __forceinline__ RowChunks load_row_parts(const __nv_bfloat16* content, const __nv_bfloat16* rope, int lane) {
  const uint4* c = reinterpret_cast<const uint4*>(content);
  RowChunks r;
#pragma unroll
  for (int i = 0; i < CONTENT_CHUNKS_PER_LANE; ++i) r.content[i] = c[lane + i * WARP_SIZE];
  r.rope = lane < ROPE_CHUNKS ? reinterpret_cast<const uint4*>(rope)[lane] : make_uint4(0, 0, 0, 0);
  return r;
}

__device__ __forceinline__ RowChunks load_row(const __nv_bfloat16* row, int lane) {
  return load_row_parts(row, row + L::D_CONTENT, lane);
}

struct RowScale {
  float s;    // stored dequantization scale
  float inv;  // multiplier applied to the row
};

// amax over the lane's 16 content values, then over the warp: every lane gets s and inv.
__device__ __forceinline__ RowScale row_scale(const RowChunks& r) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < CONTENT_CHUNKS_PER_LANE; ++i) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(&r.content[i]);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float2 f = bf162_to_float2(w[j]);
      amax = nan_max(amax, nan_max(fabsf(f.x), fabsf(f.y)));
    }
  }
#pragma unroll
  for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2)
    amax = nan_max(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  const float bounded = nan_min(nan_max(amax, L::AMAX_FLOOR), L::CONTENT_MAX);
  return {__fdiv_rn(bounded, L::FP8_E4M3_MAX), __fdiv_rn(L::FP8_E4M3_MAX, bounded)};
}

// 8 bf16 content values -> 8 e4m3 bytes (little endian: element 0 in the low byte).
__device__ __forceinline__ uint2 quantize_content_chunk(const uint4& chunk, float inv) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&chunk);
  uint32_t out[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    uint32_t bytes = 0;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float2 f = bf162_to_float2(w[half * 2 + j]);
      float2 q = make_float2(__fmul_rn(f.x, inv), __fmul_rn(f.y, inv));
      uint32_t pair = __nv_cvt_float2_to_fp8x2(q, __NV_SATFINITE, __NV_E4M3);  // .x in the low byte
      bytes |= pair << (16 * j);
    }
    out[half] = bytes;
  }
  return make_uint2(out[0], out[1]);
}

// 8 bf16 values -> 8 bf16 values bf16(float(x) * f): RoPE pre-scaling (CLAMP: x saturated at +-ROPE_MAX first,
// f = inv) and its dequantization (f = s).
template <bool CLAMP>
__device__ __forceinline__ uint4 scale_bf16_chunk(const uint4& chunk, float f) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&chunk);
  uint32_t out[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float2 x = bf162_to_float2(w[j]);
    if constexpr (CLAMP) x = make_float2(clamp_rope(x.x), clamp_rope(x.y));
    out[j] = float2_to_bf162(__fmul_rn(x.x, f), __fmul_rn(x.y, f));
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// 8 e4m3 bytes -> 8 bf16 values bf16(float(c8) * s). e4m3 -> f16 is exact, f16 -> f32 is exact.
__device__ __forceinline__ uint4 dequant_content_chunk(const uint2& chunk, float s) {
  const uint32_t words[2] = {chunk.x, chunk.y};
  uint32_t out[4];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const __nv_fp8x2_storage_t pair = static_cast<__nv_fp8x2_storage_t>(words[half] >> (16 * j));
      __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
      float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
      out[half * 2 + j] = float2_to_bf162(__fmul_rn(f.x, s), __fmul_rn(f.y, s));
    }
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// Where one lane's share of a quantized row goes (or a cache token's comes from): its 8-B content pieces
// (content elements [8 (lane + 32 i), +8)), its 16-B RoPE chunk (lanes < ROPE_CHUNKS) and the scale.
template <typename Byte>
struct LaneBytes {
  Byte* content[CONTENT_CHUNKS_PER_LANE];
  Byte* rope;
  Byte* scale;
};

// q_quant's three outputs: content (512,) e4m3 8-B aligned, rope (64,) bf16 16-B aligned, one fp32 scale.
__device__ __forceinline__ LaneBytes<uint8_t> row_bytes(uint8_t* content, __nv_bfloat16* rope, float* scale,
                                                        int lane) {
  LaneBytes<uint8_t> d;
#pragma unroll
  for (int i = 0; i < CONTENT_CHUNKS_PER_LANE; ++i) d.content[i] = content + 8 * (lane + i * WARP_SIZE);
  d.rope = reinterpret_cast<uint8_t*>(rope) + 16 * lane;
  d.scale = reinterpret_cast<uint8_t*>(scale);
  return d;
}

// Token `slot` of a cache (num_blocks, PAGE_BYTES) uint8: its bytes in the page's Swizzle-128B image
// (kv_layout.h). An 8-B piece never straddles a 16-B swizzle chunk, and the warp's 16 lanes per 128-B tile row
// still cover whole rows, so every store / load of the warp stays a full 128-B segment.
template <typename Byte>
__device__ __forceinline__ LaneBytes<Byte> token_bytes(Byte* cache, int64_t slot, int lane) {
  LaneBytes<Byte> d;
#pragma unroll
  for (int i = 0; i < CONTENT_CHUNKS_PER_LANE; ++i)
    d.content[i] = cache + L::content_byte(slot, 8 * (lane + i * WARP_SIZE));
  d.rope = cache + L::rope_byte(slot, 16 * (lane % ROPE_CHUNKS));
  d.scale = cache + L::scale_byte(slot);
  return d;
}

// Quantize one row held by the warp and store it: content (512 e4m3), RoPE (64 bf16) and scale (fp32) go to
// three separate destinations (q_quant: three output tensors; k_append: the three parts of a cache page).
__device__ __forceinline__ void quantize_and_store_row(const RowChunks& r, int lane, const LaneBytes<uint8_t>& dst) {
  const RowScale rs = row_scale(r);
#pragma unroll
  for (int i = 0; i < CONTENT_CHUNKS_PER_LANE; ++i)
    *reinterpret_cast<uint2*>(dst.content[i]) = quantize_content_chunk(r.content[i], rs.inv);
  if (lane < ROPE_CHUNKS) *reinterpret_cast<uint4*>(dst.rope) = scale_bf16_chunk<true>(r.rope, rs.inv);
  if (lane == 0) *reinterpret_cast<float*>(dst.scale) = rs.s;
}

// Dequantize cache token `slot` into out_row (576,) bf16, 16-B aligned; the warp cooperates as in load_row.
// cache: (num_blocks, PAGE_BYTES) uint8. Every lane reads the same 4-B scale (one broadcast transaction).
__device__ __forceinline__ void dequant_token(const uint8_t* cache, int64_t slot, int lane, __nv_bfloat16* out_row) {
  const LaneBytes<const uint8_t> src = token_bytes(cache, slot, lane);
  const float s = *reinterpret_cast<const float*>(src.scale);
  uint2 c[CONTENT_CHUNKS_PER_LANE];
#pragma unroll
  for (int i = 0; i < CONTENT_CHUNKS_PER_LANE; ++i) c[i] = *reinterpret_cast<const uint2*>(src.content[i]);
  const uint4 r = lane < ROPE_CHUNKS ? *reinterpret_cast<const uint4*>(src.rope) : make_uint4(0, 0, 0, 0);
  uint4* out = reinterpret_cast<uint4*>(out_row);
#pragma unroll
  for (int i = 0; i < CONTENT_CHUNKS_PER_LANE; ++i) out[lane + i * WARP_SIZE] = dequant_content_chunk(c[i], s);
  if (lane < ROPE_CHUNKS) out[CONTENT_CHUNKS + lane] = scale_bf16_chunk<false>(r, s);
}

// A zero row for a token that is not in the cache (negative or out-of-range slot, past a request's pages).
__device__ __forceinline__ void store_zero_row(int lane, __nv_bfloat16* out_row) {
  uint4* out = reinterpret_cast<uint4*>(out_row);
  const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int i = 0; i < CONTENT_CHUNKS_PER_LANE; ++i) out[lane + i * WARP_SIZE] = zero;
  if (lane < ROPE_CHUNKS) out[CONTENT_CHUNKS + lane] = zero;
}

}  // namespace snapmla::quant

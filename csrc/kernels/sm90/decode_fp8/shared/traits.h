// Types of the sm_90a SnapMLA decode kernel: the per-KV-type traits, the shared-memory plan and the kernel
// parameter block (DecodeParams plus the TMA tensor maps built on the host).
#pragma once

#include <cstdint>

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "common/params.h"
#include "kernels/sm90/decode_fp8/shared/config.h"

namespace snapmla::sm90::decode_fp8 {

// What depends on the element type of the cached content (the K of QK and the V of PV). Only the FP8 cache of
// docs/numerics_contract.md section 2 is instantiated; a BF16-cache kernel adds a specialisation (2-byte content: 8 content tiles,
// BF16 WGMMAs, no V transpose since 16-bit WGMMA reads V through an MN-major descriptor).
template <typename KvElem>
struct KvTraits;

template <>
struct KvTraits<__nv_fp8_e4m3> {
  using Elem = __nv_fp8_e4m3;
  static constexpr int ELEM_BYTES = 1;
  static constexpr bool NEEDS_V_TRANSPOSE = true;  // 8-bit WGMMA takes K-major B only
  static constexpr CUtensorMapDataType TMA_DTYPE = CU_TENSOR_MAP_DATA_TYPE_UINT8;
};
static_assert(KvTraits<__nv_fp8_e4m3>::ELEM_BYTES == kvl::CONTENT_ELEM_BYTES, "kv_layout.h content type");

// Shared memory (every member starts on a multiple of 1024 B; the struct is 1024-aligned):
//   q_content   32768  (4 tiles: 64 rows x 128 B, Swizzle-128B)
//   q_rope       8192  (64 rows x 64 bf16, Swizzle-128B)
//   kv_content 131072  (4 stages x 4 tiles: 64 tokens x 128 B, Swizzle-128B)
//   kv_rope     32768  (4 stages x 64 tokens x 64 bf16, Swizzle-128B; after the owner's QK, the hand-off)
//   kv_scale     1024  (4 stages x 64 fp32)
//   row_state    2048  (per math warpgroup, per tile row: {m, inv, L~, 1 / L~}, read by columns in the epilogue)
//   barriers      ~130
inline constexpr int TRACE_SLOTS = 16;  // per math warpgroup, -DSNAPMLA_TRACE_PHASES only (trace/phase.cuh)

struct alignas(1024) SharedStorage {
  static constexpr int kStages = KV_STAGES, kQBufs = 1;
  uint8_t q_content[CONTENT_TILES][Q_CONTENT_TILE_BYTES];
  uint8_t q_rope[BLOCK_M * D_ROPE * 2];
  uint8_t kv_content[KV_STAGES][CONTENT_TILES][CONTENT_TILE_BYTES];
  uint8_t kv_rope[KV_STAGES][ROPE_TILE_BYTES];
  float kv_scale[KV_STAGES][BLOCK_N];
  float4 row_state[NUM_MATH_WG][BLOCK_M];
  uint64_t kv_full[KV_STAGES];   // TMA: KV_STAGE_TX_BYTES, one arrival (the producer thread)
  uint64_t kv_empty[KV_STAGES];  // MATH_THREADS arrivals: each math warpgroup once its PV of the block retired
  uint64_t xchg_full[KV_STAGES]; // WG_THREADS arrivals: the owner wrote the hand-off into kv_rope (exchange.cuh)
  uint64_t q_full[1];            // TMA: q_tx_bytes(rows_per_warp), one arrival
  uint64_t q_empty[1];           // MATH_THREADS arrivals (each math warpgroup's last QK of the piece retired)
#ifdef SNAPMLA_TRACE_PHASES
  unsigned long long trace[NUM_MATH_WG][TRACE_SLOTS];  // phase-trace builds only: trace/phase.cuh
#endif
#ifdef SNAPMLA_TRACE_CTA
  unsigned long long cta_q_ready;  // CTA-trace builds only: the ws softmax warpgroup's first query tile (trace/cta.cuh)
  unsigned long long cta_q_issue;  // ... and the producer's issue of that tile
#endif
};

// Dynamic shared memory requested at launch: the struct plus slack to align the base to 1024 B.
inline constexpr int SMEM_BYTES = static_cast<int>(sizeof(SharedStorage)) + 1024;
static_assert(SMEM_BYTES <= 232448, "sm_90 allows 227 KB of dynamic shared memory per CTA");
static_assert(offsetof(SharedStorage, q_rope) % 1024 == 0 && offsetof(SharedStorage, kv_content) % 1024 == 0 &&
                  offsetof(SharedStorage, kv_rope) % 1024 == 0,
              "swizzled tiles must sit on their swizzle atom");

// Kernel parameters: passed by value as a __grid_constant__ so the tensor maps live in parameter space.
struct KernelParams {
  DecodeParams p;
  CUtensorMap tm_q_content;   // (b, q_rows, 512) uint8, box (1, 64, 128), Swizzle-128B
  CUtensorMap tm_q_rope;      // (b, q_rows, 64) bf16, box (1, 64, 64), Swizzle-128B
};

}  // namespace snapmla::sm90::decode_fp8

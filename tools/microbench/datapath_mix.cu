// The floor of the ws decode kernel's per-page work on one SM when nothing waits for anything: its three roles run
// their shared-memory and tensor work for ITERS pages each, with no barrier between them, on the kernel's own
// SharedStorage and with the kernel's own primitives. Question it answers: the kernel takes ~2450 cycles per page
// and 64-row tile at h_q 128 (H100, docs/design.md section 2), with the shared-memory datapath 80 % busy; is that
// the mix's own throughput (no schedule can do much better), or does the kernel's chain of waits leave room?
// The 1.5x goal needs ~2070.
//
// Grid: one CTA per SM, 512 threads, the ws kernel's register split (ws/config.h). Roles, each over ITERS pages:
//   softmax-like (WG3)  the block's k scales (load_k_scales), QK as chains A and B (8 + 8 FP8 SS m64n64k32 and
//                       4 BF16 SS m64n64k16, ws/softmax_wg.cuh), both retired, their fp32 sum, P8 packing and the P^T
//                       stores of the hand-off (publish_pt) and its proxy fence; no softmax arithmetic beyond that;
//   PV (WG0, WG1)       pv_block_lean of block_pv.cuh as the kernel runs it (4 m-tiles of 2 RS QGMMA, V^T by
//                       ldmatrix.trans, the fold scales, the fp32 folds), without its stage release;
//   producer (WG2)      lane 0 bulk-loads one page (41216 B, the kernel's three copies) per iteration from an
//                       L2-resident source, two in flight.
// The math roles read stages 0 and 1 (page it % 2); the producer writes stages 2 and 3. Values are zeros.
// With --qk-pairs the softmax-like role is candidate D2's (docs/design.md section 4): pages in pairs, each pair's QK
// one chain of 16 FP8 SS m64n128k32 and 4 BF16 SS m64n128k16 over stages 0 and 1 taken as one interleaved pair
// (content k-tile c of the pair: the 16 KB at 16 KB x c, 128 token rows; RoPE: both stages' 8 KB), retired, its
// P8 packing and both pages' P^T stores. The other roles are unchanged (PV still folds every page).
// With --b-in-pv the mix is candidate H's (docs/design.md section 4): the softmax-like role issues chain A only and
// adds chain B from a 16 KB fp32 buffer behind SharedStorage (8 LDS.128 per thread and page); PV warpgroup
// page % 2 issues chain B before its PV of the page, retires it and stores it there (8 STS.128). Is the extra
// shared-memory traffic (+256 wavefronts per page) paid for by the shorter softmax-like role?
// Printed per role mask (1 softmax-like, 2 PV, 4 producer; 7 all): cycles per page of each role, median over the
// CTAs (clock64 from its first to its last page), the softmax-like role's cycles per page inside its WGMMA issue
// (first arrive to last commit: 477 of 940 alone on the H100, 2026-12-07, ~75 % of the chains' 640 tensor cycles)
// and chain B's part of it (344 of the 477 alone: a queue of ~5 WGMMAs ahead of the warp, not a fixed cost per WGMMA;
// 0 with --qk-pairs), and the slowest role's.
//   build (CUTLASS: the headers setup.py finds, e.g. third_party/cutlass or the nvidia-cutlass package's source/):
//          nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 -I csrc -I $CUTLASS/include -o /tmp/datapath_mix \
//            tools/microbench/datapath_mix.cu
//   run:   timeout 120 /tmp/datapath_mix [--qk-pairs | --b-in-pv]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "host_timing.h"
#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/tma.cuh"
#include "kernels/sm90/decode_fp8/shared/block_pv.cuh"
#include "kernels/sm90/decode_fp8/shared/exchange.cuh"
#include "kernels/sm90/decode_fp8/shared/kernel_prologue.cuh"
#include "kernels/sm90/decode_fp8/shared/qk_steps.cuh"
#include "kernels/sm90/decode_fp8/shared/schedule.cuh"
#include "kernels/sm90/decode_fp8/shared/softmax.cuh"
#include "kernels/sm90/decode_fp8/ws/config.h"
#include "kernels/sm90/decode_fp8/ws/softmax_wg.cuh"  // issue_chain_a / issue_chain_b, as the kernel issues them
#include "kv_layout.h"

using namespace snapmla::sm90;
using namespace snapmla::sm90::decode_fp8;
namespace kvl = snapmla::kv_layout;

namespace {

using microbench::check;

constexpr int ITERS = 512;       // pages per role and CTA
constexpr int SRC_PAGES = 256;   // 10.5 MB of source pages: L2-resident after the first launch
constexpr int ROLES = 3;         // softmax-like, PV (warpgroup 0's clock), producer
constexpr int SLOTS = ROLES + 2;  // + the softmax-like role's cycles inside its WGMMA issue (arrive to commit),
                                  // all of it and chain B's part

// D2's QK per pair of pages (header). The accumulator's first 32 values are page a's columns in the N = 64 fragment
// layout and the last 32 page b's, so each half packs and publishes as one page does.
__device__ __forceinline__ void softmax_like_pairs(SharedStorage& ss, float& sink, long long& issue) {
  const auto [warp, lane, t, row0] = math_thread();
  constexpr uint32_t PAIR_TILE_BYTES = 2 * CONTENT_TILE_BYTES;  // k-tile c of both pages: 128 rows x 128 B
  static_assert(sizeof(ss.kv_content[0]) == CONTENT_TILES * CONTENT_TILE_BYTES && sizeof(ss.kv_rope[0]) == 8192,
                "stages 0 and 1 are contiguous: 4 pair k-tiles of 16 KB, and 16 KB of RoPE for 128 rows");
  float acc[64];
  for (int it = 0; it < ITERS / 2; ++it) {
    float ks[16];
    load_k_scales(ss.kv_scale[0], t, ks);
    const uint64_t q_desc = q_content_desc(ss), qr_desc = q_rope_desc(ss);
    const uint64_t k_desc = make_smem_desc(smem_u32(ss.kv_content[0]), QK_DESC_SBO, SmemSwizzle::B128);
    const uint64_t kr_desc = make_smem_desc(smem_u32(ss.kv_rope[0]), QK_DESC_SBO, SmemSwizzle::B128);
    const long long i0 = clock64();
    wgmma_fence_operands(acc);
    cute::warpgroup_arrive();
#pragma unroll
    for (int kk = 0; kk < QK_CONTENT_STEPS; ++kk) {
      const uint32_t in_row = (kk % STEPS_PER_SWIZZLE_ROW) * K_STEP_BYTES;
      const uint32_t q_off16 = ((kk / STEPS_PER_SWIZZLE_ROW) * CONTENT_TILE_BYTES + in_row) >> 4;
      const uint32_t k_off16 = ((kk / STEPS_PER_SWIZZLE_ROW) * PAIR_TILE_BYTES + in_row) >> 4;
      detail::fma_ss<gmma::MMA_64x128x32_F32E4M3E4M3_SS_TN<>>(acc, q_desc + q_off16, k_desc + k_off16, kk > 0,
                                                              std::make_index_sequence<64>{});
    }
#pragma unroll
    for (int kk = 0; kk < QK_ROPE_STEPS; ++kk) {
      const uint32_t off16 = (kk * K_STEP_BYTES) >> 4;
      detail::fma_ss<gmma::MMA_64x128x16_F32BF16BF16_SS<gmma::Major::K, gmma::Major::K>>(
          acc, qr_desc + off16, kr_desc + off16, 1, std::make_index_sequence<64>{});
    }
    cute::warpgroup_commit_batch();
    issue += clock64() - i0;
    cute::warpgroup_wait<0>();
    wgmma_fence_operands(acc);
#pragma unroll
    for (int k = 0; k < 64; ++k) acc[k] *= ks[2 * ((k % 32) / 4) + k % 2];
    const float inv[2] = {1.f, 1.f};
#pragma unroll
    for (int page = 0; page < 2; ++page) {
      uint32_t p[8];
      pack_p(*reinterpret_cast<const float(*)[32]>(acc + 32 * page), inv, p);
      publish_pt(smem_u32(ss.kv_rope[page]), p, row0, t);
    }
    fence_proxy_async_smem();
    sink += acc[0] + acc[63];
  }
}

// Candidate H (--b-in-pv, docs/design.md section 4): chain B of each page issued by PV warpgroup page % 2, retired
// and stored in fp32 into a 16 KB buffer behind SharedStorage (thread t's 32 values as qkb[k4][t]); the softmax-like
// role issues chain A only and reads chain B from the buffer. No barrier orders them (the floor of the mix: zeros).
__device__ __forceinline__ float4* chain_b_buffer(SharedStorage& ss) {
  return reinterpret_cast<float4*>(reinterpret_cast<uint8_t*>(&ss) + sizeof(SharedStorage));
}
constexpr int CHAIN_B_BUFFER_BYTES = 8 * WG_THREADS * 16;  // 16 KB

// issue: clock64 cycles from the first WGMMA's arrive to the last commit, summed over the pages: whether issuing
// the chains holds the warpgroup up while the PV role's WGMMAs occupy the tensor pipe. issue_b: chain B's part
// (its arrive to its commit), which tells a queue of WGMMAs ahead from a fixed cost per WGMMA: with a queue of q
// WGMMAs of 32 tensor cycles, chain A (8) issues in ~(8 - q) x 32 cycles and chain B (12) in ~12 x 32 behind A's
// queued ones; at a fixed cost c per WGMMA, 8 c and 12 c. B_IN_PV: candidate H's role (chain A only, chain B's
// values from the buffer; issue_b stays 0).
template <bool B_IN_PV>
__device__ __forceinline__ void softmax_like(SharedStorage& ss, float& sink, long long& issue, long long& issue_b) {
  const auto [warp, lane, t, row0] = math_thread();
  const float4* qkb = chain_b_buffer(ss) + threadIdx.x % WG_THREADS;
  float acc_a[32], acc_b[32];
  for (int it = 0; it < ITERS; ++it) {
    const int stage = it % 2;
    float ks[16];
    load_k_scales(ss.kv_scale[stage], t, ks);
    const long long i0 = clock64();
    ws::issue_chain_a(acc_a, ss, stage);
    const long long ib = clock64();
    if constexpr (!B_IN_PV) ws::issue_chain_b(acc_b, ss, stage);
    const long long i1 = B_IN_PV ? ib : clock64();
    issue += i1 - i0;
    issue_b += i1 - ib;
    cute::warpgroup_wait<0>();
    wgmma_fence_operands(acc_a);
    if constexpr (B_IN_PV) {
#pragma unroll
      for (int k4 = 0; k4 < 8; ++k4) {
        const float4 b = qkb[k4 * WG_THREADS];
        acc_b[4 * k4] = b.x, acc_b[4 * k4 + 1] = b.y, acc_b[4 * k4 + 2] = b.z, acc_b[4 * k4 + 3] = b.w;
      }
    } else {
      wgmma_fence_operands(acc_b);
    }
    float s[32];
#pragma unroll
    for (int k = 0; k < 32; ++k) s[k] = (acc_a[k] + acc_b[k]) * ks[2 * (k / 4) + k % 2];
    uint32_t p[8];
    const float inv[2] = {1.f, 1.f};
    pack_p(s, inv, p);
    publish_pt(smem_u32(ss.kv_rope[stage]), p, row0, t);
    fence_proxy_async_smem();
    sink += s[0] + s[31];  // static indices: a dynamic one would put s in local memory
  }
}

// Chain B of the page in stage `stage`, issued, retired and stored by a PV warpgroup (--b-in-pv).
__device__ __forceinline__ void pv_chain_b(SharedStorage& ss, int stage) {
  float acc[32];
  ws::issue_chain_b(acc, ss, stage);
  cute::warpgroup_wait<0>();
  wgmma_fence_operands(acc);
  float4* qkb = chain_b_buffer(ss) + threadIdx.x % WG_THREADS;
#pragma unroll
  for (int k4 = 0; k4 < 8; ++k4)
    qkb[k4 * WG_THREADS] = make_float4(acc[4 * k4], acc[4 * k4 + 1], acc[4 * k4 + 2], acc[4 * k4 + 3]);
}

__device__ __forceinline__ void pv_role(SharedStorage& ss, int pv, bool b_in_pv, float& sink) {
  const auto [warp, lane, t, row0] = math_thread();
  float o[PV_M_TILES][32];
#pragma unroll
  for (int m = 0; m < PV_M_TILES; ++m) {
#pragma unroll
    for (int k = 0; k < 32; ++k) o[m][k] = 0.f;
  }
#pragma unroll 1
  for (int it = 0; it < ITERS; ++it) {
    if (b_in_pv && it % 2 == pv) pv_chain_b(ss, it % 2);
    pv_block_lean<false>(o, ss, it % 2, pv, warp, lane, BLOCK_N, false);
  }
#pragma unroll
  for (int m = 0; m < PV_M_TILES; ++m) sink += o[m][0] + o[m][31];
}

__device__ __forceinline__ void producer(SharedStorage& ss, const uint8_t* src) {
  for (int it = 0; it < ITERS; ++it) {
    const int stage = 2 + it % 2;
    uint64_t* bar = &ss.kv_full[stage];
    if (it >= 2) mbarrier_wait(bar, ((it - 2) / 2) & 1);
    mbarrier_arrive_expect_tx(bar, kvl::PAGE_BYTES);
    const uint8_t* pg = src + static_cast<size_t>(it % SRC_PAGES) * kvl::PAGE_BYTES;
    bulk_load(ss.kv_content[stage], pg + kvl::CONTENT_OFFSET, CONTENT_TILES * CONTENT_TILE_BYTES, bar);
    bulk_load(ss.kv_rope[stage], pg + kvl::ROPE_OFFSET, ROPE_TILE_BYTES, bar);
    bulk_load(ss.kv_scale[stage], pg + kvl::SCALE_OFFSET, BLOCK_N * kvl::SCALE_TOKEN_BYTES, bar);
  }
  for (int it = ITERS - 2; it < ITERS; ++it) mbarrier_wait(&ss.kv_full[2 + it % 2], (it / 2) & 1);
}

enum class QkMode { kChains, kPairs, kBInPv };  // the softmax-like role's QK: as the kernel, D2, H (header)

__global__ void __launch_bounds__(ws::WS_THREADS, 1) mix_kernel(const uint8_t* src, int mask, QkMode qk,
                                                               long long* cycles, float* sink) {
  extern __shared__ uint8_t smem_raw[];
  SharedStorage& ss = aligned_storage<SharedStorage>(smem_raw);
  // Zeros everywhere the roles read (finite operands; the tensor cores' timing does not depend on values).
  for (int i = threadIdx.x; i < static_cast<int>((sizeof(SharedStorage) + CHAIN_B_BUFFER_BYTES) / 4); i += blockDim.x)
    reinterpret_cast<uint32_t*>(&ss)[i] = 0u;
  if (threadIdx.x == 0) {
    for (int s = 0; s < KV_STAGES; ++s) mbarrier_init(&ss.kv_full[s], 1);
    fence_barrier_init();
  }
  fence_proxy_async_smem();  // the zeros, before WGMMAs read them
  __syncthreads();
  const int wg = threadIdx.x / WG_THREADS;
  float acc = 0.f;
  long long t0 = 0, t1 = 0, issue = 0, issue_b = 0;
  if (wg == PRODUCER_WG) {
    cutlass::arch::warpgroup_reg_dealloc<ws::WS_PRODUCER_REGS>();
    if ((mask & 4) && threadIdx.x == PRODUCER_WG * WG_THREADS) {
      t0 = clock64();
      producer(ss, src);
      t1 = clock64();
    }
  } else if (wg == ws::SOFTMAX_WG) {
    cutlass::arch::warpgroup_reg_dealloc<ws::WS_SOFTMAX_REGS>();
    if (mask & 1) {
      t0 = clock64();
      if (qk == QkMode::kPairs) softmax_like_pairs(ss, acc, issue);
      else if (qk == QkMode::kBInPv) softmax_like<true>(ss, acc, issue, issue_b);
      else softmax_like<false>(ss, acc, issue, issue_b);
      t1 = clock64();
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<ws::WS_PV_REGS>();
    if (mask & 2) {
      t0 = clock64();
      pv_role(ss, wg, qk == QkMode::kBInPv, acc);
      t1 = clock64();
    }
  }
  if (threadIdx.x % WG_THREADS == 0) {
    const int role = wg == ws::SOFTMAX_WG ? 0 : wg == PRODUCER_WG ? 2 : wg == 0 ? 1 : -1;
    if (role >= 0) cycles[blockIdx.x * SLOTS + role] = t1 - t0;
    if (role == 0) {
      cycles[blockIdx.x * SLOTS + ROLES] = issue;
      cycles[blockIdx.x * SLOTS + ROLES + 1] = issue_b;  // 0 with --qk-pairs (one chain per pair) and --b-in-pv
    }
  }
  if (acc == 12345.f) sink[blockIdx.x] = acc;  // keeps the math alive; never true on zeros
}

}  // namespace

int main(int argc, char** argv) {
  const QkMode qk = argc > 1 && std::strcmp(argv[1], "--qk-pairs") == 0   ? QkMode::kPairs
                    : argc > 1 && std::strcmp(argv[1], "--b-in-pv") == 0 ? QkMode::kBInPv
                                                                         : QkMode::kChains;
  const int smem_bytes = SMEM_BYTES + CHAIN_B_BUFFER_BYTES;
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count");
  uint8_t* src = nullptr;
  long long* cycles = nullptr;
  float* sink = nullptr;
  check(cudaMalloc(&src, static_cast<size_t>(SRC_PAGES) * kvl::PAGE_BYTES), "source");
  check(cudaMemset(src, 0, static_cast<size_t>(SRC_PAGES) * kvl::PAGE_BYTES), "source");
  check(cudaMalloc(&cycles, sizeof(long long) * sms * SLOTS), "cycles");
  check(cudaMalloc(&sink, sizeof(float) * sms), "sink");
  check(cudaFuncSetAttribute(mix_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes), "smem");
  const char* names[SLOTS] = {"softmax-like", "PV", "producer", "(softmax-like's WGMMA issue)", "(of it chain B)"};
  std::printf("%d CTAs x %d pages%s, cycles per page (median over CTAs; 0 = role off)\n", sms, ITERS,
              qk == QkMode::kPairs   ? ", QK in pairs (m64n128)"
              : qk == QkMode::kBInPv ? ", chain B in the PV role"
                                     : "");
  for (int mask : {1, 2, 4, 3, 5, 6, 7}) {
    check(cudaMemset(cycles, 0, sizeof(long long) * sms * SLOTS), "clear");
    const float ms = microbench::fastest_ms(
        [&] { mix_kernel<<<sms, ws::WS_THREADS, smem_bytes>>>(src, mask, qk, cycles, sink); }, 3, 1);
    std::vector<long long> h(static_cast<size_t>(sms) * SLOTS);
    check(cudaMemcpy(h.data(), cycles, sizeof(long long) * h.size(), cudaMemcpyDeviceToHost), "copy");
    double worst = 0;
    std::printf("mask %d (%.3f ms):", mask, ms);
    for (int r = 0; r < SLOTS; ++r) {
      std::vector<long long> v;
      for (int c = 0; c < sms; ++c) v.push_back(h[static_cast<size_t>(c) * SLOTS + r]);
      std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
      const double per = static_cast<double>(v[v.size() / 2]) / ITERS;
      if (r < ROLES) worst = std::max(worst, per);
      std::printf("  %s %.0f", names[r], per);
    }
    std::printf("  | slowest role %.0f\n", worst);
  }
  return 0;
}

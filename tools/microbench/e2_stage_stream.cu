// The memory side of candidate E2 of docs/design.md section 4 (a 2-CTA cluster over one 64-row tile, pages owned
// in turn, each CTA with its own stages and lighter stages for the peer's pages): with the math replaced by spins
// of E's estimated per-page cost, does a CTA keep one page per max(softmax / 2, PV) cycles, or does the loaded HBM
// latency show through the stage ring, as it did in E's prototype with 4 stages shared by both CTAs? (Measured,
// docs/design.md section 4: it does not keep that rate, and the excess is a fixed cost per page of the protocol
// itself, not the load latency.)
//
// Grid: 132 CTAs in 66 clusters of 2; clusters 2m and 2m + 1 walk the same PAGES pages (the two 64-row tiles of an
// h_q = 128 request share each page through L2), from a random permutation of a cache far beyond L2. Page n of a
// walk is owned by CTA n % 2 of the cluster. Per CTA, one elected thread per role:
//   producer (warp 0)  per page in walk order. An own page: wait own_empty of its stage (own page k uses own
//                      stage k % OWN_STAGES), arm own_full, bulk-load the whole page (41216 B). A peer page: wait
//                      peer_empty, tell the owner that its hand-off slot is free (remote arrival on the owner's
//                      slot_free), arm peer_full, bulk-load this CTA's 256 content dims (2 of the 4 tiles, 16 KB).
//   softmax (warp 1)   per own page: wait own_full, spin SMX cycles (QK, softmax, P8), publish the local hand-off
//                      (own_xchg), release its read of the stage (own_empty), wait slot_free, and push the page's
//                      hand-off (HANDOFF_BYTES, by st.async from registers, all 32 lanes) into the peer's slot,
//                      completing on the peer's peer_xchg.
//   pv (warp 2)        per page in walk order: an own page waits own_xchg; a peer page arms peer_xchg and waits
//                      for it and for peer_full; then spins PV cycles (both PV warpgroups' m-tiles) and releases
//                      the stage (own_empty or peer_empty).
// Every barrier is released by this CTA's roles only, except slot_free (the peer's producer) and peer_xchg (the
// peer's push): a stage is freed by the CTA that holds it, which is what E2 changes against E.
// Printed per (SMX, PV): time, HBM read rate (each page once per pair of clusters), and cycles per page of a CTA's
// walk (clock64, the pv role from its first wait to its last release) against the spins' bound max(SMX / 2, PV).
//   build (CUTLASS: the headers setup.py finds, e.g. third_party/cutlass or the nvidia-cutlass package's source/):
//          nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 -I csrc -I $CUTLASS/include -o /tmp/e2_stage \
//            tools/microbench/e2_stage_stream.cu
//   run:   timeout 120 /tmp/e2_stage [SMX PV ...]   (default: 0 0  1400 700  1700 700  2000 800)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

#include <cute/arch/cluster_sm90.hpp>

#include "host_timing.h"
#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/tma.cuh"
#include "kv_layout.h"

using namespace snapmla::sm90;
namespace kvl = snapmla::kv_layout;

namespace {

using microbench::check;

constexpr int PAGES = 512;          // per walk (per pair of clusters)
// 3 + 3 is E2's map; fewer (-DE2_OWN_STAGES=2 -DE2_PEER_STAGES=2) show how the exposed latency grows with less lead.
#ifndef E2_OWN_STAGES
#define E2_OWN_STAGES 3
#endif
#ifndef E2_PEER_STAGES
#define E2_PEER_STAGES 3
#endif
constexpr int OWN_STAGES = E2_OWN_STAGES;    // whole pages
constexpr int PEER_STAGES = E2_PEER_STAGES;  // half content + the pushed hand-off
constexpr int OWN_BYTES = kvl::PAGE_BYTES;  // 41216: the kernels keep a stage's tiles in separate arrays
constexpr int HALF_CONTENT = 2 * kvl::TILE_BYTES;  // this CTA's 256 dims of a page: 16384 B
constexpr int HANDOFF_BYTES = 5376;  // P^T (64 x 64 e4m3), the rows' state and fold scales (shared/exchange.cuh)
constexpr int PEER_BYTES = HALF_CONTENT + HANDOFF_BYTES;  // 21760
constexpr int QUERY_BYTES = 40960;  // the query tile the kernel would hold (not loaded here: it only takes space)
constexpr int BARRIERS = 3 * OWN_STAGES + 3 * PEER_STAGES + PEER_STAGES;
constexpr int SMEM_BYTES = QUERY_BYTES + OWN_STAGES * OWN_BYTES + PEER_STAGES * PEER_BYTES + 8 * BARRIERS;
static_assert(OWN_BYTES % 16 == 0 && PEER_BYTES % 16 == 0 && HANDOFF_BYTES % 16 == 0, "16-B bulk copies and pushes");
static_assert(SMEM_BYTES <= 232448, "the stage map fits the 227 KB of one CTA (docs/design.md section 4, E2)");

// Own PTX: CuTe has no st.async. 16 B into the peer CTA's shared memory (a shared::cluster address), counted as
// 16 transaction bytes on the peer's barrier at `remote_bar`.
__device__ __forceinline__ void st_async_v4(uint32_t remote_addr, uint32_t v, uint32_t remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %1, %1, %1}, [%2];" ::"r"(
                   remote_addr),
               "r"(v), "r"(remote_bar)
               : "memory");
}

struct Smem {
  uint8_t* own;         // [OWN_STAGES][OWN_BYTES]
  uint8_t* peer;        // [PEER_STAGES][PEER_BYTES]: half content, then the hand-off at HALF_CONTENT
  uint64_t* own_full;   // TMA bytes of the page, one arrival (producer)
  uint64_t* own_empty;  // 2 arrivals: softmax (its QK read the stage), pv
  uint64_t* own_xchg;   // 1 arrival: the softmax's local hand-off
  uint64_t* peer_full;  // TMA bytes of the half content, one arrival (producer)
  uint64_t* peer_empty;  // 1 arrival: pv
  uint64_t* peer_xchg;  // the peer's push: HANDOFF_BYTES, one arrival (this CTA's pv arms it)
  uint64_t* slot_free;  // 1 remote arrival: the peer's producer freed its hand-off slot of this stage index
};

__device__ __forceinline__ Smem carve(uint8_t* base) {
  Smem s;
  s.own = base + QUERY_BYTES;
  s.peer = s.own + OWN_STAGES * OWN_BYTES;
  uint64_t* b = reinterpret_cast<uint64_t*>(s.peer + PEER_STAGES * PEER_BYTES);
  s.own_full = b;
  s.own_empty = s.own_full + OWN_STAGES;
  s.own_xchg = s.own_empty + OWN_STAGES;
  s.peer_full = s.own_xchg + OWN_STAGES;
  s.peer_empty = s.peer_full + PEER_STAGES;
  s.peer_xchg = s.peer_empty + PEER_STAGES;
  s.slot_free = s.peer_xchg + PEER_STAGES;
  return s;
}

__device__ __forceinline__ void spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// Phase parity of the use number `use` (0, 1, ...) of a stage, and of the wait for the release of use - 1.
__device__ __forceinline__ uint32_t full_parity(int use) { return use & 1; }
__device__ __forceinline__ uint32_t empty_parity(int use) { return (use - 1) & 1; }

__global__ void __launch_bounds__(96) e2_kernel(const uint8_t* cache, const int* perm, long long smx, long long pv,
                                                unsigned long long* cycles, unsigned long long* sink) {
  extern __shared__ __align__(1024) uint8_t smem[];
  const Smem s = carve(smem);
  const uint32_t rank = cute::block_rank_in_cluster();
  const uint32_t peer = rank ^ 1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int i = 0; i < OWN_STAGES; ++i) {
      mbarrier_init(&s.own_full[i], 1);
      mbarrier_init(&s.own_empty[i], 2);
      mbarrier_init(&s.own_xchg[i], 1);
    }
    for (int i = 0; i < PEER_STAGES; ++i) {
      mbarrier_init(&s.peer_full[i], 1);
      mbarrier_init(&s.peer_empty[i], 1);
      mbarrier_init(&s.peer_xchg[i], 1);
      mbarrier_init(&s.slot_free[i], 1);
    }
    fence_barrier_init();
  }
  cute::cluster_sync();  // the peer's barriers exist before any remote arrival or push
  const int* walk = perm + static_cast<size_t>(blockIdx.x / 4) * PAGES;  // clusters 2m, 2m + 1: one walk
  if (warp == 0 && lane == 0) {
    for (int n = 0; n < PAGES; ++n) {
      const int k = n / 2;  // this page's index among the own (or the peer's) pages of the walk
      const uint8_t* page = cache + static_cast<size_t>(walk[n]) * kvl::PAGE_BYTES;
      if (n % 2 == static_cast<int>(rank)) {
        const int st = k % OWN_STAGES, use = k / OWN_STAGES;
        if (use > 0) mbarrier_wait(&s.own_empty[st], empty_parity(use));
        mbarrier_arrive_expect_tx(&s.own_full[st], kvl::PAGE_BYTES);
        bulk_load(s.own + st * OWN_BYTES, page, kvl::PAGE_BYTES, &s.own_full[st]);
      } else {
        const int st = k % PEER_STAGES, use = k / PEER_STAGES;
        if (use > 0) {
          mbarrier_wait(&s.peer_empty[st], empty_parity(use));
          // The slot's previous hand-off is consumed: the owner may push page n's.
          cutlass::arch::ClusterBarrier::arrive(&s.slot_free[st], peer, 1);
        }
        mbarrier_arrive_expect_tx(&s.peer_full[st], HALF_CONTENT);
        bulk_load(s.peer + st * PEER_BYTES, page + rank * HALF_CONTENT, HALF_CONTENT, &s.peer_full[st]);
      }
    }
  } else if (warp == 1) {
    unsigned long long acc = 0;
    for (int n = static_cast<int>(rank); n < PAGES; n += 2) {
      const int k = n / 2, st = k % OWN_STAGES, use = k / OWN_STAGES;
      mbarrier_wait(&s.own_full[st], full_parity(use));
      acc += s.own[st * OWN_BYTES + (n * 97) % kvl::PAGE_BYTES];
      spin(smx);
      fence_proxy_async_smem();  // the reads above before the producer's next bulk load into the stage
      __syncwarp();
      if (lane == 0) {
        mbarrier_arrive(&s.own_xchg[st]);
        mbarrier_arrive(&s.own_empty[st]);
      }
      // The peer counts page n as its peer page k: slot k % PEER_STAGES, free once its producer said so.
      const int slot = k % PEER_STAGES, slot_use = k / PEER_STAGES;
      if (slot_use > 0) mbarrier_wait(&s.slot_free[slot], empty_parity(slot_use));
      const uint32_t dst = cute::set_block_rank(smem_u32(s.peer + slot * PEER_BYTES + HALF_CONTENT), peer);
      const uint32_t bar = cute::set_block_rank(smem_u32(&s.peer_xchg[slot]), peer);
      for (int i = lane; i < HANDOFF_BYTES / 16; i += 32) st_async_v4(dst + 16 * i, static_cast<uint32_t>(n), bar);
    }
    if (lane == 0) sink[blockIdx.x] = acc;
  } else if (warp == 2 && lane == 0) {
    const long long t0 = clock64();
    unsigned long long acc = 0;
    for (int n = 0; n < PAGES; ++n) {
      const int k = n / 2;
      if (n % 2 == static_cast<int>(rank)) {
        const int st = k % OWN_STAGES, use = k / OWN_STAGES;
        mbarrier_wait(&s.own_xchg[st], full_parity(use));
        acc += s.own[st * OWN_BYTES + (n * 31) % kvl::PAGE_BYTES];
        spin(pv);
        fence_proxy_async_smem();
        mbarrier_arrive(&s.own_empty[st]);
      } else {
        const int st = k % PEER_STAGES, use = k / PEER_STAGES;
        mbarrier_arrive_expect_tx(&s.peer_xchg[st], HANDOFF_BYTES);
        mbarrier_wait(&s.peer_full[st], full_parity(use));
        mbarrier_wait(&s.peer_xchg[st], full_parity(use));
        acc += s.peer[st * PEER_BYTES + HALF_CONTENT + (n * 31) % HANDOFF_BYTES];
        spin(pv);
        // The reads above before the producer's next bulk load into the stage.
        fence_proxy_async_smem();
        mbarrier_arrive(&s.peer_empty[st]);
      }
    }
    cycles[blockIdx.x] = static_cast<unsigned long long>(clock64() - t0);
    sink[gridDim.x + blockIdx.x] = acc;
  }
  // Neither CTA exits while the other may still push into it or arrive on its barriers. The roles ran on one lane
  // of warps 0 and 2: reconverge before the aligned cluster barrier.
  __syncwarp();
  cute::cluster_sync();
}

void run(long long smx, long long pv, const uint8_t* cache, const int* perm, int ctas, unsigned long long* cycles,
         unsigned long long* sink) {
  check(cudaFuncSetAttribute(e2_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES), "smem attribute");
  microbench::ClusterLaunch launch(ctas, 96, SMEM_BYTES, 2);
  const float ms = microbench::fastest_ms(
      [&] { check(cudaLaunchKernelEx(&launch.cfg, e2_kernel, cache, perm, smx, pv, cycles, sink), "launch"); }, 5, 1);
  std::vector<unsigned long long> cyc(ctas);
  check(cudaMemcpy(cyc.data(), cycles, sizeof(unsigned long long) * ctas, cudaMemcpyDeviceToHost), "copy");
  const double mean = std::accumulate(cyc.begin(), cyc.end(), 0.0) / ctas / PAGES;
  const double pages_read = double(ctas / 4) * PAGES;  // once per pair of clusters, if the second read hits L2
  std::printf("SMX %5lld  PV %5lld  %8.1f us  %5.2f TB/s read  %6.0f cycles per page (spins' bound %lld)\n", smx, pv,
              ms * 1e3, pages_read * kvl::PAGE_BYTES / (ms * 1e-3) / 1e12, mean, std::max(smx / 2, pv));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<long long> spins = {0, 0, 1400, 700, 1700, 700, 2000, 800};
  if (argc > 1) {
    spins.clear();
    for (int i = 1; i + 1 < argc; i += 2) {
      spins.push_back(std::atoll(argv[i]));
      spins.push_back(std::atoll(argv[i + 1]));
    }
  }
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attribute");
  const int ctas = std::min(sms, 132) & ~3;  // whole pairs of clusters
  const int walks = ctas / 4;
  const int num_pages = walks * PAGES;  // ~700 MB: far beyond L2
  const microbench::PageWalks pages = microbench::random_page_walks(num_pages, kvl::PAGE_BYTES, 2026);
  unsigned long long *cycles = nullptr, *sink = nullptr;
  check(cudaMalloc(&cycles, sizeof(unsigned long long) * ctas), "cycles");
  check(cudaMalloc(&sink, 2 * sizeof(unsigned long long) * ctas), "sink");
  std::printf("%d CTAs (%d clusters, 2 per walk), %d pages per walk, %d own + %d peer stages, %d B of shared memory\n",
              ctas, ctas / 2, PAGES, OWN_STAGES, PEER_STAGES, SMEM_BYTES);
  for (size_t i = 0; i + 1 < spins.size(); i += 2) run(spins[i], spins[i + 1], pages.cache, pages.perm, ctas, cycles, sink);
  check(cudaFree(pages.cache), "free");
  return 0;
}

// The memory side of candidate E of docs/design.md section 4 (a 2-CTA cluster over one tile, pages in pairs): can
// a cluster stream its pages by multicast, the owner of each pair of pages pushing the pair's hand-off (P^T and
// state, 5 KB per page) into its peer's shared memory, at the page rate the design's budget needs (~1700
// SM-cycles per tile-page, both CTAs together)? No math: each CTA's one thread plays producer and consumers.
//
// Patterns (132 CTAs, one per SM; PAGES_PER_CTA pages per CTA, or per cluster for the pairs, from a random
// permutation of the cache's pages, STAGES pages in flight):
//   unicast        one CTA per tile, as the one-CTA kernels: each CTA bulk-loads its own pages (the page_stream
//                  "bulk" pattern);
//   pairs          66 clusters of 2: page n of a cluster's walk belongs to pair n / 2, whose owner (pair % 2)
//                  multicasts it into both CTAs' stage n % STAGES; every CTA arms its own kv_full, and each
//                  CTA's consumer releases the stage in both CTAs (kv_empty takes 2 arrivals per phase);
//   pairs+handoff  the same, and per page the owner pushes 5120 B of its stage (shared -> peer shared bulk copy)
//                  into the peer's hand-off slot for that stage, completing on the peer's xchg_full, which the
//                  peer arms and waits for before it releases the stage: the waits of E's PV warpgroups
//                  (tests/utils/pair_cluster_protocol.py has the protocol).
// Printed per pattern: time, HBM bytes per second (each page read once per CTA, or once per cluster), and cycles
// per page of the walk per CTA (clock64 on the SM; for the pairs, SM-cycles per tile-page are twice that).
//   build (CUTLASS: the headers setup.py finds, e.g. third_party/cutlass or the nvidia-cutlass package's source/):
//          nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 -I csrc -I $CUTLASS/include -o /tmp/pair_stream \
//            tools/microbench/pair_stream.cu
//   run:   timeout 120 /tmp/pair_stream
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
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

enum Pattern { UNICAST = 0, PAIRS = 1, PAIRS_HANDOFF = 2 };
constexpr int PAGES_PER_CTA = 512;
constexpr int STAGES = 4;
constexpr int STAGE_BYTES = 41984;  // kvl::PAGE_BYTES rounded up to 1024 (Swizzle-128B tiles in the kernels)
constexpr int HANDOFF_BYTES = 5120;  // a page's P^T (64 x 64 e4m3) and the 64 rows' state and fold scales
constexpr int SMEM_BYTES = STAGES * (STAGE_BYTES + HANDOFF_BYTES) + 3 * STAGES * 8;
static_assert(STAGE_BYTES % 1024 == 0 && STAGE_BYTES >= kvl::PAGE_BYTES, "1024-B aligned stages");
static_assert(SMEM_BYTES <= 227 * 1024, "one CTA per SM");

// Own PTX: CuTe's SM90_BULK_COPY_G2S has no multicast form. One 1-D bulk copy delivered to the same shared offset
// in every CTA of cta_mask, each completing its bytes on the barrier at the offset of `bar` in that CTA.
__device__ __forceinline__ void bulk_load_multicast(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                                    uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], "
      "%4;" ::"r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar)), "h"(cta_mask)
      : "memory");
}

// Own PTX: CuTe has no shared -> peer-shared bulk copy. `bytes` of this CTA's shared memory at `src` into CTA
// `rank`'s shared memory at the same offset as `dst`, completing on that CTA's barrier at the offset of `bar`.
__device__ __forceinline__ void bulk_copy_to_peer(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                                  uint32_t rank) {
  asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   cute::set_block_rank(smem_u32(dst), rank)),
               "r"(smem_u32(src)), "r"(bytes), "r"(cute::set_block_rank(smem_u32(bar), rank))
               : "memory");
}

struct Smem {
  uint8_t* stage;     // [STAGES][STAGE_BYTES]
  uint8_t* handoff;   // [STAGES][HANDOFF_BYTES]: the peer's pushes land here
  uint64_t* full;     // [STAGES] kv_full
  uint64_t* empty;    // [STAGES] kv_empty (pairs: one arrival from each CTA's consumer)
  uint64_t* xchg;     // [STAGES] xchg_full (pairs+handoff)
};

__device__ __forceinline__ Smem carve(uint8_t* base) {
  Smem s;
  s.stage = base;
  s.handoff = base + STAGES * STAGE_BYTES;
  s.full = reinterpret_cast<uint64_t*>(s.handoff + STAGES * HANDOFF_BYTES);
  s.empty = s.full + STAGES;
  s.xchg = s.empty + STAGES;
  return s;
}

// Producer step for page n of the walk (cache page `page`): reuse the stage once both CTAs released its previous
// page (unicast: once this CTA did), arm this CTA's kv_full, and load (pairs: the owner multicasts).
template <int PATTERN>
__device__ __forceinline__ void produce(const Smem& s, const uint8_t* cache, int n, int page, uint32_t rank) {
  const int st = n % STAGES;
  if (n >= STAGES) mbarrier_wait(&s.empty[st], ((n / STAGES) - 1) & 1);
  mbarrier_arrive_expect_tx(&s.full[st], kvl::PAGE_BYTES);
  const uint8_t* src = cache + static_cast<size_t>(page) * kvl::PAGE_BYTES;
  if constexpr (PATTERN == UNICAST) {
    bulk_load(s.stage + st * STAGE_BYTES, src, kvl::PAGE_BYTES, &s.full[st]);
  } else if ((n / 2) % 2 == static_cast<int>(rank)) {
    bulk_load_multicast(s.stage + st * STAGE_BYTES, src, kvl::PAGE_BYTES, &s.full[st], 0b11);
  }
}

template <int PATTERN>
__global__ void __launch_bounds__(32) stream_kernel(const uint8_t* cache, const int* perm,
                                                    unsigned long long* cycles, unsigned long long* sink) {
  extern __shared__ __align__(1024) uint8_t smem[];
  const Smem s = carve(smem);
  constexpr bool PAIRED = PATTERN != UNICAST;
  const uint32_t rank = PAIRED ? cute::block_rank_in_cluster() : 0;
  const uint32_t peer = rank ^ 1;
  if (threadIdx.x == 0) {
    for (int i = 0; i < STAGES; ++i) {
      mbarrier_init(&s.full[i], 1);
      mbarrier_init(&s.empty[i], PAIRED ? 2 : 1);
      mbarrier_init(&s.xchg[i], 1);
    }
    fence_barrier_init();
  }
  if constexpr (PAIRED) cute::cluster_sync();  // the peer's barriers exist before any remote use
  if (threadIdx.x == 0) {
    // The walk: this CTA's pages (unicast), or the cluster's (both CTAs walk the same list).
    const int* mine = perm + static_cast<size_t>(PAIRED ? blockIdx.x / 2 : blockIdx.x) * PAGES_PER_CTA;
    const long long t0 = clock64();
    for (int n = 0; n < STAGES; ++n) produce<PATTERN>(s, cache, n, mine[n], rank);
    unsigned long long acc = 0;
    for (int c = 0; c < PAGES_PER_CTA; ++c) {
      const int st = c % STAGES;
      const uint32_t ph = (c / STAGES) & 1;
      mbarrier_wait(&s.full[st], ph);
      acc += s.stage[st * STAGE_BYTES + (c * 97) % 8192];
      if constexpr (PATTERN == PAIRS_HANDOFF) {
        if ((c / 2) % 2 == static_cast<int>(rank)) {
          // The owner's hand-off of page c: its stage's RoPE part stands in for P^T and state. The peer's slot
          // for this stage is free: the peer released page c - STAGES (this page's load waited for that).
          bulk_copy_to_peer(s.handoff + st * HANDOFF_BYTES, s.stage + st * STAGE_BYTES + kvl::ROPE_OFFSET,
                            HANDOFF_BYTES, &s.xchg[st], peer);
        } else {
          mbarrier_arrive_expect_tx(&s.xchg[st], HANDOFF_BYTES);
          mbarrier_wait(&s.xchg[st], ph);
          acc += s.handoff[st * HANDOFF_BYTES + c % HANDOFF_BYTES];
        }
      }
      // The generic reads above before the next async write into the stage (the kernels' release order).
      fence_proxy_async_smem();
      mbarrier_arrive(&s.empty[st]);
      if constexpr (PAIRED) cutlass::arch::ClusterBarrier::arrive(&s.empty[st], peer, 1);
      const int n = c + STAGES;
      if (n < PAGES_PER_CTA) produce<PATTERN>(s, cache, n, mine[n], rank);
    }
    cycles[blockIdx.x] = static_cast<unsigned long long>(clock64() - t0);
    sink[blockIdx.x] = acc;
  }
  // Neither CTA exits while the other may still push into it or arrive on its barriers.
  if constexpr (PAIRED) cute::cluster_sync();
}

template <int PATTERN>
void run(const char* name, const uint8_t* cache, const int* perm, int ctas, unsigned long long* cycles,
         unsigned long long* sink) {
  auto kern = stream_kernel<PATTERN>;
  check(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES), "smem attribute");
  microbench::ClusterLaunch launch(ctas, 32, SMEM_BYTES, PATTERN == UNICAST ? 1 : 2);
  const float ms = microbench::fastest_ms(
      [&] { check(cudaLaunchKernelEx(&launch.cfg, kern, cache, perm, cycles, sink), "launch"); }, 5, 1);
  std::vector<unsigned long long> cyc(ctas);
  check(cudaMemcpy(cyc.data(), cycles, sizeof(unsigned long long) * ctas, cudaMemcpyDeviceToHost), "copy");
  const double mean_cycles = std::accumulate(cyc.begin(), cyc.end(), 0.0) / ctas;
  const double pages_read = double(PATTERN == UNICAST ? ctas : ctas / 2) * PAGES_PER_CTA;  // from HBM
  std::printf("%-15s %8.1f us  %6.2f TB/s read  %7.0f cycles per page of a CTA's walk\n", name, ms * 1e3,
              pages_read * kvl::PAGE_BYTES / (ms * 1e-3) / 1e12, mean_cycles / PAGES_PER_CTA);
}

}  // namespace

int main() {
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attribute");
  const int ctas = std::min(sms, 132) & ~1;
  const int num_pages = ctas * PAGES_PER_CTA;  // ~2.8 GB: far beyond L2
  const microbench::PageWalks walks = microbench::random_page_walks(num_pages, kvl::PAGE_BYTES, 2026);
  unsigned long long *cycles = nullptr, *sink = nullptr;
  check(cudaMalloc(&cycles, sizeof(unsigned long long) * ctas), "cycles");
  check(cudaMalloc(&sink, sizeof(unsigned long long) * ctas), "sink");
  std::printf("%d CTAs, %d pages of %d B per walk, %d stages, hand-off %d B per page\n", ctas, PAGES_PER_CTA,
              kvl::PAGE_BYTES, STAGES, HANDOFF_BYTES);
  run<UNICAST>("unicast", walks.cache, walks.perm, ctas, cycles, sink);
  run<PAIRS>("pairs", walks.cache, walks.perm, ctas, cycles, sink);
  run<PAIRS_HANDOFF>("pairs+handoff", walks.cache, walks.perm, ctas, cycles, sink);
  check(cudaFree(walks.cache), "free");
  return 0;
}

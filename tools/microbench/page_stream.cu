// How fast can one CTA per SM stream random KV pages into shared memory, by access pattern? The narrow decode
// kernel (h_q 16, memory-bound) reads 3.9 TB/s of SnapMLA pages at 128k while FlashMLA BF16 reads 4.4 TB/s of its
// own in the same process (bench_decode_20261201T220119Z.json), and the cluster microbenchmark's sequential
// 1-D bulk stream reached 4.35 TB/s. This isolates the memory side: no math, the consumer only waits for a page
// and hands its stage back.
//
// Each CTA (132, one per SM, 1 warp; lane 0 does everything) walks PAGES_PER_CTA entries of a random
// permutation of the cache's pages, STAGES pages in flight through a ring of mbarriers. Patterns:
//   bulk      one 1-D cp.async.bulk of the whole page (41216 B): the byte count alone;
//   bulk3     three 1-D bulk copies, one per part (content 32 KB, RoPE 8 KB, scales 256 B);
//   kernel    the decode kernels' 6 TMA tile loads: 4 content tiles (64 tokens x 128 B, Swizzle-128B, token
//             stride 512 B, so each tile reads 128 B of every 512), RoPE (64 x 128 B contiguous), scales 256 B;
//   tilemajor the same 6 loads on a page whose content is stored tile-major (dims 128c .. 128c + 127 of the 64
//             tokens contiguous, 8 KB per tile): every load reads a contiguous range;
//   bf16      FlashMLA's BF16 page (64 tokens x 576 bf16 = 73728 B) as 9 tiles of 64 x 128 B at stride 1152 B.
// Each pattern at several stage counts (bytes in flight per SM = STAGES x page). Times: best of 5 launches.
// No extension, no torch: plain nvcc.
//   build (CUTLASS: the headers setup.py finds, e.g. third_party/cutlass or the nvidia-cutlass package's source/):
//          nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 -I csrc -I $CUTLASS/include -o /tmp/page_stream \
//            tools/microbench/page_stream.cu
//   run:   timeout 120 /tmp/page_stream
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/sm90/common/mbarrier.cuh"
#include "kernels/sm90/common/tma.cuh"
#include "kv_layout.h"
#include "host_timing.h"

using namespace snapmla::sm90;
namespace kvl = snapmla::kv_layout;

namespace {

using microbench::check;

enum Pattern { BULK = 0, KERNEL = 1, TILE_MAJOR = 2, BF16 = 3, BULK3 = 4 };
constexpr int BF16_PAGE_BYTES = 64 * 576 * 2;  // 73728
constexpr int PAGES_PER_CTA = 600;
constexpr int MAX_STAGES = 5;

struct Maps {
  CUtensorMap content, rope, scale;  // SnapMLA page (kernel / tilemajor)
  CUtensorMap bf16;                  // FlashMLA page
};

// Stage s starts at s * stage_bytes (1024-B aligned: Swizzle-128B tiles).
template <int PATTERN>
__device__ __forceinline__ void issue_page(uint8_t* stage, uint64_t* bar, const Maps& m,
                                           const uint8_t* cache, int page) {
  if constexpr (PATTERN == BULK) {
    mbarrier_arrive_expect_tx(bar, kvl::PAGE_BYTES);
    bulk_load(stage, cache + static_cast<size_t>(page) * kvl::PAGE_BYTES, kvl::PAGE_BYTES, bar);
  } else if constexpr (PATTERN == BULK3) {
    mbarrier_arrive_expect_tx(bar, kvl::PAGE_BYTES);
    const uint8_t* pg = cache + static_cast<size_t>(page) * kvl::PAGE_BYTES;
    bulk_load(stage, pg, kvl::ROPE_OFFSET, bar);
    bulk_load(stage + kvl::ROPE_OFFSET, pg + kvl::ROPE_OFFSET, kvl::SCALE_OFFSET - kvl::ROPE_OFFSET, bar);
    bulk_load(stage + kvl::SCALE_OFFSET, pg + kvl::SCALE_OFFSET, kvl::PAGE_BYTES - kvl::SCALE_OFFSET, bar);
  } else if constexpr (PATTERN == BF16) {
    mbarrier_arrive_expect_tx(bar, BF16_PAGE_BYTES);
#pragma unroll
    for (int t = 0; t < 9; ++t) tma_load_3d(stage + t * 8192, &m.bf16, bar, 64 * t, 0, page);
  } else {
    mbarrier_arrive_expect_tx(bar, kvl::PAGE_BYTES);
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      // kernel: x = byte offset within the 512-B token row; tilemajor: row 64 t of a 256-row x 128-B region.
      if constexpr (PATTERN == KERNEL) tma_load_3d(stage + t * 8192, &m.content, bar, 128 * t, 0, page);
      else tma_load_3d(stage + t * 8192, &m.content, bar, 0, 64 * t, page);
    }
    tma_load_3d(stage + 32768, &m.rope, bar, 0, 0, page);
    tma_load_2d(stage + 40960, &m.scale, bar, 0, page);
  }
}

template <int PATTERN>
__global__ void __launch_bounds__(32) stream_kernel(const __grid_constant__ Maps maps, const uint8_t* cache,
                                                    const int* perm, int stages, int stage_bytes,
                                                    unsigned long long* sink) {
  extern __shared__ __align__(1024) uint8_t smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + stages * stage_bytes);  // the ring's barriers, after the stages
  if (threadIdx.x != 0) return;
  for (int s = 0; s < stages; ++s) mbarrier_init(&full[s], 1);
  fence_barrier_init();
  const int* mine = perm + static_cast<size_t>(blockIdx.x) * PAGES_PER_CTA;
  for (int n = 0; n < stages; ++n) issue_page<PATTERN>(smem + n * stage_bytes, &full[n], maps, cache, mine[n]);
  unsigned long long acc = 0;
  for (int c = 0; c < PAGES_PER_CTA; ++c) {
    const int s = c % stages;
    mbarrier_wait(&full[s], (c / stages) & 1);
    acc += smem[s * stage_bytes + (c * 97) % 8192];
    // The byte read above and the TMA write below are ordered by the mbarrier wait; the next write to the
    // stage is an async-proxy write after a generic read (fence.proxy.async, as a kernel would before reuse).
    fence_proxy_async_smem();
    const int n = c + stages;
    if (n < PAGES_PER_CTA) issue_page<PATTERN>(smem + s * stage_bytes, &full[s], maps, cache, mine[n]);
  }
  sink[blockIdx.x] = acc;
}

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  void* ptr = nullptr;
  cudaDriverEntryPointQueryResult status{};
  check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &status),
        "entry point");
  if (status != cudaDriverEntryPointSuccess || !ptr) {
    std::printf("no cuTensorMapEncodeTiled\n");
    std::exit(1);
  }
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
}

template <int RANK>
CUtensorMap map(const char* what, CUtensorMapDataType dt, const void* base, const uint64_t (&dims)[RANK],
                const uint64_t (&strides)[RANK - 1], const uint32_t (&box)[RANK], CUtensorMapSwizzle sw) {
  CUtensorMap m;
  uint32_t es[RANK];
  for (int i = 0; i < RANK; ++i) es[i] = 1;
  const CUresult r = encoder()(&m, dt, RANK, const_cast<void*>(base), dims, strides, box, es,
                               CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::printf("tensor map %s: CUresult %d\n", what, static_cast<int>(r));
    std::exit(1);
  }
  return m;
}

template <int PATTERN>
float run(const Maps& maps, const uint8_t* cache, const int* perm, int ctas, int stages, int stage_bytes,
          unsigned long long* sink) {
  const int smem = stages * stage_bytes + MAX_STAGES * 8;
  check(cudaFuncSetAttribute(stream_kernel<PATTERN>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "smem");
  // Launch 0 warms up.
  return microbench::fastest_ms(
      [&] { stream_kernel<PATTERN><<<ctas, 32, smem>>>(maps, cache, perm, stages, stage_bytes, sink); }, 5, 1);
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "device");
  const int ctas = prop.multiProcessorCount;
  std::printf("%s, %d SMs, %d pages per CTA, random page order\n", prop.name, ctas, PAGES_PER_CTA);
  // A cache ~twice the pages read, so that each page is read at most once per launch and L2 (50 MB) holds
  // none of the next launch's pages: 2 x 132 x 600 pages = 6.5 GB (SnapMLA) / 11.7 GB (BF16).
  const int n_pages = 2 * ctas * PAGES_PER_CTA;
  std::vector<int> perm(n_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(1234));
  int* d_perm = nullptr;
  check(cudaMalloc(&d_perm, n_pages * sizeof(int)), "perm");
  check(cudaMemcpy(d_perm, perm.data(), n_pages * sizeof(int), cudaMemcpyHostToDevice), "perm copy");
  unsigned long long* d_sink = nullptr;
  check(cudaMalloc(&d_sink, ctas * sizeof(unsigned long long)), "sink");
  uint8_t* d_cache = nullptr;
  const size_t cache_bytes = static_cast<size_t>(n_pages) * BF16_PAGE_BYTES;
  check(cudaMalloc(&d_cache, cache_bytes), "cache");
  check(cudaMemset(d_cache, 1, cache_bytes), "cache fill");

  const uint64_t nb = n_pages;
  Maps maps{};
  maps.rope = map<3>("rope", CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, d_cache + kvl::ROPE_OFFSET, {64, 64, nb},
                     {128, kvl::PAGE_BYTES}, {64, 64, 1}, CU_TENSOR_MAP_SWIZZLE_128B);
  maps.scale = map<2>("scale", CU_TENSOR_MAP_DATA_TYPE_FLOAT32, d_cache + kvl::SCALE_OFFSET, {64, nb},
                      {kvl::PAGE_BYTES}, {64, 1}, CU_TENSOR_MAP_SWIZZLE_NONE);
  maps.bf16 = map<3>("bf16", CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, d_cache, {576, 64, nb}, {1152, BF16_PAGE_BYTES},
                     {64, 64, 1}, CU_TENSOR_MAP_SWIZZLE_128B);
  const CUtensorMap content_rows = map<3>("content", CU_TENSOR_MAP_DATA_TYPE_UINT8, d_cache, {512, 64, nb},
                                          {512, kvl::PAGE_BYTES}, {128, 64, 1}, CU_TENSOR_MAP_SWIZZLE_128B);
  const CUtensorMap content_tiles = map<3>("content tile-major", CU_TENSOR_MAP_DATA_TYPE_UINT8, d_cache,
                                           {128, 256, nb}, {128, kvl::PAGE_BYTES}, {128, 64, 1},
                                           CU_TENSOR_MAP_SWIZZLE_128B);
  const double snap_bytes = static_cast<double>(ctas) * PAGES_PER_CTA * kvl::PAGE_BYTES;
  const double bf16_bytes = static_cast<double>(ctas) * PAGES_PER_CTA * BF16_PAGE_BYTES;
  auto report = [](const char* name, int stages, int page_bytes, double bytes, float ms) {
    std::printf("%-10s stages %d (%6.1f KB in flight per SM): %7.1f us, %5.2f TB/s\n", name, stages,
                stages * page_bytes / 1024.0, ms * 1e3, bytes / (ms * 1e-3) / 1e12);
  };
  const int snap_stage = 41984;  // 41216 rounded up to 1024 B
  for (int stages = 2; stages <= MAX_STAGES; ++stages) {
    maps.content = content_rows;
    report("bulk", stages, kvl::PAGE_BYTES, snap_bytes,
           run<BULK>(maps, d_cache, d_perm, ctas, stages, snap_stage, d_sink));
    report("kernel", stages, kvl::PAGE_BYTES, snap_bytes,
           run<KERNEL>(maps, d_cache, d_perm, ctas, stages, snap_stage, d_sink));
    report("bulk3", stages, kvl::PAGE_BYTES, snap_bytes,
           run<BULK3>(maps, d_cache, d_perm, ctas, stages, snap_stage, d_sink));
    maps.content = content_tiles;
    report("tilemajor", stages, kvl::PAGE_BYTES, snap_bytes,
           run<TILE_MAJOR>(maps, d_cache, d_perm, ctas, stages, snap_stage, d_sink));
  }
  for (int stages = 1; stages <= 3; ++stages)
    report("bf16", stages, BF16_PAGE_BYTES, bf16_bytes,
           run<BF16>(maps, d_cache, d_perm, ctas, stages, BF16_PAGE_BYTES, d_sink));
  return 0;
}

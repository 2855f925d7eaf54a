// How long does a split piece's epilogue take to put its fp32 partial output (64 rows x 512 dims = 128 KB per CTA)
// into global memory, by store pattern? The CTA trace (tools/trace/trace_cta.py, H100, 2026-12-07) puts ~4.0-4.1 us
// per piece between the ws kernel's last PV and the end of its stores at b = 1-64, h_q 64: 4 of the ~10 us of a
// b = 1, 8k decode kernel. This isolates the stores: every CTA (one per SM) only stores, all at once, as the CTAs of
// a small-batch call do at their end.
//
// 256 threads per CTA (the ws kernel's two PV warpgroups), each holding its 128 fp32 O^T values. Patterns:
//   kernel     the epilogue's own mapping (shared/epilogue.cuh): per thread 64 8-B stores, dims 16 warp + 2 r (+64
//              per m-tile) of rows 8 i + 2 t + e: each warp instruction writes 4 rows x 64 B (half of 4 lines);
//   lines      the same bytes as 16-B stores, each warp instruction 512 contiguous bytes (4 whole lines);
//   smem_stg   the fragments into shared memory row-major (128 KB), a CTA barrier, then 16-B coalesced stores;
//   smem_bulk  the same shared image, then one 1-D bulk copy (cp.async.bulk global <- shared) per 2-KB row, issued
//              by 64 threads, and a wait until shared memory has been read.
// Each at 132 CTAs (every SM ends a piece at once: b = 1 at 128k, b = 16) and 65 CTAs (b = 1, h_q 64, 8k).
// Times: best of 20 launches, the launch included (~2-3 us of it on an idle GPU: the "empty" row).
//   build: nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 -I csrc -o /tmp/epilogue_stores \
//            tools/microbench/epilogue_stores.cu
//   run:   timeout 60 /tmp/epilogue_stores
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "host_timing.h"

namespace {

constexpr int THREADS = 256, ROWS = 64, DIMS = 512;
constexpr int SLAB_FLOATS = ROWS * DIMS;  // 128 KB per CTA
enum Pattern { kEmpty, kKernel, kLines, kSmemStg, kSmemBulk };

// The thread's 128 values, not foldable by the compiler.
__device__ __forceinline__ void fill(float (&o)[4][32], float seed) {
#pragma unroll
  for (int m = 0; m < 4; ++m)
#pragma unroll
    for (int k = 0; k < 32; ++k) o[m][k] = seed + 0.25f * (32 * m + k);
}

// Row-major (row, dim) of the thread's fragment value o[mt][4 i + 2 h + e] (epilogue.cuh's map): dims
// 256 wg + 16 warp + 2 r + h + 64 mt (h: the pair's second dim), row 8 i + 2 t + e.
template <typename Store>
__device__ __forceinline__ void for_each_pair(const float (&o)[4][32], Store&& store) {
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, r = lane / 4, t = lane % 4;
  const int dim0 = 256 * wg + 16 * warp + 2 * r;
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) store(8 * i + 2 * t + e, dim0 + 64 * mt, o[mt][4 * i + e], o[mt][4 * i + 2 + e]);
}

template <Pattern P>
__global__ void __launch_bounds__(THREADS, 1) epilogue(float* __restrict__ out, float seed) {
  extern __shared__ __align__(128) float tile[];  // (ROWS, DIMS) fp32, smem patterns only
  float o[4][32];
  fill(o, seed + threadIdx.x);
  float* slab = out + static_cast<int64_t>(blockIdx.x) * SLAB_FLOATS;
  if constexpr (P == kKernel) {
    for_each_pair(o, [&](int row, int dim, float a, float b) {
      *reinterpret_cast<float2*>(slab + row * DIMS + dim) = make_float2(a, b);
    });
  } else if constexpr (P == kLines) {
#pragma unroll
    for (int k = 0; k < 32; ++k)
      reinterpret_cast<float4*>(slab)[k * THREADS + threadIdx.x] =
          make_float4(o[k % 4][(k / 4) * 4], o[k % 4][(k / 4) * 4 + 1], o[k % 4][(k / 4) * 4 + 2], o[k % 4][(k / 4) * 4 + 3]);
  } else if constexpr (P == kSmemStg || P == kSmemBulk) {
    for_each_pair(o, [&](int row, int dim, float a, float b) {
      *reinterpret_cast<float2*>(tile + row * DIMS + dim) = make_float2(a, b);
    });
    if constexpr (P == kSmemStg) {
      __syncthreads();
#pragma unroll 8
      for (int k = 0; k < SLAB_FLOATS / 4 / THREADS; ++k)
        reinterpret_cast<float4*>(slab)[k * THREADS + threadIdx.x] = reinterpret_cast<const float4*>(tile)[k * THREADS + threadIdx.x];
    } else {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic stores -> the bulk copy's reads
      __syncthreads();
      if (threadIdx.x < ROWS) {
        const uint32_t src = static_cast<uint32_t>(__cvta_generic_to_shared(tile + threadIdx.x * DIMS));
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                     ::"l"(slab + threadIdx.x * DIMS), "r"(src), "n"(DIMS * 4) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // shared memory may be reused after this
      }
    }
  }
}

template <Pattern P>
float run_ms(float* out, int ctas) {
  const int smem = (P == kSmemStg || P == kSmemBulk) ? SLAB_FLOATS * 4 : 0;
  microbench::check(cudaFuncSetAttribute(epilogue<P>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "smem attr");
  return microbench::fastest_ms([&] { epilogue<P><<<ctas, THREADS, smem>>>(out, 1.f); }, 20, 3);
}

}  // namespace

int main() {
  float* out = nullptr;
  microbench::check(cudaMalloc(&out, static_cast<size_t>(132) * SLAB_FLOATS * 4), "malloc");
  const char* names[] = {"empty", "kernel", "lines", "smem_stg", "smem_bulk"};
  for (int ctas : {132, 65}) {
    std::printf("%d CTAs x 128 KB (%.1f MB):\n", ctas, ctas * 128.0 / 1024);
    const float ms[] = {run_ms<kEmpty>(out, ctas), run_ms<kKernel>(out, ctas), run_ms<kLines>(out, ctas),
                        run_ms<kSmemStg>(out, ctas), run_ms<kSmemBulk>(out, ctas)};
    for (int p = 0; p < 5; ++p)
      std::printf("  %-10s %7.2f us  %6.0f GB/s\n", names[p], 1e3f * ms[p],
                  p == 0 ? 0.0 : ctas * SLAB_FLOATS * 4.0 / (ms[p] * 1e-3) / 1e9);
  }
  return 0;
}

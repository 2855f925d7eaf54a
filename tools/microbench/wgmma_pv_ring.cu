// Cycles per PV m-tile of the wide decode kernel's issue patterns, one warpgroup issuing alone and next to a
// second warpgroup that runs QK-like groups (20 SS m64n64k32, then wait), on every SM of the GPU:
//   m64n64 (main):  2 RS m64n64k32 into one 32-register accumulator, wait_group 0, the 32-FFMA fold;
//   ring of 4 n16:  4 column slices of 16 rows per m-tile (2 RS m64n16k32 each, one commit group) into a ring
//                   of 4 accumulators of 8 registers, wait_group 3, an 8-FFMA fold per slice
//                   (wide_pv_slice_ring.patch, in git at f70abf5: 0.79-0.84x of main in the kernel);
//   ring of 2 n32:  2 slices of 32 rows, a ring of 2 accumulators of 16, wait_group 1 (the kernel variant
//                   "32-row halves", 0.96-1.00x of main in the kernel);
//   page pair:      4 RS m64n64k32 (two pages' k-steps, one P scale per 128 tokens) into one accumulator, one
//                   fold: the PV of the page-pair designs (docs/design.md section 4). Its cycles per m-tile are
//                   per 128 tokens; per page they are half.
// Each m-tile's fold is FFMAs into a 32-register O tile with per-column scales, as in the kernel. The A
// fragments are fixed registers (values do not change the tensor cores' timing); B is zeros in shared memory.
// Question it answers: does a deeper queue of smaller WGMMAs with the same 32 accumulator registers shorten an
// m-tile (the kernel's PV was ~400 traced cycles per m-tile for 64 cycles of tensor work)?
// Answer (H200): no. Alone 150.4 / 148.4 / 159.6 cycles per m-tile (main / ring of 4 n16 /
// ring of 2 n32); next to QK groups 246.6 / 359.5 / 358.1.
//   build (CUTLASS: the headers setup.py finds, e.g. third_party/cutlass or the nvidia-cutlass package's source/):
//          nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 -I csrc -I $CUTLASS/include -o /tmp/wgmma_pv_ring \
//            tools/microbench/wgmma_pv_ring.cu
//   run:   /tmp/wgmma_pv_ring     (one line per pattern and mix: cycles per m-tile of the PV warpgroup)
#include <cstdint>
#include <cstdio>

#include "kernels/sm90/common/wgmma.cuh"

using namespace snapmla::sm90;

namespace {

constexpr int SMEM_BYTES = 64 * 1024;  // QK operands in [0, 32 KB), P^T-like B tiles in [32 KB, 64 KB)
constexpr int M_TILES = 4;             // per block, as a warpgroup's 256 dims in the kernel

__device__ __forceinline__ uint32_t zero_operands(uint8_t* smem) {
  for (int i = threadIdx.x; i < SMEM_BYTES / 4; i += blockDim.x) reinterpret_cast<uint32_t*>(smem)[i] = 0;
  __syncthreads();
  return static_cast<uint32_t>(__cvta_generic_to_shared(smem));
}

// PATTERN 0: m64n64 (main), 1: ring of 4 n16 slices, 2: ring of 2 n32 slices (n32 as two n16 WGMMAs per k-step
// would change the shape; it is issued as m64n16 pairs into a 16-register slot).
// 3: page pair, 4 k-steps per m-tile (the second page's P^T tile 4 KB after the first).
template <int PATTERN>
__device__ __forceinline__ void pv_block(float (&o)[M_TILES][32], const uint32_t (&a)[2][4], uint64_t pt_desc,
                                         const float (&cs)[16]) {
  if constexpr (PATTERN == 0 || PATTERN == 3) {
    constexpr int K_STEPS = PATTERN == 3 ? 4 : 2;
#pragma unroll
    for (int mt = 0; mt < M_TILES; ++mt) {
      float acc[32];
      wgmma_fence_operands(acc);
      cute::warpgroup_arrive();
#pragma unroll
      for (int g = 0; g < K_STEPS; ++g)
        wgmma_m64n64k32_e4m3_rs(acc, a[g % 2], pt_desc + 2 * (g % 2) + (g / 2) * (4096 >> 4), g > 0);
      cute::warpgroup_commit_batch();
      cute::warpgroup_wait<0>();
      wgmma_fence_operands(acc);
#pragma unroll
      for (int k = 0; k < 32; ++k) o[mt][k] = fmaf(o[mt][k], cs[2 * (k / 4) + k % 2], acc[k]);
    }
  } else {
    constexpr int SLICES = PATTERN == 1 ? 4 : 2;         // per m-tile
    constexpr int PER_SLICE = 4 / SLICES;                // m64n16 WGMMAs per k-step in a slice
    constexpr int SLOT = 8 * PER_SLICE;                  // accumulator registers per slot
    constexpr int RING = SLICES;                         // 32 registers in all
    constexpr int GROUPS = M_TILES * SLICES;
    float acc[RING][SLOT];
    auto retire = [&](int q) {
      const int mt = q / SLICES, sl = q % SLICES;
      wgmma_fence_operands(acc[q % RING]);
#pragma unroll
      for (int j = 0; j < SLOT; ++j) {
        const int k = SLOT * sl + j;
        o[mt][k] = fmaf(o[mt][k], cs[2 * (k / 4) + k % 2], acc[q % RING][j]);
      }
    };
#pragma unroll
    for (int q = 0; q < GROUPS; ++q) {
      const int sl = q % SLICES;
      float(&d)[SLOT] = acc[q % RING];
      wgmma_fence_operands(d);
      cute::warpgroup_arrive();
#pragma unroll
      for (int h = 0; h < PER_SLICE; ++h) {
        float(&dh)[8] = *reinterpret_cast<float(*)[8]>(&d[8 * h]);
#pragma unroll
        for (int g = 0; g < 2; ++g)
          wgmma_m64n16k32_e4m3_rs(dh, a[g], pt_desc + (((PER_SLICE * sl + h) * 16 * 64 + 32 * g) >> 4), g > 0);
      }
      cute::warpgroup_commit_batch();
      if (q >= RING - 1) {
        cute::warpgroup_wait<RING - 1>();
        retire(q - (RING - 1));
      }
    }
    if constexpr (RING >= 4) { cute::warpgroup_wait<2>(); retire(GROUPS - 3); }
    if constexpr (RING >= 3) { cute::warpgroup_wait<1>(); retire(GROUPS - 2); }
    cute::warpgroup_wait<0>();
    retire(GROUPS - 1);
  }
}

// Warpgroup 0: `blocks` PV blocks of PATTERN; warpgroup 1 (with_qk): QK-like groups for as long as warpgroup 0
// runs (a flag in shared memory stops it). Warpgroup 0's leader records its cycles per m-tile.
template <int PATTERN>
__global__ void __launch_bounds__(256, 1) pv_kernel(int blocks, int with_qk, float* cycles_per_mtile) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ volatile int stop;
  if (threadIdx.x == 0) stop = 0;
  const uint32_t base = zero_operands(smem);
  const int wg = threadIdx.x / 128;
  const uint64_t pt_desc = make_smem_desc(base + 32768, 512, SmemSwizzle::B64);
  if (wg == 0) {
    float o[M_TILES][32];
#pragma unroll
    for (int m = 0; m < M_TILES; ++m) {
#pragma unroll
      for (int k = 0; k < 32; ++k) o[m][k] = 0.f;
    }
    float cs[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) cs[i] = 1.f + 1e-3f * i;
    uint32_t a[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
    for (int g = 0; g < 2; ++g) wgmma_fence_operands(a[g]);
    pv_block<PATTERN>(o, a, pt_desc, cs);  // warm-up
    const long long t0 = clock64();
    for (int b = 0; b < blocks; ++b) pv_block<PATTERN>(o, a, pt_desc, cs);
    const long long t1 = clock64();
    float sum = 0.f;
#pragma unroll
    for (int m = 0; m < M_TILES; ++m) {
#pragma unroll
      for (int k = 0; k < 32; ++k) sum += o[m][k];
    }
    if (threadIdx.x == 0) {
      cycles_per_mtile[blockIdx.x] = float(t1 - t0) / (blocks * M_TILES) + (sum != 0.f ? 1e-9f : 0.f);
      stop = 1;
    }
  } else if (with_qk) {
    const uint64_t qa = make_smem_desc(base, 1024, SmemSwizzle::B128);
    const uint64_t qb = make_smem_desc(base + 16384, 1024, SmemSwizzle::B128);
    float s[32];
    while (!stop) {
      wgmma_fence_operands(s);
      cute::warpgroup_arrive();
#pragma unroll
      for (int kk = 0; kk < 20; ++kk) wgmma_m64n64k32_e4m3_ss(s, qa + 2 * (kk % 4), qb + 2 * (kk % 4), kk > 0);
      cute::warpgroup_commit_batch();
      cute::warpgroup_wait<0>();
      wgmma_fence_operands(s);
    }
    if (s[0] == 1.2345f) cycles_per_mtile[gridDim.x + blockIdx.x] = s[1];  // keeps the QK live
  }
}

template <int PATTERN>
void run(const char* name, int sms) {
  auto kern = pv_kernel<PATTERN>;
  cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
  float* d;
  cudaMalloc(&d, sizeof(float) * 2 * sms);
  for (int with_qk = 0; with_qk <= 1; ++with_qk) {
    kern<<<sms, 256, SMEM_BYTES>>>(256, with_qk, d);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      printf("%s: %s\n", name, cudaGetErrorString(err));
      return;
    }
    float h[264];
    cudaMemcpy(h, d, sizeof(float) * sms, cudaMemcpyDeviceToHost);
    double mean = 0;
    for (int b = 0; b < sms; ++b) mean += h[b];
    printf("%-16s %-22s %7.1f cycles per m-tile (64 cycles of tensor work at the FP8 peak)\n", name,
           with_qk ? "next to QK groups:" : "alone:", mean / sms);
  }
  cudaFree(d);
}

}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  if (sms > 132) sms = 132;
  run<0>("m64n64 (main)", sms);
  run<1>("ring of 4 n16", sms);
  run<2>("ring of 2 n32", sms);
  run<3>("page pair (x4 k)", sms);
  return 0;
}

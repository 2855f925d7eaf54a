// Issue rate and group latency of the WGMMA shapes the decode kernels use, on one SM at a time of the whole GPU
// (132 CTAs, one per SM, 1 or 2 warpgroups issuing). Answers "how many cycles does one m64nNk32 FP8 WGMMA cost
// when the operands come from shared memory (SS) or A from registers (RS)", which the per-block budgets of
// docs/design.md need: the tensor-core peak (4096 FP8 MACs per SM and cycle, 32 cycles per m64n64k32)
// holds only if shared memory can feed the operands.
//   build: nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 -o /tmp/wgmma_rate tools/microbench/wgmma_rate.cu
//   run:   /tmp/wgmma_rate            (prints one line per shape, group size and warpgroup count)
// Operands are zeros in 128 KB of shared memory (K-major Swizzle-128B descriptors, as in the kernels); values do
// not change the tensor cores' timing.
#include <cstdint>
#include <cstdio>

#include "wgmma_shapes.cuh"

namespace {

constexpr int SMEM_BYTES = 128 * 1024;  // A in [0, 64 KB), B in [64 KB, 128 KB): room for N = 256 rows

__device__ __forceinline__ uint64_t desc_at(uint32_t addr) {
  uint64_t d = (addr & 0x3FFFF) >> 4;
  d |= uint64_t(1) << 16;
  d |= uint64_t(1024 >> 4) << 32;
  d |= uint64_t(1) << 62;  // Swizzle-128B
  return d;
}

template <int NREG>
__device__ __forceinline__ void fence_acc(float (&d)[NREG]) {
#pragma unroll
  for (int i = 0; i < NREG; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Operand of k-step g: A in the first 64 KB, B in the second, 32 B further per step inside the swizzle rows and
// one 8-KB tile further every 4 steps.
__device__ __forceinline__ uint64_t operand_desc(uint32_t base, bool b_side, int g) {
  return desc_at(base + (b_side ? 65536 : 0) + (g % 4) * 32 + (g / 4 % 4) * 8192);
}

// Zeroes the operands, then returns the shared address of the buffer (all threads of the CTA call it).
__device__ __forceinline__ uint32_t zero_operands(uint8_t* smem) {
  for (int i = threadIdx.x; i < SMEM_BYTES / 4; i += blockDim.x) reinterpret_cast<uint32_t*>(smem)[i] = 0;
  __syncthreads();
  return static_cast<uint32_t>(__cvta_generic_to_shared(smem));
}

__device__ __forceinline__ void commit_and_wait_all() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}

// Warpgroup leader writes its elapsed cycles; the accumulator sum keeps the WGMMAs from being optimised away.
template <int NREG>
__device__ __forceinline__ void record_cycles(const float (&d)[NREG], long long t0, long long* cycles) {
  const long long t1 = clock64();
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < NREG; ++i) sum += d[i];
  if (threadIdx.x % 128 == 0) cycles[blockIdx.x * 2 + threadIdx.x / 128] = (t1 - t0) + (sum != 0.f ? 1 : 0);
}

// SHAPE: 0 ss n64 e4m3, 1 ss n128 e4m3, 2 ss n256 e4m3, 3 ss n64 bf16, 4 ss n256 bf16, 5 rs n64, 6 rs n128,
// 7 rs n256. GROUP WGMMAs per commit group, then wait_group 0 (GROUP = 2: the decode kernel's PV m-tile).
template <int SHAPE, int NREG, int GROUP>
__global__ void __launch_bounds__(256, 1) rate_kernel(int iters, int active_wgs, long long* cycles) {
  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t base = zero_operands(smem);
  const int wg = threadIdx.x / 128;
  if (wg >= active_wgs) return;
  float d[NREG];
#pragma unroll
  for (int i = 0; i < NREG; ++i) d[i] = 0.f;
  uint32_t a[4] = {0, 0, 0, 0};
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
    fence_acc(d);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
      const uint64_t da = operand_desc(base, false, g), db = operand_desc(base, true, g);
      if constexpr (SHAPE == 0) mma_ss_n64_e4m3(d, da, db);
      if constexpr (SHAPE == 1) mma_ss_n128_e4m3(d, da, db);
      if constexpr (SHAPE == 2) mma_ss_n256_e4m3(d, da, db);
      if constexpr (SHAPE == 3) mma_ss_n64_bf16(d, da, db);
      if constexpr (SHAPE == 4) mma_ss_n256_bf16(d, da, db);
      if constexpr (SHAPE == 5) mma_rs_n64_e4m3(d, a, db);
      if constexpr (SHAPE == 6) mma_rs_n128_e4m3(d, a, db);
      if constexpr (SHAPE == 7) mma_rs_n256_e4m3(d, a, db);
    }
    commit_and_wait_all();
    fence_acc(d);
  }
  record_cycles(d, t0, cycles);
}

template <int SHAPE, int NREG, int GROUP>
void run(const char* name, long long macs_per_mma, int sms) {
  auto kern = rate_kernel<SHAPE, NREG, GROUP>;
  cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
  long long* cyc;
  cudaMalloc(&cyc, sizeof(long long) * sms * 2);
  const int iters = 4096 / GROUP;
  for (int wgs = 1; wgs <= 2; ++wgs) {
    kern<<<sms, 256, SMEM_BYTES>>>(iters / 8, wgs, cyc);  // warm-up
    kern<<<sms, 256, SMEM_BYTES>>>(iters, wgs, cyc);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) { printf("%s: %s\n", name, cudaGetErrorString(err)); return; }
    long long h[2 * 132];
    cudaMemcpy(h, cyc, sizeof(long long) * sms * 2, cudaMemcpyDeviceToHost);
    double mean = 0;
    for (int b = 0; b < sms; ++b) mean += h[2 * b];
    mean /= sms;
    const double per_mma = mean / (double(iters) * GROUP);
    // SM-wide: wgs warpgroups each issued iters * GROUP WGMMAs in `mean` cycles.
    const double macs_per_cycle = double(macs_per_mma) * iters * GROUP * wgs / mean;
    printf("%-22s group %2d  wgs %d: %7.1f cycles per WGMMA per warpgroup, %6.0f MACs/cycle/SM (%4.0f%% of %s peak)\n",
           name, GROUP, wgs, per_mma, macs_per_cycle,
           100.0 * macs_per_cycle / (SHAPE == 3 || SHAPE == 4 ? 2048.0 : 4096.0), SHAPE == 3 || SHAPE == 4 ? "bf16" : "fp8");
  }
  cudaFree(cyc);
}


// The decode kernel's mix: warpgroup 0 issues QK-like groups (20 SS m64n64k32, then wait), warpgroup 1 PV-like
// groups (2 RS m64n64k32, then wait), both for the same number of cycles' worth of loop. Prints each warpgroup's
// cycles per group: if the tensor pipe serves the two in issue order, a 2-WGMMA group waits behind a 20-WGMMA one.
// One role of the mix, with its own accumulator: a `d` shared by both branches of a warpgroup-index test made
// ptxas serialise every WGMMA (C7520: a compiler-inserted arrive in a divergent path), which the first run of
// this test (2026-12-01, call 3) suffered from.
template <bool QK>
__device__ __forceinline__ void mixed_role(uint32_t base, int iters, long long* cycles) {
  float d[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) d[i] = 0.f;
  const uint32_t a[4] = {0, 0, 0, 0};
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
    fence_acc(d);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    if constexpr (QK) {
#pragma unroll
      for (int g = 0; g < 20; ++g) mma_ss_n64_e4m3(d, operand_desc(base, false, g), operand_desc(base, true, g));
    } else {
#pragma unroll
      for (int g = 0; g < 2; ++g) mma_rs_n64_e4m3(d, a, operand_desc(base, true, g));
    }
    commit_and_wait_all();
    fence_acc(d);
  }
  record_cycles(d, t0, cycles);
}

__global__ void __launch_bounds__(256, 1) mixed_kernel(int qk_iters, int pv_iters, long long* cycles) {
  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t base = zero_operands(smem);
  if (threadIdx.x / 128 == 0)
    mixed_role<true>(base, qk_iters, cycles);
  else
    mixed_role<false>(base, pv_iters, cycles);
}

void run_mixed(int sms) {
  cudaFuncSetAttribute(mixed_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
  long long* cyc;
  cudaMalloc(&cyc, sizeof(long long) * sms * 2);
  const int qk_iters = 200, pv_iters = 2000;
  mixed_kernel<<<sms, 256, SMEM_BYTES>>>(qk_iters, pv_iters, cyc);
  if (cudaDeviceSynchronize() != cudaSuccess) { printf("mixed: error\n"); return; }
  long long h[2 * 132];
  cudaMemcpy(h, cyc, sizeof(long long) * sms * 2, cudaMemcpyDeviceToHost);
  double c0 = 0, c1 = 0;
  for (int b = 0; b < sms; ++b) { c0 += h[2 * b]; c1 += h[2 * b + 1]; }
  c0 /= sms; c1 /= sms;
  printf("mixed: wg0 %d groups of 20 SS in %.0f cycles (%.1f per group); wg1 %d groups of 2 RS in %.0f cycles (%.1f per group)\n",
         qk_iters, c0, c0 / qk_iters, pv_iters, c1, c1 / pv_iters);
  cudaFree(cyc);
}

}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  if (sms > 132) sms = 132;
  run<0, 32, 16>("ss m64n64k32 e4m3", 64 * 64 * 32, sms);
  run<0, 32, 2>("ss m64n64k32 e4m3", 64 * 64 * 32, sms);
  run<1, 64, 16>("ss m64n128k32 e4m3", 64 * 128 * 32, sms);
  run<2, 128, 16>("ss m64n256k32 e4m3", 64 * 256 * 32, sms);
  run<3, 32, 16>("ss m64n64k16 bf16", 64 * 64 * 16, sms);
  run<4, 128, 16>("ss m64n256k16 bf16", 64 * 256 * 16, sms);
  run<5, 32, 16>("rs m64n64k32 e4m3", 64 * 64 * 32, sms);
  run<5, 32, 2>("rs m64n64k32 e4m3", 64 * 64 * 32, sms);
  run<6, 64, 16>("rs m64n128k32 e4m3", 64 * 128 * 32, sms);
  run<7, 128, 16>("rs m64n256k32 e4m3", 64 * 256 * 32, sms);
  run_mixed(sms);
  return 0;
}

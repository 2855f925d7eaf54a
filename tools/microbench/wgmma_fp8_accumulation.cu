// How one FP8 WGMMA k-step adds into its accumulator, checked against the model of
// tools/numerics/qk_accumulation_model.py (docs/design.md section 6): the 32 products and C are aligned to
// the largest exponent among them, each truncated toward zero to 13 fraction bits there, and the result kept
// to 14 significant bits. Each case is one m64n16k32 e4m3 WGMMA (the narrow kernel's QK shape, the repository's
// wrapper) with every element of A equal to a, every element of B equal to b and every accumulator equal to C,
// so the operands' shared-memory layout does not matter and all 1024 results must be equal.
//   build (CUTLASS: the headers setup.py finds, e.g. third_party/cutlass or the nvidia-cutlass package's source/):
//          nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O2 -I csrc -I $CUTLASS/include -o /tmp/wgmma_fp8_acc \
//            tools/microbench/wgmma_fp8_accumulation.cu
//   run:   /tmp/wgmma_fp8_acc      (one line per case: C, a, b, the exact sum, the model's, the GPU's; exit 1 if
//                                   the GPU differs from the model or its results are not all equal)
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "kernels/sm90/common/wgmma.cuh"

namespace {

using snapmla::sm90::make_smem_desc;
using snapmla::sm90::SmemSwizzle;

constexpr int M = 64, N = 16, K = 32;
constexpr int ROW_BYTES = 128;  // one Swizzle-128B row; the WGMMA reads the first 32 bytes of each

struct Case {
  float c, a, b, model;  // model: the result the model of the header predicts (worked out by hand below)
  const char* what;
};

// One warpgroup, one WGMMA: D = C + A B^T with constant operands; out[t * 8 + i] = thread t's d[i].
__global__ void one_step(float c, uint8_t a_byte, uint8_t b_byte, float* out) {
  __shared__ alignas(1024) uint8_t a_tile[M * ROW_BYTES];
  __shared__ alignas(1024) uint8_t b_tile[N * ROW_BYTES];
  for (int i = threadIdx.x; i < M * ROW_BYTES; i += blockDim.x) a_tile[i] = a_byte;
  for (int i = threadIdx.x; i < N * ROW_BYTES; i += blockDim.x) b_tile[i] = b_byte;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  float d[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) d[i] = c;
  const uint64_t da = make_smem_desc(static_cast<uint32_t>(__cvta_generic_to_shared(a_tile)), 8 * ROW_BYTES,
                                     SmemSwizzle::B128);
  const uint64_t db = make_smem_desc(static_cast<uint32_t>(__cvta_generic_to_shared(b_tile)), 8 * ROW_BYTES,
                                     SmemSwizzle::B128);
  namespace sm = snapmla::sm90;
  sm::wgmma_fence_operands(d);
  cute::warpgroup_arrive();
  sm::wgmma_m64n16k32_e4m3_ss(d, da, db, 1);
  cute::warpgroup_commit_batch();
  cute::warpgroup_wait<0>();
  sm::wgmma_fence_operands(d);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[threadIdx.x * 8 + i] = d[i];
}

uint8_t e4m3_byte(float x) {
  const __nv_fp8_e4m3 v(x);
  if (static_cast<float>(v) != x) {
    std::printf("%g is not an e4m3 value\n", x);
    std::exit(2);
  }
  return v.__x;
}

}  // namespace

int main() {
  // Worked out with the model: products a b (exponent e_a + e_b), C's exponent e_c; unit = 2^(max - 13).
  const Case cases[] = {
      {0.f, 1.f, 1.f, 32.f, "no accumulator: exact"},
      {1024.f, 1.f, 1.f, 1056.f, "C = 2^10: unit 2^-3, the ones survive"},
      {1048576.f, 1.f, 1.f, 1048576.f, "C = 2^20: unit 2^7, each product of 1 truncated to 0"},
      {1048576.f, 128.f, 1.f, 1048576.f + 4096.f, "C = 2^20, products 2^7: exactly one unit each"},
      {1048576.f, 192.f, 1.f, 1048576.f + 4096.f, "C = 2^20, products 1.5 * 2^7: truncated to 2^7"},
      {-1048576.f, 1.f, 1.f, -1048576.f, "C = -2^20: truncation toward zero of each term"},
      {16385.f, 0.f, 0.f, 16384.f, "C = 2^14 + 1 alone: kept to 14 significant bits"},
  };
  float* out = nullptr;
  cudaMalloc(&out, 128 * 8 * sizeof(float));
  float host[128 * 8];
  int bad = 0;
  std::printf("%-12s %-6s %-6s %-14s %-14s %-14s  %s\n", "C", "a", "b", "exact", "model", "GPU", "case");
  for (const Case& cs : cases) {
    one_step<<<1, 128>>>(cs.c, e4m3_byte(cs.a), e4m3_byte(cs.b), out);
    if (cudaDeviceSynchronize() != cudaSuccess) {
      std::printf("launch failed: %s\n", cudaGetErrorString(cudaGetLastError()));
      return 2;
    }
    cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
    bool uniform = true;
    for (float v : host) uniform = uniform && v == host[0];
    const double exact = static_cast<double>(cs.c) + K * static_cast<double>(cs.a) * cs.b;
    const bool ok = uniform && host[0] == cs.model;
    bad += !ok;
    std::printf("%-12.1f %-6g %-6g %-14.1f %-14.1f %-14.1f  %s%s%s\n", cs.c, cs.a, cs.b, exact, cs.model, host[0],
                cs.what, uniform ? "" : " (results differ between elements)", ok ? "" : "  <-- differs from the model");
  }
  cudaFree(out);
  std::printf("%s\n", bad ? "the GPU differs from the model" : "the GPU matches the model in every case");
  return bad ? 1 : 0;
}

// Minimal reproduction for compute-sanitizer racecheck of the narrow decode kernel's piece-merge pattern
// (docs/decode_kernel.md, narrow section): 384 threads = 2 "math" warpgroups + 1 "producer" warpgroup whose
// warps exit at once. Per piece: each math warpgroup reduces through its own 128-thread named barrier (id 1 + wg),
// lane 0..3 of its warp 0 publish a float4 per column into state[wg] through a generic pointer, every thread
// publishes a float4 into xfer[wg][tid]; bar.sync 3, 256; every thread reads the peer's state and xfer; bar.sync
// 4, 256. The protocol is race-free by construction. Run:
//   nvcc -arch=sm_90a -lineinfo -o /tmp/rc scripts/repro/racecheck_count_barrier.cu
//   compute-sanitizer --tool racecheck --racecheck-report hazard /tmp/rc
// It prints the checksum; racecheck hazards on `state` here would mean the tool, not the kernel.
#include <cstdio>

__device__ __forceinline__ void bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

struct Smem {
  float red[2][4][16];   // per math warpgroup, per warp: column partials
  float4 state[2][16];   // per math warpgroup, per column: {m, inv, l, 0}
  float4 xfer[2][128];   // per math warpgroup, per thread
};

// Per-warpgroup templates with the barriers in the caller, as narrow/merge_store.cuh and narrow/kernel.cuh.
template <int WG>
__device__ __forceinline__ void publish(Smem& ss, int tid, float v, float& sum, int piece) {
  const int warp = tid / 32, lane = tid % 32, t = lane % 4;
  for (int x = 4; x < 32; x *= 2) v += __shfl_xor_sync(0xffffffffu, v, x);
  if (lane < 4) ss.red[WG][warp][4 * t] = v;
  bar_sync(1 + WG, 128);
  sum = 0.f;
  for (int w = 0; w < 4; ++w) sum += ss.red[WG][w][4 * t];
  float4* state = ss.state[WG];  // generic pointer, as in the kernel
  if (warp == 0 && lane < 4)
    for (int c = 0; c < 4; ++c) state[4 * c + t] = make_float4(sum, 1.f + piece, sum * 0.5f, 0.f);
  ss.xfer[WG][tid] = make_float4(v, sum, 0.f, 0.f);
}

template <int WG>
__device__ __forceinline__ float merge(const Smem& ss, int tid) {
  const int t = tid % 4;
  const float4 peer = ss.state[WG ^ 1][4 * (tid % 4) + t];
  const float4 px = ss.xfer[WG ^ 1][tid];
  return peer.x + peer.y + peer.z + px.x + px.y;
}

__global__ void __launch_bounds__(384, 1) merge_pattern(int pieces, float* out) {
  __shared__ Smem ss;
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  if (wg == 2) return;  // the producer warpgroup's warps exit (the TMA thread's work is not modelled)
  float acc = 0.f;
  for (int piece = 0; piece < pieces; ++piece) {
    // Uneven work before the merge, as alternate blocks give: the warpgroup of the piece's parity is late.
    if (wg == piece % 2) {
      const long long t0 = clock64();
      while (clock64() - t0 < 20000) {
      }
    }
    const float v = static_cast<float>(piece * 1000 + wg * 100 + tid);
    float sum;
    if (wg == 0)
      publish<0>(ss, tid, v, sum, piece);
    else
      publish<1>(ss, tid, v, sum, piece);
    bar_sync(3, 256);
    acc += sum + (wg == 0 ? merge<0>(ss, tid) : merge<1>(ss, tid));
    bar_sync(4, 256);
  }
  out[threadIdx.x] = acc;
}

int main() {
  float* out;
  cudaMalloc(&out, 384 * sizeof(float));
  for (int rep = 0; rep < 4; ++rep) merge_pattern<<<132, 384>>>(5, out);
  float h[384];
  cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost);
  double s = 0;
  for (int i = 0; i < 256; ++i) s += h[i];
  printf("checksum %.6e, %s\n", s, cudaGetErrorString(cudaGetLastError()));
  return 0;
}

// Minimal reproduction for compute-sanitizer racecheck of the narrow decode kernel's piece-merge pattern
// (docs/design.md, narrow section): 384 threads = 2 "math" warpgroups + 1 "producer" warpgroup whose
// warps exit at once. Per piece: each math warpgroup reduces through its own 128-thread named barrier (id 1 + wg),
// lane 0..3 of its warp 0 publish a float4 per column into state[wg] through a generic pointer, every thread
// publishes a float4 into xfer[wg][tid]; bar.sync 3, 256; every thread reads the peer's state and xfer; bar.sync
// 4, 256. The protocol is race-free by construction. Run:
//   nvcc -gencode arch=compute_90a,code=sm_90a -lineinfo [-DREPRO_...] -o /tmp/rc tools/repro/racecheck_count_barrier.cu
//   compute-sanitizer --tool racecheck --racecheck-report hazard /tmp/rc
// It prints the checksum; racecheck hazards on `state` here would mean the tool, not the kernel.
// The kernel's other ingredients, one flag each (nvcc -D...): REPRO_SETMAXNREG (232 / 40 register split),
// REPRO_PIPELINE (a producer thread feeds each piece through a full / empty mbarrier pair with a bulk async copy
// from global memory into shared memory, which the math warpgroups wait for and read before the merge),
// REPRO_GENERIC (dynamic shared memory aligned to 1024 B by integer arithmetic, as kernel_prologue.cuh
// aligned_storage does: the compiler loses the address space and emits generic ST.E / LD.E, as in the kernel),
// REPRO_OWN_BLOCKS (between merges each warpgroup runs its own blocks: a different number of 128-thread
// barrier generations per warpgroup, with the barrier id in a register, as narrow/kernel.cuh own_block),
// REPRO_PDL (the decode call's launch chain, common/pdl.h: every launch is programmatic, each grid waits for its
// predecessor before touching global memory and lets its dependent launch at once; after each merge grid a
// combine-like grid of 128-thread CTAs with 7.5 KB of static shared memory, which fits beside a merge CTA; the
// merge state then lives at the narrow kernel's own offsets in 216 KB of dynamic shared memory, xfer at 0x2d800).
// REPRO_MERGE_MBARRIER orders the merge as the narrow kernel now does: two mbarriers of 256 arrivals (arrive, then
// wait for the piece's parity) in place of bar.sync 3 and 4.
// H100, 2026-12-07: clean with no flag, with each flag alone and with REPRO_PDL; 220768 reported hazards with
// REPRO_PDL, REPRO_PIPELINE, REPRO_SETMAXNREG and REPRO_OWN_BLOCKS together (on which accesses, the merge state or
// the bulk-copied page, was not recorded). The narrow kernel has since ordered its merge with mbarriers
// (narrow/config.h merge_bar), under which racecheck reports nothing on it. Here the bar.sync form stays the
// default, to narrow down which combination the tool misreads; REPRO_MERGE_MBARRIER gives the kernel's form under
// the same combination.
#include <cstdint>
#include <cstdio>

__device__ __forceinline__ void bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

struct Smem {
  float4 page[2][256];   // REPRO_PIPELINE: two stages written by cp.async.bulk (4 KB each)
  unsigned long long full[2], empty[2];
  unsigned long long merge_bar[2];  // REPRO_MERGE_MBARRIER: published, read (256 arrivals, one phase per piece)
  float red[2][4][16];   // per math warpgroup, per warp: column partials
  float4 state[2][16];   // per math warpgroup, per column: {m, inv, l, 0}
  float4 xfer[2][128];   // per math warpgroup, per thread
  float pt[2][128];      // REPRO_OWN_BLOCKS: per math warpgroup, a block's hand-over between its warps
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

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(unsigned long long* b, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* b) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned long long* b, int bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}" ::"r"(smem_u32(b)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long* b, int parity) {
  asm volatile(
      "{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W;\n}" ::"r"(smem_u32(b)),
      "r"(parity)
      : "memory");
}

#ifdef REPRO_PDL
// The narrow kernel's layout: KV stages, query buffers and P^T below xfer (narrow/config.h NarrowStorage).
constexpr int SMEM_STATE_OFFSET = 0x2d800, SMEM_DYNAMIC_BYTES = 216 * 1024;
static_assert(SMEM_STATE_OFFSET + sizeof(Smem) + 1024 <= SMEM_DYNAMIC_BYTES, "state inside the allocation");
__device__ __forceinline__ void grid_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void grid_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;"); }

// Combine-like dependent grid: waits for the merge grid, then stages and sums through its own shared memory.
__global__ void __launch_bounds__(128) dependent_smem(const float* in, float* out) {
  __shared__ float4 buf[480];  // 7.5 KB, the combine's largest `partial`
  grid_launch_dependents();
  grid_wait();
  const int tid = threadIdx.x;
  for (int i = tid; i < 480; i += 128) buf[i] = make_float4(in[i % 384], 1.f, 2.f, 3.f);
  __syncthreads();
  float s = 0.f;
  for (int i = 0; i < 480; i += 32) s += buf[(i + tid) % 480].x;
  out[blockIdx.x * 128 + tid] = s;
}
#endif

__global__ void __launch_bounds__(384, 1) merge_pattern(int pieces, const float4* src, float* out) {
#if defined(REPRO_PDL)
  extern __shared__ unsigned char smem_raw[];
  const uintptr_t base = (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023};
  Smem& ss = *reinterpret_cast<Smem*>(base + SMEM_STATE_OFFSET);
  grid_wait();  // the kernels wait before their first global access, then trigger their dependents
  grid_launch_dependents();
#elif defined(REPRO_GENERIC)
  extern __shared__ unsigned char smem_raw[];
  Smem& ss = *reinterpret_cast<Smem*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
#else
  __shared__ __align__(128) Smem ss;
#endif
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
#if defined(REPRO_PIPELINE) || defined(REPRO_MERGE_MBARRIER)
  if (threadIdx.x == 0) {
    for (int i = 0; i < 2; ++i) {
      mbar_init(&ss.full[i], 1);
      mbar_init(&ss.empty[i], 256);
      mbar_init(&ss.merge_bar[i], 256);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
#endif
  if (wg == 2) {
#ifdef REPRO_SETMAXNREG
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
#endif
#ifdef REPRO_PIPELINE
    if (threadIdx.x == 256) {  // the TMA thread: one 4 KB bulk copy per piece into stage piece % 2
      for (int piece = 0; piece < pieces; ++piece) {
        const int st = piece % 2;
        if (piece >= 2) mbar_wait(&ss.empty[st], ((piece / 2) - 1) & 1);
        mbar_expect_tx(&ss.full[st], 4096);
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 4096, [%2];" ::"r"(
                smem_u32(ss.page[st])),
            "l"(src + 256 * piece), "r"(smem_u32(&ss.full[st]))
            : "memory");
      }
    }
#endif
    return;  // the producer warpgroup's other warps exit at once, as in the kernel
  }
#ifdef REPRO_SETMAXNREG
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
#endif
  float acc = 0.f;
  for (int piece = 0; piece < pieces; ++piece) {
#ifdef REPRO_PIPELINE
    const int st = piece % 2;
    mbar_wait(&ss.full[st], (piece / 2) & 1);
    acc += ss.page[st][tid].x + ss.page[st][128 + tid].y;
    mbar_arrive(&ss.empty[st]);
#endif
    // Uneven work before the merge, as alternate blocks give: the warpgroup of the piece's parity is late.
    if (wg == piece % 2) {
      const long long t0 = clock64();
      while (clock64() - t0 < 20000) {
      }
    }
#ifdef REPRO_OWN_BLOCKS
    {
      // Alternate blocks: warpgroup wg owns blocks j of the piece with j % 2 == wg; 1 + 2 * (piece % 3) blocks.
      const int bar_id = 1 + (threadIdx.x >> 7);  // from a register, not an immediate
      int bar_reg;
      asm volatile("mov.b32 %0, %1;" : "=r"(bar_reg) : "r"(bar_id));
      const int blocks = 1 + 2 * (piece % 3);
      for (int j = wg; j < blocks; j += 2) {
        ss.pt[wg][tid] = static_cast<float>(j + tid);
        bar_sync(bar_reg, 128);
        acc += ss.pt[wg][(tid + 32) % 128];
        bar_sync(bar_reg, 128);
      }
    }
#endif
    const float v = static_cast<float>(piece * 1000 + wg * 100 + tid);
    float sum;
    if (wg == 0)
      publish<0>(ss, tid, v, sum, piece);
    else
      publish<1>(ss, tid, v, sum, piece);
#ifdef REPRO_MERGE_MBARRIER
    mbar_arrive(&ss.merge_bar[0]);
    mbar_wait(&ss.merge_bar[0], piece & 1);
    acc += sum + (wg == 0 ? merge<0>(ss, tid) : merge<1>(ss, tid));
    mbar_arrive(&ss.merge_bar[1]);
    mbar_wait(&ss.merge_bar[1], piece & 1);
#else
    bar_sync(3, 256);
    acc += sum + (wg == 0 ? merge<0>(ss, tid) : merge<1>(ss, tid));
    bar_sync(4, 256);
#endif
  }
  out[threadIdx.x] = acc;
}

#ifdef REPRO_PDL
// One programmatic launch (common/pdl.h does the same for every kernel of a decode call).
template <typename... Args>
void launch_pdl(void (*kernel)(Args...), unsigned grid, unsigned threads, int smem, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaLaunchKernelEx(&cfg, kernel, args...);
}
#endif

int main() {
  float* out;
  float4* src;
  cudaMalloc(&out, 384 * sizeof(float));
  cudaMalloc(&src, 5 * 4096);
  cudaMemset(src, 0, 5 * 4096);
#if defined(REPRO_PDL)
  float* dep_out;
  cudaMalloc(&dep_out, 4 * 132 * 128 * sizeof(float));
  cudaFuncSetAttribute(merge_pattern, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_DYNAMIC_BYTES);
  for (int rep = 0; rep < 4; ++rep) {
    launch_pdl(merge_pattern, 132, 384, SMEM_DYNAMIC_BYTES, 5, static_cast<const float4*>(src), out);
    launch_pdl(dependent_smem, 4 * 132, 128, 0, static_cast<const float*>(out), dep_out);
  }
#else
#ifdef REPRO_GENERIC
  const int smem = sizeof(Smem) + 1024;
#else
  const int smem = 0;
#endif
  for (int rep = 0; rep < 4; ++rep) merge_pattern<<<132, 384, smem>>>(5, src, out);
#endif
  float h[384];
  cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost);
  double s = 0;
  for (int i = 0; i < 256; ++i) s += h[i];
  printf("checksum %.6e, %s\n", s, cudaGetErrorString(cudaGetLastError()));
  return 0;
}

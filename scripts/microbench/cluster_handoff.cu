// Two measurements that a 2-CTA cluster decode kernel rests on (docs/design.md, Next steps a: each CTA of
// a pair holds 256 of the 512 dims of O^T; the owner of a block sends P^T and the softmax state to its peer):
//
//   A. hand-off latency between the two CTAs of a cluster: a ping-pong in which one CTA's 128 threads store a
//      payload into the peer's shared memory and the peer waits for it on its own mbarrier, then answers the
//      same way. Three ways to send, each at 3 payload sizes (16 B from one thread: latency alone; 2 KB; 6 KB
//      ~ a block's P^T 4 KB + its state and scales):
//        st.async:   st.async.shared::cluster...complete_tx::bytes (the bytes count on the peer's barrier,
//                    which its own thread 0 armed with arrive.expect_tx);
//        st+arrive:  st.shared::cluster, then mbarrier.arrive.release.cluster on the peer's barrier by every
//                    thread (128 arrivals; on sm_90 each release is a MEMBAR.GPU);
//        st+warp:    the same stores, __syncwarp, one release arrival per warp (4 arrivals).
//      Each CTA asks for 120 KB of shared memory so that an SM holds one of them; the run prints on how many
//      SMs the CTAs ran and how many pairs shared an SM (a same-SM pair would not measure a hop between SMs).
//      Cycles per one-way hop (store, the peer's wait, its __syncthreads), over 66 pairs running at once (every
//      SM busy), min / median / max.
//   B. page streaming with TMA multicast: each CTA keeps 4 pages of 41216 B in flight through a ring of
//      mbarriers, as the decode kernels do, reading 132 x 96 distinct pages (~520 MB):
//        unicast:   132 CTAs, each reads its own pages;
//        multicast: 66 pairs, each page read once and delivered into both CTAs of its pair
//                   (cp.async.bulk ... .multicast::cluster), each CTA arriving on the issuer's empty barrier.
//      Time, distinct bytes read per second, and bytes delivered into shared memory per second. A pair keeps 4
//      distinct pages in flight, half of what 2 unicast CTAs keep: that is the depth a 2-CTA decode kernel
//      with today's 4 stages would have, so a lower read rate there is the design's, not multicast's alone.
// No extension, no torch: plain nvcc.
//   build: nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 -I csrc -o /tmp/cluster_handoff \
//            scripts/microbench/cluster_handoff.cu
//   run:   timeout 300 /tmp/cluster_handoff   (stdout unbuffered: what ran before a hang is kept)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "host_timing.h"
#include "kernels/sm90/common/mbarrier.cuh"

using namespace snapmla::sm90;

namespace {

// ---- cluster-scope PTX (sm_90) ----
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// The shared::cluster address of the same shared::cta offset in CTA `rank` of the cluster.
__device__ __forceinline__ uint32_t map_to_rank(uint32_t cta_addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(cta_addr), "r"(rank));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void wait_cluster(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "cl_wait_loop:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra cl_wait_loop;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void st_async_v4(uint32_t remote_addr, const uint32_t (&v)[4], uint32_t remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
                   remote_addr),
               "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3]), "r"(remote_bar)
               : "memory");
}
__device__ __forceinline__ void st_cluster_v4(uint32_t remote_addr, const uint32_t (&v)[4]) {
  asm volatile("st.shared::cluster.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(remote_addr), "r"(v[0]), "r"(v[1]),
               "r"(v[2]), "r"(v[3])
               : "memory");
}
__device__ __forceinline__ void arrive_remote(uint32_t remote_bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote_bar) : "memory");
}
// Remote arrival without release semantics (CUTLASS ClusterBarrier::arrive(cta_id)'s form): for an "empty"
// barrier, where only a read-then-overwrite order is needed (mbarrier.cuh release_stage); no MEMBAR.GPU.
__device__ __forceinline__ void arrive_remote_relaxed(uint32_t remote_bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote_bar) : "memory");
}
__device__ __forceinline__ uint32_t sm_id() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void bulk_load_multicast(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar,
                                                    uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], "
      "%4;" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "h"(cta_mask)
      : "memory");
}

// ---- A. hand-off ping-pong ----
constexpr int HANDOFF_THREADS = 128;
constexpr int MAX_VECS = 3;  // 16-B stores per thread: 6 KB per message at most
constexpr int ITERS = 2000;
constexpr int HANDOFF_PAD_BYTES = 120 * 1024;  // dynamic shared memory per CTA: one CTA per SM

struct HandoffSmem {
  alignas(16) uint32_t inbox[MAX_VECS][HANDOFF_THREADS][4];  // [vec][thread]: a warp's v4 stores hit 32 banks
  uint64_t full;                                            // this CTA's inbox holds the peer's message
};

// MODE 0: st.async with complete_tx; MODE 1: st.shared::cluster + a release arrival per thread; MODE 2: the
// same stores + a release arrival per warp after __syncwarp. vecs = 0: one thread sends 16 B (latency alone).
template <int MODE>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(HANDOFF_THREADS)
    handoff_kernel(int vecs, long long* out, uint32_t* sm_of) {
  __shared__ HandoffSmem ss;
  const uint32_t rank = cluster_rank(), peer = rank ^ 1;
  const int tid = threadIdx.x;
  const int senders = vecs == 0 ? 1 : HANDOFF_THREADS;
  const uint32_t msg_bytes = vecs == 0 ? 16 : 16u * vecs * HANDOFF_THREADS;
  if (tid == 0) {
    mbarrier_init(&ss.full, MODE == 0 ? 1 : MODE == 1 ? senders : (senders + 31) / 32);
    fence_barrier_init();
  }
  cluster_sync();
  const uint32_t peer_bar = map_to_rank(smem_u32(&ss.full), peer);
  const uint32_t peer_inbox = map_to_rank(smem_u32(&ss.inbox[0][0][0]), peer);
  uint32_t v[4] = {static_cast<uint32_t>(tid), rank, 0u, 0u};
  auto arm = [&] {  // MODE 0: the receiver's own arrival carries the expected bytes of the next message
    if (MODE == 0 && tid == 0) mbarrier_arrive_expect_tx(&ss.full, msg_bytes);
  };
  auto send = [&] {
    if (tid >= senders) return;
    const int nv = vecs == 0 ? 1 : vecs;
    for (int c = 0; c < nv; ++c) {
      const uint32_t addr = peer_inbox + 16u * (c * HANDOFF_THREADS + tid);
      if (MODE == 0)
        st_async_v4(addr, v, peer_bar);
      else
        st_cluster_v4(addr, v);
    }
    if (MODE == 1) arrive_remote(peer_bar);
  };
  auto send_warp_arrival = [&] {  // MODE 2, after send(): the warp's stores, then one release by lane 0
    if (MODE != 2 || tid >= senders) return;
    __syncwarp(senders == 1 ? 1u : 0xffffffffu);
    if (tid % 32 == 0) arrive_remote(peer_bar);
  };
  auto receive = [&](int phase) {
    wait_cluster(&ss.full, phase & 1);
    v[2] += ss.inbox[0][tid % (vecs == 0 ? 1 : HANDOFF_THREADS)][2] + 1;  // consume the message
  };
  arm();
  __syncthreads();
  cluster_sync();  // both barriers armed before the first message
  long long t0 = clock64();
  for (int it = 0; it < ITERS; ++it) {
    if (rank == 0) {
      send();
      send_warp_arrival();
      receive(it);
      arm();
    } else {
      receive(it);
      arm();
      __syncthreads();  // every thread has read the inbox before this answer lets the peer send the next message
      send();
      send_warp_arrival();
    }
    __syncthreads();
  }
  long long t1 = clock64();
  if (tid == 0 && rank == 0) out[blockIdx.x / 2] = (t1 - t0) / (2LL * ITERS);
  if (v[2] == 0xffffffffu) out[0] = -1;  // keep the consumption
  if (tid == 0) sm_of[blockIdx.x] = sm_id();
  cluster_sync();  // no CTA leaves while its peer may still write into its shared memory
}

// ---- B. page streaming, unicast and multicast ----
constexpr uint32_t PAGE_BYTES = 41216;  // one 64-token page of the SnapMLA cache (kv_layout.h)
constexpr int STAGES = 4;
constexpr int PAGES_PER_STREAM = 96;

struct StreamSmem {
  alignas(128) uint8_t stage[STAGES][PAGE_BYTES];
  uint64_t full[STAGES];
  uint64_t empty[STAGES];  // in the issuing CTA: both CTAs of the pair (multicast) or this one (unicast)
};

template <bool MULTICAST>
__device__ void stream_pages(StreamSmem& ss, const uint8_t* pages, int stream, uint32_t rank,
                             unsigned long long* sink);

// One thread per CTA does everything: the kernels' producer and an instant consumer.
template <bool MULTICAST>
__global__ void __launch_bounds__(32) stream_kernel(const uint8_t* pages, int num_streams, unsigned long long* sink) {
  extern __shared__ uint8_t smem_raw[];
  StreamSmem& ss = *reinterpret_cast<StreamSmem*>(smem_raw);
  const uint32_t rank = MULTICAST ? cluster_rank() : 0;
  const int stream = MULTICAST ? blockIdx.x / 2 : blockIdx.x;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(&ss.full[s], 1);
      mbarrier_init(&ss.empty[s], MULTICAST ? 2 : 1);
    }
    fence_barrier_init();
  }
  if (MULTICAST) cluster_sync();
  __syncthreads();
  if (threadIdx.x == 0 && stream < num_streams) stream_pages<MULTICAST>(ss, pages, stream, rank, sink);
  __syncwarp();
  if (MULTICAST) cluster_sync();  // all 32 threads (.aligned): no CTA leaves while its peer may still arrive
}

template <bool MULTICAST>
__device__ void stream_pages(StreamSmem& ss, const uint8_t* pages, int stream, uint32_t rank,
                             unsigned long long* sink) {
  const uint8_t* base = pages + static_cast<size_t>(stream) * PAGES_PER_STREAM * PAGE_BYTES;
  unsigned long long acc = 0;
  const bool issuer = rank == 0;
  for (int n = 0; n < PAGES_PER_STREAM + STAGES; ++n) {
    if (n < PAGES_PER_STREAM) {  // issue page n into stage n % STAGES
      const int s = n % STAGES;
      mbarrier_arrive_expect_tx(&ss.full[s], PAGE_BYTES);  // every receiving CTA expects the page
      if (issuer) {
        if (n >= STAGES) wait_cluster(&ss.empty[s], ((n / STAGES) - 1) & 1);
        if (MULTICAST)
          bulk_load_multicast(smem_u32(ss.stage[s]), base + static_cast<size_t>(n) * PAGE_BYTES, PAGE_BYTES,
                              smem_u32(&ss.full[s]), 0x3);
        else
          bulk_load(smem_u32(ss.stage[s]), base + static_cast<size_t>(n) * PAGE_BYTES, PAGE_BYTES,
                    smem_u32(&ss.full[s]));
      }
    }
    const int c = n - (STAGES - 1);  // consume page c
    if (c >= 0 && c < PAGES_PER_STREAM) {
      const int s = c % STAGES;
      mbarrier_wait(&ss.full[s], (c / STAGES) & 1);
      acc += ss.stage[s][(c * 97) % PAGE_BYTES];
      if (MULTICAST)
        arrive_remote_relaxed(map_to_rank(smem_u32(&ss.empty[s]), 0));
      else
        mbarrier_arrive(&ss.empty[s]);
    }
  }
  sink[blockIdx.x] = acc;
}

using microbench::check;

template <int MODE>
void launch_handoff(int vecs, int pairs, long long* d_out, uint32_t* d_sm) {
  check(cudaFuncSetAttribute(handoff_kernel<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, HANDOFF_PAD_BYTES),
        "handoff attr");
  handoff_kernel<MODE><<<2 * pairs, HANDOFF_THREADS, HANDOFF_PAD_BYTES>>>(vecs, d_out, d_sm);
}

void run_handoff(int mode, int vecs, int pairs, long long* d_out, uint32_t* d_sm) {
  if (mode == 0) launch_handoff<0>(vecs, pairs, d_out, d_sm);
  if (mode == 1) launch_handoff<1>(vecs, pairs, d_out, d_sm);
  if (mode == 2) launch_handoff<2>(vecs, pairs, d_out, d_sm);
  check(cudaGetLastError(), "handoff launch");
  check(cudaDeviceSynchronize(), "handoff run");
  std::vector<long long> h(pairs);
  std::vector<uint32_t> sm(2 * pairs);
  check(cudaMemcpy(h.data(), d_out, pairs * sizeof(long long), cudaMemcpyDeviceToHost), "copy");
  check(cudaMemcpy(sm.data(), d_sm, 2 * pairs * sizeof(uint32_t), cudaMemcpyDeviceToHost), "copy");
  int same_sm = 0;
  for (int p = 0; p < pairs; ++p) same_sm += sm[2 * p] == sm[2 * p + 1];
  std::vector<uint32_t> distinct(sm);
  std::sort(distinct.begin(), distinct.end());
  const int n_sms = static_cast<int>(std::unique(distinct.begin(), distinct.end()) - distinct.begin());
  std::sort(h.begin(), h.end());
  const int bytes = vecs == 0 ? 16 : 16 * vecs * HANDOFF_THREADS;
  const char* names[3] = {"st.async", "st+arrive", "st+warp"};
  std::printf("hand-off %-9s %5d B: cycles per one-way hop min / median / max %lld / %lld / %lld "
              "(%d SMs, %d same-SM pairs)\n",
              names[mode], bytes, h.front(), h[h.size() / 2], h.back(), n_sms, same_sm);
}

float run_stream(bool multicast, int streams, const uint8_t* d_pages, unsigned long long* d_sink) {
  const int smem = static_cast<int>(sizeof(StreamSmem));
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 2;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3(2 * streams);
  cfg.blockDim = dim3(32);
  cfg.dynamicSmemBytes = smem;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (multicast) {
    int clusters = 0;
    check(cudaOccupancyMaxActiveClusters(&clusters, stream_kernel<true>, &cfg), "occupancy");
    std::printf("multicast: %d of %d clusters can be resident at once\n", clusters, streams);
  }
  return microbench::fastest_ms([&] {
    if (multicast)
      check(cudaLaunchKernelEx(&cfg, stream_kernel<true>, d_pages, streams, d_sink), "multicast launch");
    else
      stream_kernel<false><<<streams, 32, smem>>>(d_pages, streams, d_sink);
  }, 5);
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "device");
  const int sms = prop.multiProcessorCount;
  std::printf("%s, %d SMs\n", prop.name, sms);

  const int pairs = sms / 2;
  long long* d_out = nullptr;
  uint32_t* d_sm = nullptr;
  check(cudaMalloc(&d_out, pairs * sizeof(long long)), "malloc");
  check(cudaMalloc(&d_sm, 2 * pairs * sizeof(uint32_t)), "malloc");
  for (int mode = 0; mode < 3; ++mode)
    for (int vecs : {0, 1, 3}) run_handoff(mode, vecs, pairs, d_out, d_sm);

  const int smem = static_cast<int>(sizeof(StreamSmem));
  check(cudaFuncSetAttribute(stream_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "attr");
  check(cudaFuncSetAttribute(stream_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "attr");
  const size_t page_total = static_cast<size_t>(sms) * PAGES_PER_STREAM * PAGE_BYTES;
  uint8_t* d_pages = nullptr;
  unsigned long long* d_sink = nullptr;
  check(cudaMalloc(&d_pages, page_total), "malloc pages");
  check(cudaMemset(d_pages, 1, page_total), "memset");
  check(cudaMalloc(&d_sink, 2 * sms * sizeof(unsigned long long)), "malloc sink");
  // Unicast: one stream of 96 pages per SM. Multicast: one stream per pair (the first half of the pages), each
  // page delivered into both CTAs' shared memory.
  const float uni_ms = run_stream(false, sms, d_pages, d_sink);
  const double uni_bytes = static_cast<double>(sms) * PAGES_PER_STREAM * PAGE_BYTES;
  std::printf("stream unicast:   %3d CTAs x %d pages: %.3f ms, %.2f TB/s read = delivered\n", sms, PAGES_PER_STREAM,
              uni_ms, uni_bytes / uni_ms * 1e-9);
  const float mc_ms = run_stream(true, pairs, d_pages, d_sink);
  const double mc_bytes = static_cast<double>(pairs) * PAGES_PER_STREAM * PAGE_BYTES;
  std::printf("stream multicast: %3d pairs x %d pages: %.3f ms, %.2f TB/s read, %.2f TB/s delivered\n", pairs,
              PAGES_PER_STREAM, mc_ms, mc_bytes / mc_ms * 1e-9, 2.0 * mc_bytes / mc_ms * 1e-9);
  check(cudaFree(d_pages), "free");
  check(cudaFree(d_sink), "free");
  check(cudaFree(d_out), "free");
  check(cudaFree(d_sm), "free");
  return 0;
}

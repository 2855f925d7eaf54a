// Explicit instantiation of the 2-CTA cluster decode kernel (cluster/kernel.cuh) for the FP8 (e4m3) SnapMLA
// cache, and its launcher (called by launch_decode_fp8 when SNAPMLA_DECODE_KERNEL=cluster and q_rows > 16).
#include <cuda_fp8.h>

#include "common/cuda_check.h"
#include "common/pdl.h"
#include "kernels/sm90/decode_fp8/cluster/kernel.cuh"
#include "kernels/sm90/decode_fp8/kernel_params.h"
#include "kernels/sm90/decode_fp8/launch.h"

namespace snapmla::sm90::decode_fp8 {

template __global__ void cluster::snapmla_decode_fp8_cluster_kernel<__nv_fp8_e4m3>(
    const __grid_constant__ KernelParams kp);

namespace {

// Once per device: can a pair of 384-thread CTAs with 227 KB of shared memory each be co-scheduled at all (not
// under MIG slices or MPS limits that leave no GPC with two free SMs)? Else the launch would fail with a generic
// CUDA error; this names the setting instead.
template <typename Kernel>
void check_clusters_fit(Kernel kernel, const cudaLaunchConfig_t& cfg) {
  int device = 0;
  SNAPMLA_CUDA_CHECK(cudaGetDevice(&device));
  TORCH_CHECK(device >= 0 && device < MAX_DEVICES, "decode_fp8: device index ", device, " >= ", MAX_DEVICES);
  static std::once_flag checked[MAX_DEVICES];
  static int clusters[MAX_DEVICES];
  std::call_once(checked[device], [&] {
    // The query sees the cluster attribute only (as scripts/microbench/cluster_handoff.cu asks it), not PDL's.
    cudaLaunchConfig_t query = cfg;
    query.numAttrs = 1;
    query.stream = nullptr;
    SNAPMLA_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters[device], kernel, &query));
  });
  TORCH_CHECK(clusters[device] > 0, "SNAPMLA_DECODE_KERNEL=cluster: no 2-CTA cluster of the cluster decode kernel ",
              "fits on device ", device, " (cudaOccupancyMaxActiveClusters = ", clusters[device],
              "); unset SNAPMLA_DECODE_KERNEL to run the wide kernel");
}

}  // namespace

void launch_decode_fp8_cluster(const DecodeParams& params, cudaStream_t stream, const LaunchFirst& launch_first) {
  const KernelParams kp = make_kernel_params(params, rows_per_warp(params.q_rows));
  auto kernel = cluster::snapmla_decode_fp8_cluster_kernel<__nv_fp8_e4m3>;
  static std::once_flag smem_configured[MAX_DEVICES];
  opt_in_smem(kernel, cluster::SMEM_BYTES_C, smem_configured);
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster::CLUSTER_CTAS;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(cluster::CLUSTER_CTAS * num_m_tiles(params.q_rows), params.num_sm_parts);
  cfg.blockDim = dim3(NUM_THREADS);
  cfg.dynamicSmemBytes = cluster::SMEM_BYTES_C;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 2 : 1;
  check_clusters_fit(kernel, cfg);
  if (launch_first) launch_first();
  SNAPMLA_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, kp));
#ifdef SNAPMLA_TRACE_SINK
  launch_trace_print(stream);  // trace builds: the tracers' lines (trace_sink.cuh)
#endif
}

}  // namespace snapmla::sm90::decode_fp8

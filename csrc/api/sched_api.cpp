// Entry point of the split-KV scheduler: snapmla::get_mla_metadata (FlashMLA's old-style metadata call).
//
// One C++ function serves the CPU and the CUDA keys: on CUDA one small kernel plans on the device (no host
// sync, CUDA-graph capturable); on the CPU the same plan.h arithmetic runs on the host, which is what the CPU
// tests and the C++ unit test check. Both return identical tensors for identical seqlens.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/all.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "api/checks.h"
#include "kernels/sched/launch.h"
#include "kernels/sched/plan.h"
#include "kernels/sched/sched_meta.h"

namespace snapmla {

namespace {

void plan_on_host(const int* seqlens, int b, int num_sm_parts, int* metadata, int* num_splits) {
  std::vector<int64_t> cost_prefix(b + 1, 0);
  for (int r = 0; r < b; ++r) cost_prefix[r + 1] = cost_prefix[r] + sched::request_cost(seqlens[r]);
  for (int p = 0; p < num_sm_parts; ++p) {
    const sched::PartPlan plan = sched::plan_part(p, cost_prefix, seqlens, b, num_sm_parts);
    int* row = metadata + static_cast<int64_t>(p) * sched::SCHED_META_INTS;
    std::fill(row, row + sched::SCHED_META_INTS, 0);
    row[sched::BEGIN_REQ] = plan.begin_req;
    row[sched::BEGIN_BLOCK] = plan.begin_block;
    row[sched::END_REQ] = plan.end_req;
    row[sched::END_BLOCK] = plan.end_block;
    row[sched::BEGIN_SPLIT] = plan.begin_split;
  }
  num_splits[0] = 0;
  for (int r = 0; r < b; ++r)
    num_splits[r + 1] = num_splits[r] + sched::request_pieces(cost_prefix[r], seqlens[r], cost_prefix[b], num_sm_parts);
}

}  // namespace

// cache_seqlens (b,) int32 -> tile_scheduler_metadata (num_sm_parts, SCHED_META_INTS) int32, num_splits (b + 1,)
// int32, on cache_seqlens' device. num_q_tokens_per_head_k (= s_q * h_q) and num_heads_k (= 1) are FlashMLA's
// arguments: Python derives the default num_sm_parts from them; here they are validated only.
std::tuple<at::Tensor, at::Tensor> get_mla_metadata(const at::Tensor& cache_seqlens, int64_t num_q_tokens_per_head_k,
                                                    int64_t num_heads_k, int64_t num_sm_parts) {
  // dtype
  checks::check_dtype(cache_seqlens, at::kInt, "cache_seqlens");
  // shape
  checks::check_dim(cache_seqlens, 1, "cache_seqlens");
  const int64_t b = cache_seqlens.size(0);
  TORCH_CHECK(b >= 1, "cache_seqlens.shape[0] (b) must be >= 1, got ", b);
  checks::check_fits_int32(b + 1, "cache_seqlens.shape[0] + 1 (b + 1)");
  TORCH_CHECK(num_heads_k == 1, "num_heads_k must be 1 (MLA shares one latent KV head), got ", num_heads_k);
  TORCH_CHECK(num_q_tokens_per_head_k >= 1, "num_q_tokens_per_head_k (s_q * h_q) must be >= 1, got ",
              num_q_tokens_per_head_k);
  TORCH_CHECK(num_sm_parts >= 1 && num_sm_parts <= checks::MAX_GRID_Y, "num_sm_parts must be in [1, ",
              checks::MAX_GRID_Y, "] (grid.y), got ", num_sm_parts);
  // layout
  checks::check_contiguous(cache_seqlens, "cache_seqlens");

  auto int_opts = cache_seqlens.options().dtype(at::kInt);
  at::Tensor metadata = at::empty({num_sm_parts, sched::SCHED_META_INTS}, int_opts);
  at::Tensor num_splits = at::empty({b + 1}, int_opts);
  // device: CPU plans on the host, CUDA on the device.
  if (cache_seqlens.is_cpu()) {
    plan_on_host(cache_seqlens.data_ptr<int>(), static_cast<int>(b), static_cast<int>(num_sm_parts),
                 metadata.data_ptr<int>(), num_splits.data_ptr<int>());
    return {metadata, num_splits};
  }
  checks::check_cuda(cache_seqlens, "cache_seqlens");
  const c10::cuda::CUDAGuard guard(cache_seqlens.device());
  at::Tensor cost_prefix = at::empty({b + 1}, cache_seqlens.options().dtype(at::kLong));
  sched::launch_get_mla_metadata(cache_seqlens.data_ptr<int>(), static_cast<int>(b), static_cast<int>(num_sm_parts),
                                 cost_prefix.data_ptr<int64_t>(), metadata.data_ptr<int>(), num_splits.data_ptr<int>(),
                                 at::cuda::getCurrentCUDAStream());
  return {metadata, num_splits};
}

}  // namespace snapmla

TORCH_LIBRARY_FRAGMENT(snapmla, m) {
  m.def(
      "get_mla_metadata(Tensor cache_seqlens, int num_q_tokens_per_head_k, int num_heads_k, int num_sm_parts) "
      "-> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(snapmla, CPU, m) { m.impl("get_mla_metadata", &snapmla::get_mla_metadata); }
TORCH_LIBRARY_IMPL(snapmla, CUDA, m) { m.impl("get_mla_metadata", &snapmla::get_mla_metadata); }

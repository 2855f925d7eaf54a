// Which decode kernel runs a call: the one place that decides it (launch.cu dispatches on it, the Python
// wrapper asks torch.ops.snapmla.decode_kernel instead of mirroring it). Pure host code, no CUDA or torch, so
// tests/cpp/test_kernel_choice.cpp checks it exhaustively on the CPU.
#pragma once

#include <optional>
#include <string_view>

namespace snapmla::sm90::decode_fp8 {

enum class DecodeKernel : int {
  kAuto = 0,  // as an override: no override
  kNarrow,    // narrow/kernel.cuh: query rows as the WGMMA N (<= 16 rows, one CTA row)
  kWide,      // wide/kernel.cuh: 64-row tiles, two math warpgroups that each own every other block
  kWs,        // ws/kernel.cuh: 64-row tiles, one softmax warpgroup and two PV warpgroups
};

// Query rows (s_q * h_q) up to which the narrow kernel runs. Side by side on the H200 (forced, same process,
// bench_decode, 2026-12-01) the narrow kernel was the faster one at every measured size with <= 16 rows: b = 1 /
// 4 / 16 at 8k 1.08 / 1.10 / 1.04x the wide one, b = 128 at 4k 1.17x, b = 64 at 16k-128k 1.14-1.18x.
inline constexpr int NARROW_MAX_Q_ROWS = 16;

// Query rows from which the warp-specialised kernel runs instead of the wide one. The two give the same bits;
// side by side on the H200 (2026-12-03, bench_variants, rounds) ws was 1.02-1.03x at b = 64 with 64 and 128
// rows, 1.00x at b = 1 / 16, but 0.91x at 32 rows (b = 64, s_q 2, h_q 16: memory-bound, its softmax warpgroup
// waits for the next page before it starts a block's softmax).
inline constexpr int WS_MIN_Q_ROWS = 64;

// The kernel for `q_rows` query rows under `forced` (kAuto: none). A forced kernel that cannot run the rows falls
// back to the nearest one that can: narrow above 16 rows runs the wide kernel, ws at 16 rows or fewer the narrow
// one. wide runs any row count.
constexpr DecodeKernel choose_decode_kernel(int q_rows, DecodeKernel forced) {
  if (q_rows <= NARROW_MAX_Q_ROWS) return forced == DecodeKernel::kWide ? DecodeKernel::kWide : DecodeKernel::kNarrow;
  if (forced == DecodeKernel::kWs) return DecodeKernel::kWs;
  if (forced == DecodeKernel::kAuto) return q_rows >= WS_MIN_Q_ROWS ? DecodeKernel::kWs : DecodeKernel::kWide;
  return DecodeKernel::kWide;  // kWide, or kNarrow above its rows
}

// "auto", "narrow", "wide", "ws" (the values of SNAPMLA_DECODE_KERNEL and of set_decode_kernel).
constexpr const char* decode_kernel_name(DecodeKernel k) {
  switch (k) {
    case DecodeKernel::kNarrow: return "narrow";
    case DecodeKernel::kWide: return "wide";
    case DecodeKernel::kWs: return "ws";
    default: return "auto";
  }
}

// The inverse of decode_kernel_name; nullopt for any other string.
constexpr std::optional<DecodeKernel> parse_decode_kernel(std::string_view s) {
  for (DecodeKernel k : {DecodeKernel::kAuto, DecodeKernel::kNarrow, DecodeKernel::kWide, DecodeKernel::kWs}) {
    if (s == decode_kernel_name(k)) return k;
  }
  return std::nullopt;
}

}  // namespace snapmla::sm90::decode_fp8

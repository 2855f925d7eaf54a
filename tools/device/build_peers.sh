#!/usr/bin/env bash
# Builds the same-process peers of bench/bench_decode.py on the GPU machine, from public sources the user placed in
# the git-ignored .peers/ (docs/development.md lists the commits): .peers/FlashMLA (deepseek-ai/FlashMLA),
# .peers/vllm_flashmla (vllm-project/FlashMLA) and .peers/flash-attention (Dao-AILab/flash-attention: hopper/ and
# README.md are enough). Each builds in place, in parallel, those that are present; logs in /tmp/peer_<name>.log,
# one line per peer in /tmp/peers_status. Then run the benchmark with
#   PYTHONPATH=.peers/FlashMLA:.peers/flash-attention/hopper:.peers/vllm_flashmla python3 bench/bench_decode.py
# ~4-5 min on 16 cores (FA3's head-dim 64 instantiations set it). Needs the nvidia-cutlass wheel in .whl/ (the peers
# expect CUTLASS at csrc/cutlass: a link to the wheel's headers does).
set -u
cd "$(dirname "$0")/../.."
source tools/device/device_env.sh
CUT=$(python3 -c "import cutlass_library as c, os; print(os.path.join(os.path.dirname(c.__file__), 'source'))") \
  || { echo "no nvidia-cutlass (carry .whl/)"; exit 1; }
export CUTLASS_SRC=$CUT CPLUS_INCLUDE_PATH=$CUDA_HOME/include/cccl  # CUDA 13: cuda/std/* under include/cccl
P=$PWD/.peers
rm -f /tmp/peers_status
if [ -d "$P/FlashMLA" ]; then
  rm -rf "$P/FlashMLA/csrc/cutlass"; ln -s "$CUT" "$P/FlashMLA/csrc/cutlass"
  ( cd "$P/FlashMLA" && FLASH_MLA_DISABLE_SM100=1 MAX_JOBS=5 python3 setup.py build_ext --inplace \
      > /tmp/peer_flashmla.log 2>&1; echo "flashmla rc=$?" >> /tmp/peers_status ) &
fi
if [ -d "$P/vllm_flashmla" ]; then
  ( MAX_JOBS=3 python3 tools/device/build_vllm_fp8_peer.py "$P/vllm_flashmla" > /tmp/peer_vllm.log 2>&1
    echo "vllm_fp8 rc=$?" >> /tmp/peers_status ) &
fi
if [ -d "$P/flash-attention/hopper" ]; then
  mkdir -p "$P/flash-attention/csrc"; rm -rf "$P/flash-attention/csrc/cutlass"
  ln -s "$CUT" "$P/flash-attention/csrc/cutlass"
  # Only the forward head-dim 64 instantiations (64 x 512 is the MLA path vLLM calls).
  ( cd "$P/flash-attention/hopper" && export FLASH_ATTENTION_OFFLINE_BUILD=TRUE MAX_JOBS=8 NVCC_THREADS=2 \
      && for f in BACKWARD FP16 FP8 SM80 SOFTCAP LOCAL APPENDKV HDIM96 HDIM128 HDIM192 HDIM256 HDIMDIFF192; do
           export FLASH_ATTENTION_DISABLE_$f=TRUE; done \
      && python3 setup.py build_ext --inplace > /tmp/peer_fa3.log 2>&1; echo "fa3 rc=$?" >> /tmp/peers_status ) &
fi
wait
cat /tmp/peers_status 2>/dev/null || echo "no peer sources under .peers/"
echo "PYTHONPATH=$P/FlashMLA:$P/flash-attention/hopper:$P/vllm_flashmla"

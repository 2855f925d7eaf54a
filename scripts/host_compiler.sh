# Sourced by scripts/setup_env.sh and tools/device/gpu_check.sh: pick the host C++ compiler for the extension.
# The H200 image's default compiler (/opt/gcc/bin/g++, a wrapper around g++ 13.3) builds extensions whose C++
# exceptions crash the process: every failed TORCH_CHECK segfaulted instead of raising (2026-11-29, probed
# on the H200 image). /usr/bin/g++ (the same g++ 13.3) works; prefer it there. That image also
# exports CXX=/opt/gcc/bin/g++, so that value is replaced too; any other CXX set by the caller wins.
if { [ -z "${CXX:-}" ] || [ "${CXX}" = /opt/gcc/bin/g++ ]; } && [ -x /opt/gcc/bin/g++ ] && [ -x /usr/bin/g++ ]; then
  export CXX=/usr/bin/g++
fi

"""The GPU's SM clock, power, temperature and clock-event ("throttle") reasons, sampled from NVML in a side thread
while a benchmark round runs.

Why: rounds of a long compute-bound case differ by up to 14 % when a peer's rounds run between them, and the
clock that harness.sm_clock_mhz measures *after* a round (a sleep kernel on an idle GPU) does not track it. A
kernel bound by its instruction chains follows an SM clock lowered by power or heat; telling that apart needs the
clock *during* the round, and NVML's reasons. bench_decode.py records this summary per round and side.

NVML is reached through ctypes on libnvidia-ml.so.1, which ships with the driver (the H200 machine has no pynvml).
Without it, or without a GPU, or with SNAPMLA_NVML=0, `RoundSampler` records nothing and `summary()` is None:
benchmarks run unchanged. The side thread polls the driver while the GPU works: to rule out its cost on a case,
time it with SNAPMLA_NVML=0 and =1 side by side.

    with RoundSampler() as s:
        run_round()
    s.summary()  # {'sm_mhz_median': ..., 'sm_mhz_min': ..., 'power_w_median': ..., 'temp_c_max': ...,
                 #  'reasons': ['sw_power_cap'], 'samples': 57}
"""

from __future__ import annotations

import ctypes
import math
import os
import statistics
import threading
from typing import Optional

# nvmlClocksEventReason* (formerly nvmlClocksThrottleReason*) bits, nvml.h.
REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clock",
}
NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0


def reason_names(mask: int) -> list[str]:
    """The names of the bits set in an NVML clock-event reason mask; unknown bits as hex."""
    names = [name for bit, name in REASONS.items() if mask & bit]
    rest = mask & ~sum(REASONS)
    if rest:
        names.append(hex(rest))
    return names


class Nvml:
    """The few NVML calls the sampler needs, on the GPU with `uuid` ("GPU-..."; NVML ignores
    CUDA_VISIBLE_DEVICES and numbers the GPUs in PCI order, so an index can name another GPU than CUDA's) or,
    without one, NVML's device `index`. `lib` may be given (tests pass a fake)."""

    def __init__(self, index: int = 0, uuid: Optional[str] = None, lib=None):
        self.lib = lib if lib is not None else ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise RuntimeError("nvmlInit_v2 failed")
        self.handle = ctypes.c_void_p()
        if uuid is not None:
            if self.lib.nvmlDeviceGetHandleByUUID(ctypes.c_char_p(uuid.encode()), ctypes.byref(self.handle)) != 0:
                raise RuntimeError(f"nvmlDeviceGetHandleByUUID({uuid}) failed")
        elif self.lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(self.handle)) != 0:
            raise RuntimeError(f"nvmlDeviceGetHandleByIndex_v2({index}) failed")
        # The clock-event call was renamed in CUDA 12 drivers; older ones export only the throttle name.
        self._reasons_fn = getattr(self.lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            self.lib, "nvmlDeviceGetCurrentClocksThrottleReasons")

    def sample(self) -> tuple[float, float, float, int]:
        """(SM MHz, power W, temperature C, reason mask) now; a failed call gives NaN / 0 for its field. The power
        is NVML's average over the last ~1 s on Ampere and later GPUs: over a round of ~50 ms it is mostly the
        second before it (the previous round included); the clock and the reasons are current."""
        clk, mw, temp, reasons = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
        ok_clk = self.lib.nvmlDeviceGetClockInfo(self.handle, ctypes.c_int(NVML_CLOCK_SM), ctypes.byref(clk)) == 0
        ok_pw = self.lib.nvmlDeviceGetPowerUsage(self.handle, ctypes.byref(mw)) == 0
        ok_t = self.lib.nvmlDeviceGetTemperature(self.handle, ctypes.c_int(NVML_TEMPERATURE_GPU),
                                                 ctypes.byref(temp)) == 0
        ok_r = self._reasons_fn(self.handle, ctypes.byref(reasons)) == 0
        nan = float("nan")
        return (float(clk.value) if ok_clk else nan, mw.value / 1000.0 if ok_pw else nan,
                float(temp.value) if ok_t else nan, int(reasons.value) if ok_r else 0)


_shared: Optional[Nvml] = None
_unavailable = False


def cuda_uuid() -> Optional[str]:
    """NVML's name ("GPU-<uuid>") of the GPU that torch uses, or None (no torch, no GPU, an older torch)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return f"GPU-{torch.cuda.get_device_properties(torch.cuda.current_device()).uuid}"
    except (ImportError, AttributeError, RuntimeError):
        return None


def shared_nvml() -> Optional[Nvml]:
    """One Nvml per process for torch's current GPU (by UUID, else NVML's device 0), or None (once, quietly)
    where NVML cannot be loaded or has no device."""
    global _shared, _unavailable
    if os.environ.get("SNAPMLA_NVML", "1") == "0":  # off, e.g. to time the benchmark with and without it
        return None
    if _shared is None and not _unavailable:
        uuid = cuda_uuid()
        for kw in ([dict(uuid=uuid)] if uuid else []) + [dict(index=0)]:
            try:
                _shared = Nvml(**kw)
                break
            except (OSError, RuntimeError, AttributeError):
                continue
        _unavailable = _shared is None
    return _shared


class RoundSampler:
    """Samples NVML every `period_s` from a daemon thread between __enter__ and __exit__. ctypes releases the GIL
    during each NVML call; the thread holds it only for its loop (~microseconds every 2 ms), while the timed
    calls' launches run ahead of the GPU behind each call's L2 flush (bench/harness.py time_cold)."""

    def __init__(self, nvml: Optional[Nvml] = None, period_s: float = 0.002):
        self.nvml = nvml if nvml is not None else shared_nvml()
        self.period_s = period_s
        self.samples: list[tuple[float, float, float, int]] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(self.nvml.sample())
            self._stop.wait(self.period_s)

    def __enter__(self) -> "RoundSampler":
        if self.nvml is not None:
            self.samples.append(self.nvml.sample())  # at least one sample, however short the round
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.samples.append(self.nvml.sample())

    def summary(self) -> Optional[dict]:
        """Median and minimum SM clock, median power, maximum temperature, the union of the reasons (the idle
        bit left out: the sampler also sees the host's gaps between launches) and the sample count."""
        if not self.samples:
            return None
        clk, pw, tmp = ([s[i] for s in self.samples if not math.isnan(s[i])] for i in range(3))
        mask = 0
        for s in self.samples:
            mask |= s[3]
        return dict(
            sm_mhz_median=statistics.median(clk) if clk else None, sm_mhz_min=min(clk) if clk else None,
            power_w_median=statistics.median(pw) if pw else None, temp_c_max=max(tmp) if tmp else None,
            reasons=reason_names(mask & ~0x1), samples=len(self.samples))


def timed_round(fn) -> tuple[object, Optional[dict]]:
    """fn() with NVML sampled while it runs: (its result, the summary or None)."""
    with RoundSampler() as s:
        out = fn()
    return out, s.summary()

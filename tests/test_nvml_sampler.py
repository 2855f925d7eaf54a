"""bench/nvml_sampler.py on a fake NVML library (CPU): the summary of a round's samples, the clock-event reason
names, a failed call's field left out, and no NVML at all giving None rather than an exception."""

import ctypes
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import nvml_sampler as NV  # noqa: E402


class FakeNvml:
    """The NVML entry points the sampler calls, returning scripted values (0 = NVML_SUCCESS)."""

    def __init__(self, clocks, power_mw=600_000, temp=65, reasons=0x0, fail_power=False):
        self.clocks, self.power_mw, self.temp = list(clocks), power_mw, temp
        self.reasons, self.fail_power = reasons, fail_power
        self.i = 0

    def nvmlInit_v2(self):
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index, handle_ref):
        return 0

    def nvmlDeviceGetClockInfo(self, handle, kind, out_ref):
        assert kind.value == NV.NVML_CLOCK_SM
        ctypes.cast(out_ref, ctypes.POINTER(ctypes.c_uint))[0] = self.clocks[min(self.i, len(self.clocks) - 1)]
        self.i += 1
        return 0

    def nvmlDeviceGetPowerUsage(self, handle, out_ref):
        if self.fail_power:
            return 3  # NVML_ERROR_NOT_SUPPORTED
        ctypes.cast(out_ref, ctypes.POINTER(ctypes.c_uint))[0] = self.power_mw
        return 0

    def nvmlDeviceGetTemperature(self, handle, kind, out_ref):
        ctypes.cast(out_ref, ctypes.POINTER(ctypes.c_uint))[0] = self.temp
        return 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle, out_ref):
        ctypes.cast(out_ref, ctypes.POINTER(ctypes.c_ulonglong))[0] = self.reasons
        return 0


def test_summary_of_scripted_samples():
    nv = NV.Nvml(lib=FakeNvml(clocks=[1980, 1700, 1650], reasons=0x1 | 0x4))
    s = NV.RoundSampler(nvml=nv)
    s.samples = [nv.sample() for _ in range(3)]
    out = s.summary()
    assert out["sm_mhz_median"] == 1700.0 and out["sm_mhz_min"] == 1650.0, out
    assert out["power_w_median"] == 600.0 and out["temp_c_max"] == 65.0 and out["samples"] == 3, out
    assert out["reasons"] == ["sw_power_cap"], out  # the idle bit is left out


def test_a_failed_call_leaves_its_field_out():
    nv = NV.Nvml(lib=FakeNvml(clocks=[1800], fail_power=True))
    s = NV.RoundSampler(nvml=nv)
    s.samples = [nv.sample()]
    out = s.summary()
    assert out["power_w_median"] is None and out["sm_mhz_median"] == 1800.0, out


def test_the_thread_samples_while_the_round_runs():
    nv = NV.Nvml(lib=FakeNvml(clocks=[1900]))
    with NV.RoundSampler(nvml=nv, period_s=0.0005) as s:
        import time

        time.sleep(0.02)
    assert s.summary()["samples"] >= 3, s.summary()


def test_reason_names_cover_every_bit():
    assert NV.reason_names(0x4 | 0x40 | 0x80) == ["sw_power_cap", "hw_thermal", "hw_power_brake"]
    assert NV.reason_names(0x1000) == ["0x1000"]
    assert NV.reason_names(0) == []


def test_without_nvml_a_round_runs_and_records_nothing(monkeypatch):
    monkeypatch.setattr(NV, "_shared", None)
    monkeypatch.setattr(NV, "_unavailable", False)

    def no_library(*args, **kwargs):
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    monkeypatch.setattr(NV.ctypes, "CDLL", no_library)
    out, summary = NV.timed_round(lambda: 42)
    assert out == 42 and summary is None

"""bench/nvml_sampler.py on a fake NVML library (CPU): the summary of a round's samples, the clock-event reason
names, a failed call's field left out, the device by UUID, the older reasons entry point, and no NVML at all
giving None rather than an exception. The fake checks the ctypes types of every argument, as the C API has them
(a c_uint where NVML writes an unsigned long long would corrupt memory rather than fail)."""

import ctypes
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import nvml_sampler as NV  # noqa: E402


def _out(ref, ctype):
    """The object behind a ctypes.byref argument, checked to be of the C type NVML writes."""
    assert isinstance(ref._obj, ctype), (type(ref._obj), ctype)
    return ref._obj


class FakeNvml:
    """The NVML entry points the sampler calls, returning scripted values (0 = NVML_SUCCESS)."""

    def __init__(self, clocks, power_mw=600_000, temp=65, reasons=0x0, fail_power=False, old_reasons_name=False,
                 init_rc=0):
        self.clocks, self.power_mw, self.temp = list(clocks), power_mw, temp
        self.reasons, self.fail_power, self.init_rc = reasons, fail_power, init_rc
        self.i, self.opened = 0, None
        if old_reasons_name:  # a driver from before the rename exports only the throttle name
            self.nvmlDeviceGetCurrentClocksThrottleReasons = self._reasons
        else:
            self.nvmlDeviceGetCurrentClocksEventReasons = self._reasons

    def nvmlInit_v2(self):
        return self.init_rc

    def nvmlDeviceGetHandleByIndex_v2(self, index, handle_ref):
        assert isinstance(index, ctypes.c_uint)
        _out(handle_ref, ctypes.c_void_p).value = 0x1000 + index.value
        self.opened = ("index", index.value)
        return 0

    def nvmlDeviceGetHandleByUUID(self, uuid, handle_ref):
        assert isinstance(uuid, ctypes.c_char_p)
        _out(handle_ref, ctypes.c_void_p).value = 0x2000
        self.opened = ("uuid", uuid.value.decode())
        return 0

    def _handle(self, handle):
        assert isinstance(handle, ctypes.c_void_p) and handle.value in (0x1000, 0x2000), handle

    def nvmlDeviceGetClockInfo(self, handle, kind, out_ref):
        self._handle(handle)
        assert isinstance(kind, ctypes.c_int) and kind.value == NV.NVML_CLOCK_SM
        _out(out_ref, ctypes.c_uint).value = self.clocks[min(self.i, len(self.clocks) - 1)]
        self.i += 1
        return 0

    def nvmlDeviceGetPowerUsage(self, handle, out_ref):
        self._handle(handle)
        if self.fail_power:
            return 3  # NVML_ERROR_NOT_SUPPORTED
        _out(out_ref, ctypes.c_uint).value = self.power_mw
        return 0

    def nvmlDeviceGetTemperature(self, handle, kind, out_ref):
        self._handle(handle)
        assert isinstance(kind, ctypes.c_int) and kind.value == NV.NVML_TEMPERATURE_GPU
        _out(out_ref, ctypes.c_uint).value = self.temp
        return 0

    def _reasons(self, handle, out_ref):
        self._handle(handle)
        _out(out_ref, ctypes.c_ulonglong).value = self.reasons
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


def test_the_device_by_uuid_and_the_older_reasons_name():
    fake = FakeNvml(clocks=[1500], reasons=0x40, old_reasons_name=True)
    nv = NV.Nvml(uuid="GPU-1234", lib=fake)
    assert fake.opened == ("uuid", "GPU-1234")
    assert nv.sample()[3] == 0x40


def test_a_failed_init_is_an_error_that_shared_nvml_turns_into_none(monkeypatch):
    with pytest.raises(RuntimeError, match="nvmlInit_v2"):
        NV.Nvml(lib=FakeNvml(clocks=[1500], init_rc=1))
    monkeypatch.setattr(NV, "_shared", None)
    monkeypatch.setattr(NV, "_unavailable", False)
    monkeypatch.setattr(NV, "cuda_uuid", lambda: "GPU-1234")
    monkeypatch.setattr(NV, "Nvml", lambda **kw: (_ for _ in ()).throw(RuntimeError("nvmlInit_v2 failed")))
    assert NV.shared_nvml() is None and NV._unavailable


def test_snapmla_nvml_0_turns_it_off(monkeypatch):
    monkeypatch.setenv("SNAPMLA_NVML", "0")
    monkeypatch.setattr(NV, "_shared", NV.Nvml(lib=FakeNvml(clocks=[1500])))
    out, summary = NV.timed_round(lambda: 7)
    assert out == 7 and summary is None
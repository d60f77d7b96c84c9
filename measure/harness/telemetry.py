"""NVML telemetry in a sampling thread: power, clocks, memory, utilisation and the board's energy
counter, tagged with the harness phase (unit and warm-up/timed) running at that moment.

`energy_j` is the energy counter's delta since telemetry started (NVML's total-energy counter, mJ,
on Volta and later); `phase_energy_j` is the delta since the current phase began, so a phase's
energy is its last sample's `phase_energy_j`. Where NVML or the counter is missing, the columns are
NaN and the manifest says so.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass


@dataclass
class GpuInfo:
    name: str | None
    driver: str | None
    memory_total_gb: float | None
    power_limit_w: float | None
    sm_clock_max_mhz: float | None
    mem_clock_max_mhz: float | None
    error: str | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _nvml():
    try:
        import pynvml  # optional heavy dependency (the measure extra)

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def gpu_info(index: int = 0) -> GpuInfo:
    nv = _nvml()
    if nv is None:
        return GpuInfo(None, None, None, None, None, None, error="NVML unavailable (no NVIDIA driver or pynvml)")
    h = nv.nvmlDeviceGetHandleByIndex(index)

    def get(fn, *a, scale=1.0):
        try:
            v = fn(*a)
            v = v.decode() if isinstance(v, bytes) else v
            return v / scale if isinstance(v, (int, float)) and scale != 1.0 else v
        except Exception:
            return None

    mem = get(nv.nvmlDeviceGetMemoryInfo, h)
    return GpuInfo(
        name=get(nv.nvmlDeviceGetName, h), driver=get(nv.nvmlSystemGetDriverVersion),
        memory_total_gb=mem.total / 1e9 if mem is not None else None,
        power_limit_w=get(nv.nvmlDeviceGetEnforcedPowerLimit, h, scale=1000.0),
        sm_clock_max_mhz=get(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
        mem_clock_max_mhz=get(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM),
    )


class Telemetry:
    """Samples every `interval_ms` until stopped; `take()` hands over the rows gathered so far."""

    def __init__(self, interval_ms: int, index: int = 0):
        self.interval_s = interval_ms / 1000.0
        self.nv = _nvml() if interval_ms > 0 else None
        self.handle = self.nv.nvmlDeviceGetHandleByIndex(index) if self.nv else None
        self.enabled = self.handle is not None
        self.phase = "setup"
        self._rows: list[dict] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.perf_counter()
        self._e0 = self._energy_mj()
        self._phase_e0 = self._e0
        self.energy_counter = self._e0 is not None

    def _energy_mj(self) -> float | None:
        if not self.enabled:
            return None
        try:
            return float(self.nv.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        except Exception:
            return None

    def set_phase(self, phase: str) -> None:
        with self._lock:
            self.phase = phase
            self._phase_e0 = self._energy_mj()
        self.sample()

    def sample(self) -> None:
        if not self.enabled:
            return
        nv, h = self.nv, self.handle

        def get(fn, *a):
            try:
                return fn(*a)
            except Exception:
                return None

        power = get(nv.nvmlDeviceGetPowerUsage, h)
        sm = get(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
        memclk = get(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)
        mem = get(nv.nvmlDeviceGetMemoryInfo, h)
        util = get(nv.nvmlDeviceGetUtilizationRates, h)
        temp = get(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        e = self._energy_mj()
        with self._lock:
            self._rows.append({
                "t_s": time.perf_counter() - self._t0, "phase": self.phase,
                "power_w": power / 1000.0 if power is not None else math.nan,
                "sm_clock_mhz": float(sm) if sm is not None else math.nan,
                "mem_clock_mhz": float(memclk) if memclk is not None else math.nan,
                "mem_used_gb": mem.used / 1e9 if mem is not None else math.nan,
                "gpu_util_pct": float(util.gpu) if util is not None else math.nan,
                "temperature_c": float(temp) if temp is not None else math.nan,
                "energy_j": (e - self._e0) / 1000.0 if e is not None and self._e0 is not None else math.nan,
                "phase_energy_j": (e - self._phase_e0) / 1000.0 if e is not None and self._phase_e0 is not None else math.nan,
            })

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def take(self) -> list[dict]:
        with self._lock:
            rows, self._rows = self._rows, []
        return rows

    def __enter__(self) -> "Telemetry":
        if self.enabled:
            self._thread = threading.Thread(target=self._loop, name="costmodel-nvml", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

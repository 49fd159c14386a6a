# gpumem.py - peak GPU memory in use while a command (or a block of Python) runs, sampled from
# NVML (the `pynvml` module of nvidia-ml-py; `nvidia-smi` polling when that is missing).
#
#   python3 bench/train_throughput/gpumem.py --out MEM.json [--device 0] [--interval-ms 50]
#           [--timeout S] [--series SERIES.tsv] -- CMD...
#
# runs CMD (stdout/stderr pass through, exit status returned; killed after S seconds, status
# 124) and writes
#   {"baseline_mib": used before CMD, "peak_mib": largest sample, "peak_minus_baseline_mib": ...,
#    "samples": n, "source": "nvml"|"nvidia-smi",
#    "sm_clock_mhz_mean" / "_min", "power_w_mean": the SM clock and the board power over the
#    samples taken while the GPU was busy (utilization >= 90 %), "power_w_max", "temp_c_max"
#    (NVML only; null elsewhere)}.
# The clock and power are there to explain a run-to-run spread between machines of one kind
# (2026-12-03: the same tree measured 1.7 % apart on two H200s, the GEMM rows most).
# --series writes every sample as a tab-separated row (header first): t_unix (time.time()),
# used_mib, sm_mhz, power_w, temp_c, util_pct, reasons (NVML's clock event reasons as hex: why
# the SM clock is below its maximum, e.g. 0x4 software power cap, 0x80 hardware power brake;
# "-" where NVML cannot say). `report.py series` lines it up with a kda train log's iterations:
# kda.c runs at the 700 W cap, and one iteration of every run (about 1 s after the first) took
# 10-20 ms more (docs/perf-log.md, "One slow iteration in every run"); the series says why.
# This is device memory in use as the driver sees it: CUDA context, cuBLAS workspaces and
# allocator caches included, every process on the GPU counted. It is the only GPU number kda.c's
# `kda train` offers today (its log's "peak memory (MiB)" is host RSS), so run.sh takes it for
# both kda.c and FLA; FLA's torch.cuda.max_memory_allocated is reported beside it. Sampling can
# miss a peak shorter than the interval.
#
# From Python: `with GpuMemSampler(dev) as s: ...; s.peak_mib`.
import argparse
import json
import shutil
import subprocess
import sys
import threading
import time


class _Reader:
    """used MiB of one device, from NVML or nvidia-smi."""

    def __init__(self, device):
        self.device = device
        self.source = None
        try:
            import pynvml
            pynvml.nvmlInit()
            self._h = pynvml.nvmlDeviceGetHandleByIndex(device)
            self._nvml = pynvml
            self.source = "nvml"
        except Exception:  # no module, no driver: try the command-line tool
            if shutil.which("nvidia-smi"):
                self.source = "nvidia-smi"

    def used_mib(self):
        if self.source == "nvml":
            return self._nvml.nvmlDeviceGetMemoryInfo(self._h).used / 2**20
        if self.source == "nvidia-smi":
            r = subprocess.run(["nvidia-smi", "-i", str(self.device), "--query-gpu=memory.used",
                                "--format=csv,noheader,nounits"], capture_output=True, text=True)
            return float(r.stdout.strip().splitlines()[0])
        return float("nan")

    def clocks(self):
        """(SM clock MHz, power W, temperature C, utilization %) now, or None without NVML."""
        if self.source != "nvml":
            return None
        n = self._nvml
        return (n.nvmlDeviceGetClockInfo(self._h, n.NVML_CLOCK_SM),
                n.nvmlDeviceGetPowerUsage(self._h) / 1000.0,
                n.nvmlDeviceGetTemperature(self._h, n.NVML_TEMPERATURE_GPU),
                n.nvmlDeviceGetUtilizationRates(self._h).gpu)

    def reasons(self):
        """NVML's clock event (throttle) reasons bitmask now, or None where it cannot say."""
        if self.source != "nvml":
            return None
        for name in ("nvmlDeviceGetCurrentClocksEventReasons",
                     "nvmlDeviceGetCurrentClocksThrottleReasons"):  # new name, then the old
            fn = getattr(self._nvml, name, None)
            if fn:
                try:
                    return int(fn(self._h))
                except Exception:
                    return None
        return None


class GpuMemSampler:
    """Samples used device memory in a thread between __enter__ and __exit__."""

    def __init__(self, device=0, interval_ms=50, series=None):
        self.reader = _Reader(device)
        self.series = series  # an open text file for the per-sample rows, or None
        self.interval = interval_ms / 1000.0
        self.baseline_mib = self.peak_mib = float("nan")
        self.samples = 0
        self.busy_clocks = []  # SM MHz of the samples at >= 90 % utilization
        self.busy_watts = []  # board power of the same samples
        self.power_w_max = self.temp_c_max = None
        self._stop = threading.Event()
        self._thread = None

    def _sample(self):
        try:
            v = self.reader.used_mib()
        except Exception:
            return
        self.samples += 1
        if not v <= self.peak_mib:  # also replaces the initial nan
            self.peak_mib = v
        try:
            c = self.reader.clocks()
        except Exception:
            c = None
        if c:
            mhz, watts, temp, util = c
            if util >= 90:
                self.busy_clocks.append(mhz)
                self.busy_watts.append(watts)
            self.power_w_max = watts if self.power_w_max is None else max(self.power_w_max, watts)
            self.temp_c_max = temp if self.temp_c_max is None else max(self.temp_c_max, temp)
        if self.series:
            try:
                r = self.reader.reasons()
            except Exception:
                r = None
            mhz, watts, temp, util = c if c else ("-", "-", "-", "-")
            self.series.write(f"{time.time():.3f}\t{v:.1f}\t{mhz}\t{watts}\t{temp}\t{util}\t"
                              f"{'-' if r is None else hex(r)}\n")

    def _loop(self):
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self):
        if self.reader.source:
            try:
                self.baseline_mib = self.reader.used_mib()
            except Exception:
                pass
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread:
            self._stop.set()
            self._thread.join()
            self._sample()
        return False

    def result(self):
        """The numbers as a dict; MiB values are None when nothing could be read."""
        def mib(x):
            return round(x, 1) if x == x else None  # nan -> None (JSON null)
        bc, bw = self.busy_clocks, self.busy_watts
        return {"baseline_mib": mib(self.baseline_mib), "peak_mib": mib(self.peak_mib),
                "peak_minus_baseline_mib": mib(self.peak_mib - self.baseline_mib),
                "samples": self.samples, "source": self.reader.source or "none",
                "sm_clock_mhz_mean": round(sum(bc) / len(bc), 1) if bc else None,
                "sm_clock_mhz_min": min(bc) if bc else None,
                "power_w_mean": round(sum(bw) / len(bw), 1) if bw else None,
                "power_w_max": self.power_w_max, "temp_c_max": self.temp_c_max}


def main():
    ap = argparse.ArgumentParser(description="peak GPU memory in use while CMD runs")
    ap.add_argument("--out", required=True, help="JSON file for the result")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--interval-ms", type=float, default=50)
    ap.add_argument("--timeout", type=float, default=None, help="kill CMD after this many seconds")
    ap.add_argument("--series", help="write every sample to this TSV file (see the header)")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command after --")
    series = open(a.series, "w") if a.series else None
    if series:
        series.write("t_unix\tused_mib\tsm_mhz\tpower_w\ttemp_c\tutil_pct\treasons\n")
    with GpuMemSampler(a.device, a.interval_ms, series) as s:
        try:
            rc = subprocess.run(cmd, timeout=a.timeout).returncode
        except subprocess.TimeoutExpired:
            print(f"gpumem: {cmd[0]} killed after {a.timeout:g} s", file=sys.stderr)
            rc = 124
        except OSError as e:
            print(f"gpumem: cannot run {cmd[0]}: {e}", file=sys.stderr)
            rc = 127
    if series:
        series.close()
    with open(a.out, "w") as f:
        json.dump(dict(s.result(), rc=rc), f)
        f.write("\n")
    sys.exit(rc)


if __name__ == "__main__":
    main()

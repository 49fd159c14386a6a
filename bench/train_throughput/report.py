# report.py - the kda.c side's numbers from a `kda train` log, and the Markdown comparison table
# of bench/train_throughput (stdlib only).
#
#   python3 bench/train_throughput/report.py kda-log LOG --mb N --seq S --warmup W
#           [--mem MEM.json] [--rc RC]          -> one JSON line on stdout
#   python3 bench/train_throughput/report.py table RESULTS.jsonl [--title T] [--note LINE ...]
#                                               -> Markdown on stdout
#   python3 bench/train_throughput/report.py series LOG SERIES.tsv
#                                               -> Markdown on stdout: per iteration, its wall
#                                                  ms and the NVML samples inside it (gpumem.py
#                                                  --series): SM clock mean / min, power max, and
#                                                  the clock event reasons seen
#
# kda-log reads the Megatron-style lines of src/train/trainer.c log_train (run with
# log_interval 1, so there is one line per iteration):
#   [YYYY-MM-DD HH:MM:SS.ffffff] iteration I/N | ... | lm loss: X | ... |
#   ms/iter last/avg: A/B |
# ms_per_step = (timestamp of line N - timestamp of line W) / (N - W): wall clock over the timed
# iterations, host work between steps included, like the CUDA-event window of fla_train.py.
# ms_per_step_median = median of the per-step "last" values (train_step alone) of iterations > W;
# steps_ms = each timed iteration's wall ms (line to line), in order.
# step1_loss = the lm loss of iteration 1 (the loss at initialization).
# MEM.json is gpumem.py's output: peak device memory in use (NVML), the only GPU memory figure
# kda train offers (its "peak memory (MiB)" is host RSS, reported as host_rss_mib).
import argparse
import datetime
import json
import math
import re
import sys

LINE = re.compile(r"^\[(?P<ts>[0-9-]+ [0-9:.]+)\] iteration\s+(?P<it>\d+)/\s*(?P<n>\d+) \|"
                  r".*?\| lm loss: (?P<loss>\S+) \|.*?peak (?:host )?memory \(MiB\): (?P<rss>[0-9.]+) \|"
                  r".*?ms/iter last/avg: (?P<last>[0-9.]+)/(?P<avg>[0-9.]+) \|")


def parse_kda_log(text):
    """[(iteration, datetime, loss, last_ms, rss_mib)] of every log_train line."""
    rows = []
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if m:
            ts = datetime.datetime.strptime(m["ts"], "%Y-%m-%d %H:%M:%S.%f")
            rows.append((int(m["it"]), ts, float(m["loss"]), float(m["last"]), float(m["rss"])))
    return rows


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return (xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2) if n else float("nan")


def last_error(text):
    """The most telling line of a failed run: kda's 'error:' line, else the last line."""
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    for x in reversed(lines):
        if "error" in x.lower():
            return x[:300]
    return lines[-1][:300] if lines else "no output"


def kda_result(text, mb, seq, warmup, mem=None, rc=0):
    rows = parse_kda_log(text)
    res = {"impl": "kda", "mb": mb, "seq": seq, "warmup": warmup}
    by_it = {r[0]: r for r in rows}
    last_it = max(by_it) if by_it else 0
    if rc != 0 or warmup not in by_it or last_it <= warmup:
        res.update(error=True, rc=rc, iterations_logged=len(rows), message=last_error(text))
        if 1 in by_it:
            res["step1_loss"] = round(by_it[1][2], 5)
    else:
        ms = (by_it[last_it][1] - by_it[warmup][1]).total_seconds() * 1000 / (last_it - warmup)
        timed = [r for r in rows if r[0] > warmup]
        res.update(
            steps=last_it - warmup, tokens_per_s=round(mb * seq / (ms / 1000), 1),
            ms_per_step=round(ms, 2), ms_per_step_median=round(median([r[3] for r in timed]), 2),
            step1_loss=round(by_it[1][2], 5) if 1 in by_it else None,
            last_loss=round(by_it[last_it][2], 5),
            finite=all(math.isfinite(r[2]) for r in rows),
            host_rss_mib=max(r[4] for r in rows),
            # each timed iteration's wall ms in order (line to line), as fla_train.py's steps_ms
            steps_ms=[round((c[1] - p[1]).total_seconds() * 1000, 1)
                      for p, c in zip(rows, rows[1:]) if c[0] > warmup])
    if mem:
        res["gpu_mem_used_mib"] = mem.get("peak_mib")
        res["gpu_mem_baseline_mib"] = mem.get("baseline_mib")
        res["gpu_mem_source"] = mem.get("source")
        for k in ("sm_clock_mhz_mean", "sm_clock_mhz_min", "power_w_mean", "power_w_max",
                  "temp_c_max"):
            res["gpu_" + k] = mem.get(k)
    return res


# NVML's clock event reason bits (nvml.h, nvmlClocksEventReason*): why the SM clock is below max.
REASONS = {0x1: "idle", 0x2: "app clocks", 0x4: "SW power cap", 0x8: "HW slowdown",
           0x10: "sync boost", 0x20: "SW thermal", 0x40: "HW thermal", 0x80: "HW power brake",
           0x100: "display clocks"}


def reason_names(mask):
    names = [n for b, n in sorted(REASONS.items()) if mask & b]
    rest = mask & ~sum(REASONS)
    return ", ".join(names + ([hex(rest)] if rest else [])) or "none"


def parse_series(text):
    """[(t_unix, sm_mhz or None, power_w or None, reasons or None)] of gpumem.py --series."""
    rows = []
    for line in text.splitlines()[1:]:
        f = line.split("\t")
        if len(f) < 7:
            continue
        num = lambda x: None if x == "-" else float(x)  # noqa: E731
        rows.append((float(f[0]), num(f[2]), num(f[3]), None if f[6] == "-" else int(f[6], 16)))
    return rows


def series_table(log_text, series_text):
    """Markdown: each iteration's wall ms (its line's timestamp minus the previous line's) and the
    samples taken between those timestamps."""
    its = parse_kda_log(log_text)
    smp = parse_series(series_text)
    out = ["| iteration | ms | samples | SM MHz mean | SM MHz min | power W max | clock reasons |",
           "|---:|---:|---:|---:|---:|---:|---|"]
    for prev, cur in zip(its, its[1:]):
        t0, t1 = prev[1].timestamp(), cur[1].timestamp()  # kda's log: local time, as time.time()
        inside = [r for r in smp if t0 <= r[0] < t1]
        mhz = [r[1] for r in inside if r[1] is not None]
        watts = [r[2] for r in inside if r[2] is not None]
        mask = [r[3] for r in inside if r[3] is not None]
        union = 0
        for m in mask:
            union |= m
        out.append(f"| {cur[0]} | {(t1 - t0) * 1000:.1f} | {len(inside)} | "
                   f"{fmt(sum(mhz) / len(mhz) if mhz else None, '.0f')} | "
                   f"{fmt(min(mhz) if mhz else None, '.0f')} | "
                   f"{fmt(max(watts) if watts else None, '.0f')} | "
                   f"{reason_names(union) if mask else '–'} |")
    return "\n".join(out) + "\n"


def fmt(x, spec):
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def gib(mib):
    return None if mib is None else mib / 1024


def table(results, title=None, notes=()):
    """Markdown: one row per micro-batch, kda.c and FLA side by side, ratio of tokens/s."""
    kda = {r["mb"]: r for r in results if r.get("impl") == "kda"}
    fla = {r["mb"]: r for r in results if r.get("impl") == "fla"}
    out = []
    if title:
        out += [f"## {title}", ""]
    out += ["| micro-batch | kda.c tokens/s | kda.c ms/step | kda.c GPU mem used (GiB) | "
            "kda.c step-1 loss | FLA tokens/s | FLA ms/step | FLA max_memory_allocated (GiB) | "
            "FLA GPU mem used (GiB) | FLA step-1 loss | kda.c / FLA tokens/s |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def side(r, fla_side):
        """kda.c: tokens/s, ms, GPU mem, loss; FLA: tokens/s, ms, allocated, GPU mem, loss."""
        n = 5 if fla_side else 4
        if r is None or r.get("oom"):
            return ["not run" if r is None else "out of memory"] + ["–"] * (n - 1)
        cells = [fmt(r.get("tokens_per_s"), ",.0f"), fmt(r.get("ms_per_step"), ".1f")]
        if r.get("error"):
            cells[0] = "failed (rc %s)" % r.get("rc")
        if fla_side:
            cells.append(fmt(r.get("max_memory_allocated_gib"), ".1f"))
        cells += [fmt(gib(r.get("gpu_mem_used_mib")), ".1f"), fmt(r.get("step1_loss"), ".4f")]
        return cells

    for mb in sorted(set(kda) | set(fla)):
        k, f = kda.get(mb), fla.get(mb)
        ratio = "–"
        if k and f and k.get("tokens_per_s") and f.get("tokens_per_s"):
            ratio = f"{k['tokens_per_s'] / f['tokens_per_s']:.2f}x"
        out.append("| " + " | ".join([str(mb)] + side(k, False) + side(f, True) + [ratio]) + " |")
    out.append("")
    out += [f"* {n}" for n in notes]
    out += clock_notes(kda, fla)
    return "\n".join(out) + "\n"


def clock_notes(kda, fla):
    """One line per micro-batch with the SM clock and power NVML saw on each side (gpumem.py):
    at the H200's 700 W cap the clock, and with it every row, moves between runs and machines.
    With the mean busy power, the energy per 1,000 tokens (mean W / tokens per s x 1000): what a
    step costs once the board runs at its power cap (docs/perf-log.md, "power-bound")."""
    def one(name, r):
        if not r or r.get("gpu_sm_clock_mhz_mean") is None:
            return None
        w, tps = r.get("gpu_power_w_mean"), r.get("tokens_per_s")
        energy = (f", power mean {w:.0f} W, {w / tps * 1000:.2f} J per 1k tokens"
                  if w and tps else "")
        return (f"{name} SM clock mean {fmt(r.get('gpu_sm_clock_mhz_mean'), '.0f')} MHz "
                f"(min {fmt(r.get('gpu_sm_clock_mhz_min'), '.0f')}), power max "
                f"{fmt(r.get('gpu_power_w_max'), '.0f')} W{energy}")
    lines = []
    for mb in sorted(set(kda) | set(fla)):
        parts = [p for p in (one("kda.c", kda.get(mb)), one("FLA", fla.get(mb))) if p]
        if parts:
            lines.append(f"* mb {mb}, NVML while busy: " + "; ".join(parts))
    return lines


def self_test():
    """The parsers and both reports on a synthetic log and series; raises AssertionError."""
    t0 = 1_800_000_000.0
    its = [(1, 0.0, 600.0), (2, 0.130, 130.0), (3, 0.260, 130.0), (4, 0.410, 150.0)]
    log = "".join(
        f"[{datetime.datetime.fromtimestamp(t0 + t).strftime('%Y-%m-%d %H:%M:%S.%f')}] iteration"
        f" {i:8d}/{4:8d} | consumed samples: {16 * i} | lm loss: {12 - i / 10:.6E} | peak memory"
        f" (MiB): 3000.0 | ms/iter last/avg: {ms:.1f}/{ms:.1f} |\n" for i, t, ms in its)
    rows = parse_kda_log(log)
    assert [r[0] for r in rows] == [1, 2, 3, 4] and rows[3][3] == 150.0, rows
    res = kda_result(log, 16, 2048, 2)
    assert res["steps"] == 2 and abs(res["ms_per_step"] - 140.0) < 0.01, res
    assert res["ms_per_step_median"] == 140.0 and res["step1_loss"] == 11.9, res
    assert res["steps_ms"] == [130.0, 150.0], res
    assert kda_result(log, 16, 2048, 4)["error"] is True  # no timed iteration after the warm-up
    ser = "t_unix\tused_mib\tsm_mhz\tpower_w\ttemp_c\tutil_pct\treasons\n"
    for t, mhz, w, r in [(0.05, 1980, 400.0, "0x0"), (0.10, 1900, 650.0, "0x0"),
                         (0.20, 1700, 700.5, "0x4"), (0.30, 1500, 702.0, "0x84"),
                         (0.35, 1450, 699.0, "-"), (0.50, 1600, 690.0, "0x4")]:
        ser += f"{t0 + t:.3f}\t1000.0\t{mhz}\t{w}\t50\t100\t{r}\n"
    tab = series_table(log, ser).splitlines()
    assert len(tab) == 5, tab  # header, rule, iterations 2-4
    assert tab[2] == "| 2 | 130.0 | 2 | 1940 | 1900 | 650 | none |", tab[2]
    assert tab[3] == "| 3 | 130.0 | 1 | 1700 | 1700 | 700 | SW power cap |", tab[3]
    assert tab[4] == "| 4 | 150.0 | 2 | 1475 | 1450 | 702 | SW power cap, HW power brake |", tab[4]
    assert reason_names(0x1000) == "0x1000" and reason_names(0) == "none"
    k = {"gpu_sm_clock_mhz_mean": 1590.0, "gpu_sm_clock_mhz_min": 1440, "gpu_power_w_max": 701.0,
         "gpu_power_w_mean": 690.0, "tokens_per_s": 230000.0}
    f = dict(k, gpu_power_w_mean=None)
    cn = clock_notes({16: k}, {16: f})
    assert cn == ["* mb 16, NVML while busy: kda.c SM clock mean 1590 MHz (min 1440), power max"
                  " 701 W, power mean 690 W, 3.00 J per 1k tokens; FLA SM clock mean 1590 MHz"
                  " (min 1440), power max 701 W"], cn
    print("report.py self-test: ok")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    ap = argparse.ArgumentParser(description="kda train log parser and comparison table")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("kda-log", help="one JSON line from a kda train log")
    p.add_argument("log")
    p.add_argument("--mb", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--warmup", type=int, required=True, help="untimed iterations (>= 1)")
    p.add_argument("--mem", help="gpumem.py's JSON")
    p.add_argument("--rc", type=int, default=0, help="exit status of kda train")
    t = sub.add_parser("table", help="Markdown table from kda and fla JSON lines")
    t.add_argument("results")
    t.add_argument("--title")
    t.add_argument("--note", action="append", default=[])
    s = sub.add_parser("series", help="per-iteration clock and power from gpumem.py --series")
    s.add_argument("log")
    s.add_argument("series")
    a = ap.parse_args()
    if a.cmd == "kda-log":
        if a.warmup < 1:
            ap.error("--warmup must be >= 1 (the window starts at iteration warmup's line)")
        with open(a.log, errors="replace") as f:
            text = f.read()
        mem = None
        if a.mem:
            try:
                with open(a.mem) as f:
                    mem = json.load(f)
            except (OSError, ValueError):
                mem = None
        print(json.dumps(kda_result(text, a.mb, a.seq, a.warmup, mem, a.rc)))
    elif a.cmd == "series":
        with open(a.log, errors="replace") as f, open(a.series) as g:
            sys.stdout.write(series_table(f.read(), g.read()))
    else:
        with open(a.results) as f:
            results = [json.loads(x) for x in f if x.strip().startswith("{")]
        sys.stdout.write(table(results, a.title, a.note))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
# multi.py - the helpers of bench/dist/device_multi.sh (stdlib only, so the CPU smoke test runs
# without numpy or torch):
#
#   multi.py bytes-data PREFIX FILE... [--length L] [--min-sequences N]
#       a Megatron .bin/.idx (uint16, dtype code 8) of the files' bytes as token ids (< 256),
#       cut into documents of L ids and repeated until N documents: learnable data for the
#       256-id tiny models of the CPU smoke test.
#   multi.py random-data PREFIX --sequences N --length L --vocab V [--seed S]
#       uniform random ids as bench/train_throughput/make_random_dataset.py writes them (int32,
#       dtype code 4), without numpy (slower: for small sets).
#   multi.py mem --out MEM.json --devices 0,1,.. [--timeout S] -- CMD...
#       runs CMD while sampling NVML's used memory of every listed GPU (gpumem.py's sampler, one
#       per device): {"devices": [...], "peak_mib": [...], "baseline_mib": [...], "rc": rc}.
#   multi.py launch --nproc N --log-prefix P [--port PORT] [--timeout S] -- CMD...
#       N ranks of CMD with torchrun's variables and no agent between them (RANK, WORLD_SIZE,
#       LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT): rank 0's output on
#       stdout, rank r's in P.rank<r>.log (so rank 0's log is never interleaved with another
#       rank's: `kda train --profile` prints on every rank). Exit status: 0, or the first failing
#       rank's (128 + signal when killed); on timeout every rank's process tree is killed (124).
#   multi.py log LOG --name NAME [--stage S] [--gpus N] [--mb M] [--warmup W] [--seq T]
#       [--mem MEM.json] [--rc RC] [--metrics SAVE/metrics.jsonl] [--extra KEY=VALUE ...]
#       one JSON line: the iteration lines of a `kda train` log (rank 0's), the window's ms per
#       iteration from the log's timestamps after iteration W, tokens/s per GPU, TFLOP/s, MFU,
#       the profile table (--profile N) if any, device memory, the first error line.
#   multi.py fault --name NAME --log LOG [--want REGEX] [--rcs "r0 r1 .."] [--seconds S]
#       [--bound S] [--expect nonzero|zero] [--extra KEY=VALUE ...]
#       one JSON line judging a fault-injection run (exit statuses, time to exit, the message).
#   multi.py report RESULTS.jsonl [--sweep SWEEP.jsonl] --ngpu N [--title T] [--note LINE ...]
#       the Markdown summary (multi.md) of every stage's JSON lines.
import argparse
import datetime
import json
import math
import os
import random
import re
import struct
import signal
import subprocess
import sys
import time

MAGIC = b"MMIDIDX\x00\x00"


# ---- data ------------------------------------------------------------------------------------

def write_indexed(prefix, docs, dtype_code, fmt):
    """docs: list of lists of ids; fmt: struct code of one id ('H' or 'i')."""
    os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)
    size = struct.calcsize(fmt)
    with open(prefix + ".bin.tmp", "wb") as f:
        for d in docs:
            f.write(struct.pack("<%d%s" % (len(d), fmt), *d))
    n = len(docs)
    with open(prefix + ".idx.tmp", "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<QBQQ", 1, dtype_code, n, n + 1))
        f.write(struct.pack("<%di" % n, *[len(d) for d in docs]))
        ptr, ptrs = 0, []
        for d in docs:
            ptrs.append(ptr)
            ptr += len(d) * size
        f.write(struct.pack("<%dq" % n, *ptrs))
        f.write(struct.pack("<%dq" % (n + 1), *range(n + 1)))
    os.replace(prefix + ".bin.tmp", prefix + ".bin")
    os.replace(prefix + ".idx.tmp", prefix + ".idx")


def cmd_bytes_data(a):
    data = b"".join(open(p, "rb").read() for p in a.files)
    if len(data) < a.length:
        sys.exit("multi.py bytes-data: less than one document of input")
    docs = [list(data[i:i + a.length]) for i in range(0, len(data) - a.length + 1, a.length)]
    base = list(docs)
    while len(docs) < a.min_sequences:
        docs += base
    write_indexed(a.prefix, docs, 8, "H")
    print(f"wrote {a.prefix}.bin/.idx: {len(docs)} documents x {a.length} byte ids", file=sys.stderr)


def cmd_random_data(a):
    rng = random.Random(a.seed)
    docs = [[rng.randrange(a.vocab) for _ in range(a.length)] for _ in range(a.sequences)]
    write_indexed(a.prefix, docs, 4, "i")
    print(f"wrote {a.prefix}.bin/.idx: {a.sequences} x {a.length} random ids < {a.vocab}",
          file=sys.stderr)


# ---- processes ---------------------------------------------------------------------------------

def descendants(pid):
    """pids of every live descendant of pid (from /proc)."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                st = fh.read()
            ppid = int(st[st.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def kill_tree(proc):
    """SIGKILL proc and every process it started (by pid: only what this script started)."""
    for p in descendants(proc.pid) + [proc.pid]:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def run_bounded(cmd, timeout, **kw):
    """Runs cmd; after timeout seconds kills its whole tree and returns 124."""
    try:
        proc = subprocess.Popen(cmd, **kw)
    except OSError as e:
        print(f"multi.py: cannot run {cmd[0]}: {e}", file=sys.stderr)
        return 127
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"multi.py: {cmd[0]} killed after {timeout:g} s", file=sys.stderr)
        kill_tree(proc)
        return 124


def cmd_launch(a):
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    port = a.port or (20000 + os.getpid() % 20000)
    procs, logs = [], []
    for r in range(a.nproc):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(a.nproc), LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE=str(a.nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        out = None
        if r > 0:
            out = open(f"{a.log_prefix}.rank{r}.log", "w")
            logs.append(out)
        procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT if out
                                      else None))
    t_end = time.time() + a.timeout if a.timeout else None
    status = [None] * a.nproc
    first_bad = None
    while any(s is None for s in status):
        for i, p in enumerate(procs):
            if status[i] is None and p.poll() is not None:
                rc = p.returncode
                status[i] = 128 - rc if rc < 0 else rc
                if status[i] and first_bad is None:
                    first_bad = status[i]
                    print(f"multi.py launch: rank {i} exited with status {status[i]}",
                          file=sys.stderr)
                    grace = time.time() + 90  # as kda's --nproc-per-node: the others then go
                    t_end = min(t_end, grace) if t_end else grace
        if t_end and time.time() > t_end:
            print(f"multi.py launch: killed after {a.timeout:g} s", file=sys.stderr)
            for p in procs:
                if p.poll() is None:
                    kill_tree(p)
            sys.exit(124)
        time.sleep(0.05)
    for f_ in logs:
        f_.close()
    sys.exit(first_bad or 0)


# ---- GPU memory of several devices -----------------------------------------------------------

def cmd_mem(a):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "train_throughput"))
    from gpumem import GpuMemSampler  # noqa: E402 (bench/train_throughput/gpumem.py)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    devs = [int(x) for x in a.devices.split(",") if x.strip()]
    samplers = [GpuMemSampler(d, a.interval_ms) for d in devs]
    for s in samplers:
        s.__enter__()
    rc = run_bounded(cmd, a.timeout)
    for s in samplers:
        s.__exit__(None, None, None)
    res = [s.result() for s in samplers]
    with open(a.out, "w") as f:
        json.dump({"devices": devs, "peak_mib": [r["peak_mib"] for r in res],
                   "baseline_mib": [r["baseline_mib"] for r in res],
                   "source": res[0]["source"] if res else "none", "rc": rc}, f)
        f.write("\n")
    sys.exit(rc)


# ---- kda train logs --------------------------------------------------------------------------

TS = re.compile(r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\] iteration\s+(?P<it>\d+)/\s*(?P<n>\d+) \|")
FIELDS = {
    "consumed": (r"consumed samples:\s+(\d+)", int),
    "ms": (r"elapsed time per iteration \(ms\): ([\d.]+)", float),
    "loss": (r"lm loss: ([-+\dEe.naif]+)", float),
    "grad_norm": (r"grad norm: ([-+\dEe.naif]+)", float),
    "tok_s_gpu": (r"tokens/s/GPU: ([\d.]+)", float),
    "model_tflops": (r"model TFLOP/s/GPU: ([\d.]+)", float),
    "mfu": (r"MFU: ([\d.]+)%", float),
    "dev_peak_mib": (r"device memory \(MiB\): [\d.]+ used, ([\d.]+) peak", float),
    "ranks": (r"ranks: (\d+)", int),
}
PARAMS = re.compile(r"^parameters: (\d+)", re.M)


def parse_log(text):
    rows = []
    for line in text.splitlines():
        m = TS.match(line.strip())
        if not m:
            continue
        r = {"it": int(m["it"]), "n": int(m["n"]),
             "t": datetime.datetime.strptime(m["ts"], "%Y-%m-%d %H:%M:%S.%f").timestamp()}
        for k, (rx, conv) in FIELDS.items():
            f = re.search(rx, line)
            if f:
                try:
                    r[k] = conv(f.group(1))
                except ValueError:
                    r[k] = float("nan")
        rows.append(r)
    return rows


def parse_profile(text):
    """[(title, {op: ms})] of every `--profile` table in text, plus its raw lines."""
    out, cur = [], None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("profile of iteration"):
            cur = {"title": s, "rows": {}, "lines": [s]}
            out.append(cur)
            continue
        if cur is None:
            continue
        if s.startswith("|"):
            cur["lines"].append(s)
            cells = [c.strip().replace("*", "") for c in s.strip("|").split("|")]
            if len(cells) >= 3:
                try:
                    cur["rows"][cells[0]] = float(cells[2])
                except ValueError:
                    pass
            if "step (wall)" in s:
                cur = None
        elif s:
            cur = None
    return out


def first_error(text):
    for line in text.splitlines():
        if re.search(r"error|killed by signal|out of memory|gone", line, re.I):
            return line.strip()[:400]
    return None


def median(xs):
    xs = sorted(x for x in xs if x is not None and math.isfinite(x))
    n = len(xs)
    return (xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2) if n else None


def kv(items):
    out = {}
    for it in items or []:
        k, _, v = it.partition("=")
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return out


def read_metrics(path):
    rows = {}
    try:
        with open(path) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if "loss" in r:
                    rows[r["iteration"]] = r
    except OSError:
        pass
    return rows


def cmd_log(a):
    try:
        text = open(a.log, errors="replace").read()
    except OSError:
        text = ""
    rows = parse_log(text)
    res = {"kind": "run", "name": a.name, "stage": a.stage, "gpus": a.gpus, "mb": a.mb,
           "seq": a.seq, "rc": a.rc, "log": os.path.basename(a.log), "launcher": a.launcher}
    res.update(kv(a.extra))
    met = read_metrics(a.metrics) if a.metrics else {}
    its = []
    for r in rows:
        m = met.get(r["it"], {})
        its.append({"it": r["it"], "consumed": m.get("consumed_samples", r.get("consumed")),
                    "loss": m.get("loss", r.get("loss")), "loss_src": "metrics" if m else "log",
                    "grad_norm": m.get("grad_norm", r.get("grad_norm"))})
    res["iterations"] = its
    res["iters_logged"] = len(rows)
    if rows:
        res["gbs_iters"] = rows[-1]["n"]
    timed = [r for r in rows if r["it"] > a.warmup]
    w0 = [r for r in rows if r["it"] == a.warmup]
    if timed and w0:
        last = timed[-1]
        res["ms_per_step"] = round((last["t"] - w0[0]["t"]) * 1e3 / (last["it"] - a.warmup), 3)
        res["timed_steps"] = last["it"] - a.warmup
    for k in ("tok_s_gpu", "model_tflops", "mfu"):
        v = median([r.get(k) for r in timed])
        if v is not None:
            res[k + "_median"] = v
    peaks = [r.get("dev_peak_mib") for r in rows if r.get("dev_peak_mib") is not None]
    if peaks:
        res["log_dev_peak_mib"] = max(peaks)
    dp = re.search(r"data parallel over (\d+) ranks \((\w+)\)", text)
    if dp:
        res["ranks_seen"], res["engine"] = int(dp.group(1)), dp.group(2)
    z = re.search(r"ZeRO-1 \(distributed optimizer\)[^\n]*", text)
    if z:
        res["zero1_line"] = z.group(0)[:200]
    p = PARAMS.search(text)
    if p:
        res["params"] = int(p.group(1))
    prof = parse_profile(text)
    if prof:
        res["profile"] = {"title": prof[0]["title"], "rows": prof[0]["rows"]}
        res["profile_lines"] = prof[0]["lines"]
    if a.mem:
        try:
            mem = json.load(open(a.mem))
            res["mem_peak_mib"] = mem.get("peak_mib")
            res["mem_source"] = mem.get("source")
        except (OSError, ValueError):
            pass
    err = first_error(text)
    if err and (a.rc != 0 or not rows):
        res["error"] = err
    print(json.dumps(res))


def cmd_fault(a):
    try:
        text = open(a.log, errors="replace").read()
    except OSError:
        text = ""
    rcs = [int(x) for x in (a.rcs or "").split()]
    res = {"kind": "fault", "name": a.name, "rcs": rcs, "seconds": a.seconds, "bound": a.bound}
    res.update(kv(a.extra))
    if a.want:
        m = re.search(a.want, text)
        res["message"] = m.group(0)[:300] if m else None
    ok_rc = all(r != 0 for r in rcs) if a.expect == "nonzero" else all(r == 0 for r in rcs)
    res["pass"] = bool(rcs) and ok_rc and (a.seconds is not None and a.seconds <= a.bound) and \
        (not a.want or res.get("message") is not None)
    print(json.dumps(res))


# ---- the report ------------------------------------------------------------------------------

def f(x, spec=",.0f", dash="–"):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return dash
    return format(x, spec)


def gib(mib):
    return None if mib is None else mib / 1024


def mem_cell(r):
    m = r.get("mem_peak_mib") if r else None
    if not m or all(x is None for x in m):
        lp = r.get("log_dev_peak_mib") if r else None
        return f(gib(lp), ".1f") + (" (log, rank 0)" if lp is not None else "")
    vals = [x for x in m if x is not None]
    if len(vals) == 1:
        return f(gib(vals[0]), ".1f")
    return f"{gib(min(vals)):.1f}–{gib(max(vals)):.1f}"


def status(r):
    if r is None:
        return "not run"
    if r.get("skipped"):
        return "skipped: " + r["skipped"]
    if r.get("rc") not in (0, None):
        e = r.get("error") or ""
        if re.search(r"out of memory|cudaErrorMemoryAllocation|cannot allocate", e, re.I):
            return "out of memory"
        return f"failed (rc {r.get('rc')})"
    return "ok"


def interp_ms(sweep, impl, dtype, nbytes):
    """ms of one all-reduce of nbytes from the sweep (log-log interpolation, clamped)."""
    pts = sorted((r["bytes"], r["ms"]) for r in sweep if r.get("impl") == impl and
                 r.get("dtype") == dtype and r.get("ms"))
    if not pts:
        return None
    if nbytes <= pts[0][0]:
        return pts[0][1] * nbytes / pts[0][0]
    for (b0, m0), (b1, m1) in zip(pts, pts[1:]):
        if b0 <= nbytes <= b1:
            t = math.log(nbytes / b0) / math.log(b1 / b0)
            return math.exp(math.log(m0) + t * math.log(m1 / m0))
    return pts[-1][1] * nbytes / pts[-1][0]


def report(results, sweep, ngpu, title, notes, tol):
    by = {}
    for r in results:
        by[r.get("name")] = r
    out = [f"## {title}", ""]
    out += [f"* {n}" for n in notes]
    out.append("")

    # 1. sweeps
    out += ["### 1. All-reduce bandwidth (in-place sum)", ""]
    if not sweep:
        out += ["not run", ""]
    else:
        sizes = sorted({r["bytes"] for r in sweep})
        cols = [("kda", "fp32"), ("torch", "fp32"), ("torch", "bf16")]
        have = [c for c in cols if any(r.get("impl") == c[0] and r.get("dtype") == c[1]
                                       for r in sweep)]
        world = next((r.get("world") for r in sweep), ngpu)
        eng = next((r.get("engine") for r in sweep if r.get("impl") == "kda"), "?")
        out.append(f"{world} ranks; kda = kda.c's communicator ({eng}); busbw = algbw x 2(n-1)/n "
                   "(GB/s, 1e9 B); ms = slowest rank's mean per call.")
        out.append("")
        both = ("kda", "fp32") in have and ("torch", "fp32") in have
        hdr = "| bytes | " + " | ".join(f"{i} {d} ms | {i} {d} busbw" for i, d in have)
        if both:
            hdr += " | kda / torch fp32 busbw"
        out.append(hdr + " |")
        out.append("|" + "---:|" * (1 + 2 * len(have) + (1 if both else 0)))
        idx = {(r["impl"], r["dtype"], r["bytes"]): r for r in sweep}
        for b in sizes:
            cells = [human_bytes(b)]
            for i, d in have:
                r = idx.get((i, d, b))
                cells += [f(r and r.get("ms"), ".3f"), f(r and r.get("busbw_GBps"), ".1f")]
            if both:
                k, t = idx.get(("kda", "fp32", b)), idx.get(("torch", "fp32", b))
                cells.append(f"{k['busbw_GBps'] / t['busbw_GBps']:.2f}" if k and t and
                             t.get("busbw_GBps") else "–")
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    for s in ("sweep_kda", "sweep_torch"):
        if s in by and by[s].get("skipped"):
            out += [f"* {s}: {by[s]['skipped']}", ""]

    # 2. equality
    out += ["### 2. Equality: 1 GPU with accumulation vs data parallel (same global batch)", ""]
    one, many, res1 = by.get("eq_1gpu"), by.get("eq_ngpu"), by.get("eq_resume")
    if not one or not many:
        out += [f"not run ({status(one)} / {status(many)})", ""]
    else:
        a = {x["it"]: x for x in one["iterations"]}
        b = {x["it"]: x for x in many["iterations"]}
        c = {x["it"]: x for x in (res1 or {}).get("iterations", [])}
        common = sorted(set(a) & set(b))
        d = [abs(a[i]["loss"] - b[i]["loss"]) for i in common
             if a[i]["loss"] is not None and b[i]["loss"] is not None]
        same_cons = all(a[i]["consumed"] == b[i]["consumed"] for i in common)
        bitsame = all(a[i]["loss"] == b[i]["loss"] for i in common)
        first_diff = next((i for i in common if a[i]["loss"] != b[i]["loss"]), None)
        ok = bool(d) and max(d) <= tol and same_cons and len(common) == one.get("gbs_iters")
        out.append(f"{one.get('mb')} x {one.get('accum', '?')} micro-batches on 1 GPU vs "
                   f"{many.get('mb')} per GPU on {many.get('gpus')} GPUs ({many.get('launcher')}), "
                   f"{len(common)} iterations compared (losses from the "
                   f"{a[common[0]]['loss_src'] if common else '?'}).")
        out.append("")
        out.append("| check | value | bar | result |")
        out.append("|---|---:|---:|---|")
        out.append(f"| max abs loss difference, iterations 1..{common[-1] if common else 0} | "
                   f"{f(max(d) if d else None, '.2e')} | {tol:.0e} | "
                   f"{'PASS' if d and max(d) <= tol else 'FAIL'} |")
        out.append(f"| mean abs loss difference | {f(sum(d) / len(d) if d else None, '.2e')} | | |")
        out.append(f"| losses bit-identical | {bitsame} (first difference: iteration "
                   f"{first_diff if first_diff else '-'}) | | info |")
        gn = [abs(a[i]["grad_norm"] - b[i]["grad_norm"]) / max(abs(a[i]["grad_norm"]), 1e-30)
              for i in common if a[i].get("grad_norm") is not None and
              b[i].get("grad_norm") is not None]
        gn_ok = bool(gn) and max(gn) <= 1e-2
        ok = ok and gn_ok
        out.append(f"| max relative grad-norm difference | {f(max(gn) if gn else None, '.2e')} | "
                   f"1e-02 | {'PASS' if gn_ok else 'FAIL'} |")
        out.append(f"| consumed_samples identical at every iteration | {same_cons} | | "
                   f"{'PASS' if same_cons else 'FAIL'} |")
        if res1:
            rc_ = sorted(set(c) & set(b))
            dr = [abs(c[i]["loss"] - b[i]["loss"]) for i in rc_]
            da = [abs(c[i]["loss"] - a[i]["loss"]) for i in rc_ if i in a]
            rcons = all(c[i]["consumed"] == b[i]["consumed"] for i in rc_)
            out.append(f"| resumed on {res1.get('gpus')} GPU(s) from the {many.get('gpus')}-GPU "
                       f"checkpoint at iteration {res1.get('resumed_at', '?')}: iterations "
                       f"{rc_[0] if rc_ else '-'}..{rc_[-1] if rc_ else '-'}, max abs difference "
                       f"vs the {many.get('gpus')}-GPU run | {f(max(dr) if dr else None, '.2e')} | "
                       f"{tol:.0e} | {'PASS' if dr and max(dr) <= tol and rcons else 'FAIL'} |")
            out.append(f"| the same vs the 1-GPU run | {f(max(da) if da else None, '.2e')} | "
                       f"{tol:.0e} | {'PASS' if da and max(da) <= tol else 'FAIL'} |")
            out.append(f"| resumed consumed_samples = the {many.get('gpus')}-GPU run's | {rcons} "
                       f"| | {'PASS' if rcons else 'FAIL'} |")
            ok = ok and bool(dr) and max(dr) <= tol and rcons and \
                len(rc_) == one.get("gbs_iters", 0) - int(res1.get("resumed_at", 0))
        else:
            out.append("| resume | not run | | |")
        out.append(f"| **equality overall** (losses, grad norms, consumed samples, resume) | | | "
                   f"**{'PASS' if ok else 'FAIL'}** |")
        out.append("")
        pick = sorted(set([1, 2, 3, 5, 10, 25, 26, 30, 40, 50] + common[-1:]) & set(common))
        out.append("| iteration | consumed | loss 1 GPU | loss " + f"{many.get('gpus')} GPUs | "
                   "difference | loss resumed |")
        out.append("|---:|---:|---:|---:|---:|---:|")
        for i in pick:
            out.append(f"| {i} | {a[i]['consumed']} | {a[i]['loss']:.9g} | {b[i]['loss']:.9g} | "
                       f"{a[i]['loss'] - b[i]['loss']:+.2e} | "
                       f"{format(c[i]['loss'], '.9g') if i in c else ''} |")
        out.append("")

    # 3. speed
    out += ["### 3. Speed: tokens/s per GPU, 1 GPU vs data parallel (global batch = mb x GPUs, "
            "no accumulation)", ""]
    mbs = sorted({r["mb"] for r in results if r.get("stage") == "speed" and r.get("mb")})
    if not mbs:
        out += ["not run", ""]
    else:
        bar = 0.95
        out.append(f"| mb | 1 GPU tokens/s | {ngpu} GPUs tokens/s/GPU | scaling | per GPU | "
                   f"{ngpu} GPUs + ZeRO-1 tokens/s/GPU | scaling | per GPU | 1 GPU ms/step | "
                   f"{ngpu} GPUs ms/step | ZeRO-1 ms/step | NVML peak GiB 1 GPU | {ngpu} GPUs | "
                   "ZeRO-1 |")
        out.append("|---:|" + "---:|" * 13)
        for mb in mbs:
            s1, sn, sz = by.get(f"speed_1gpu_mb{mb}"), by.get(f"speed_ngpu_mb{mb}"), \
                by.get(f"speed_zero1_mb{mb}")
            cells = [str(mb)]
            base = tok(s1, mb)
            cells.append(f(base) if base else status(s1))
            for r in (sn, sz):
                t = tok(r, mb)
                if t and base:
                    sc = t * ngpu / base
                    cells += [f(t), f"{sc:.2f}x", f"{100 * t / base:.1f}% "
                              f"{'PASS' if t / base >= bar else 'FAIL'}"]
                else:
                    cells += [f(t) if t else status(r), "–", "–"]
            cells += [f(r and r.get("ms_per_step"), ".1f") if tok(r, mb) else "–"
                      for r in (s1, sn, sz)]
            cells += [mem_cell(r) for r in (s1, sn, sz)]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        out.append(f"Bar: scaling >= {bar * ngpu:.2f}x ({bar:.0%} per GPU) on {ngpu} GPUs. "
                   "tokens/s per GPU = mb x seq / (ms per step), ms per step from the log's "
                   "timestamps over the timed iterations (after the warm-up, the profiled "
                   "iteration excluded).")
        out.append("")
        # overlap
        rows = []
        for mb in mbs:
            s1, sn = by.get(f"speed_1gpu_mb{mb}"), by.get(f"speed_ngpu_mb{mb}")
            if not (s1 and sn and s1.get("profile") and sn.get("profile")):
                continue
            p1, pn = s1["profile"]["rows"], sn["profile"]["rows"]
            w1, wn = p1.get("step (wall)"), pn.get("step (wall)")
            u1, un = p1.get("unaccounted (wall - sum)"), pn.get("unaccounted (wall - sum)")
            params = sn.get("params") or s1.get("params")
            ar = interp_ms(sweep, "kda", "fp32", 4 * params) if params else None
            dw = wn - w1 if wn is not None and w1 is not None else None
            du = un - u1 if un is not None and u1 is not None else None
            hidden = max(0.0, min(1.0, 1 - dw / ar)) if ar and dw is not None else None
            rows.append((mb, w1, wn, dw, du, ar, hidden))
        if rows:
            out += ["Overlap, from the profiled iteration (`--profile`, rank 0): plain data "
                    "parallel all-reduces each layer's gradient on its own stream during the last "
                    "micro-batch's backward, the embedding's after it. The step's growth from 1 "
                    f"GPU to {ngpu} is what data parallelism costs (exposed communication plus the "
                    "slow-down of kernels sharing the GPU with NCCL's); the growth of the "
                    "'unaccounted' row is the wait for the comm stream alone. The full "
                    "gradient's all-reduce cost is the sweep's fp32 time at 4 B x parameters "
                    "(one message: a lower bound of the per-layer messages' time); hidden = 1 - "
                    "step growth / that cost.", ""]
            out.append("| mb | step 1 GPU ms | step N GPUs ms | growth ms | unaccounted growth ms | "
                       "all-reduce of the gradient ms (sweep) | hidden |")
            out.append("|---:|---:|---:|---:|---:|---:|---:|")
            for mb, w1, wn, dw, du, ar, hid in rows:
                out.append(f"| {mb} | {f(w1, '.1f')} | {f(wn, '.1f')} | {f(dw, '.2f')} | "
                           f"{f(du, '.2f')} | {f(ar, '.2f')} | "
                           f"{f(hid and 100 * hid, '.0f')}{'%' if hid is not None else ''} |")
            out.append("")
        for mb in mbs[:1]:  # the per-op profiles side by side at the smallest micro-batch
            runs = [(lab, by.get(f"speed_{k}_mb{mb}")) for lab, k in
                    (("1 GPU", "1gpu"), (f"{ngpu} GPUs", "ngpu"), (f"{ngpu} GPUs ZeRO-1", "zero1"))]
            runs = [(lab, r["profile"]["rows"]) for lab, r in runs if r and r.get("profile")]
            if len(runs) < 2:
                continue
            ops = []
            for _, rows_ in runs:
                ops += [o for o in rows_ if o not in ops]
            ops = [o for o in ops if "step (wall)" not in o] + ["step (wall)"]
            out += [f"Per-op profile of one step at mb {mb} (ms; rank 0):", ""]
            out.append("| op | " + " | ".join(lab for lab, _ in runs) + " |")
            out.append("|---|" + "---:|" * len(runs))
            for o in ops:
                out.append(f"| {o} | " + " | ".join(f(rows_.get(o), ".2f") for _, rows_ in runs)
                           + " |")
            out.append("")
        z = next((r.get("zero1_line") for r in results if r.get("zero1_line")), None)
        if z:
            out += [f"ZeRO-1: {z}", ""]

    # 4. faults
    out += ["### 4. Faults", ""]
    faults = [r for r in results if r.get("kind") == "fault"]
    if not faults:
        out += ["not run", ""]
    else:
        out.append("| event | exit statuses | seconds to exit | bound | message | result |")
        out.append("|---|---|---:|---:|---|---|")
        for r in faults:
            if r.get("timeout_s") and r.get("seconds") is not None and r["seconds"] < 900:
                r["message"] = (r.get("message") or "–") + (
                    " (left at the collective timeout: the death was not detected)"
                    if r["seconds"] >= 0.8 * r["timeout_s"] else " (detected before the timeout)")
            out.append(f"| {r.get('what', r['name'])} | {' '.join(map(str, r['rcs'])) or '–'} | "
                       f"{f(r.get('seconds'), '.1f')} | {r['bound']} | "
                       f"{(r.get('message') or '–').replace('|', '/')[:260]} | "
                       f"{'PASS' if r['pass'] else 'FAIL'} |")
        out.append("")

    # 5. launchers
    out += ["### 5. Launchers", ""]
    launch = [r for r in results if r.get("stage") == "launch"] + \
        [dict(r, launcher=r["name"][7:]) for r in results
         if r.get("kind") == "skip" and r["name"].startswith("launch_")]
    if not launch:
        out += ["not run", ""]
    else:
        out.append("| launcher | command | result |")
        out.append("|---|---|---|")
        labels = {"torchrun": "torchrun --nproc-per-node (static rendezvous: the README's form)",
                  "torchrun_sa": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone",
                  "kda": "kda train --nproc-per-node", "mpirun": "mpirun -np",
                  "env": "torchrun's variables, no agent (multi.py launch)"}
        for r in launch:
            res = r.get("skipped") or (
                (f"{r['cited']}: " if r.get("cited") else "") +
                f"{status(r)}: {r.get('iters_logged', 0)} iterations, log: data parallel over "
                f"{r.get('ranks_seen', '?')} ranks ({r.get('engine', '?')})" if r.get("iterations") is not None else status(r))
            if r.get("error") and status(r) != "ok":
                res += ": " + r["error"].replace("|", "/")[:200]
            lab = labels.get(r.get("launcher"), r.get("launcher") or r["name"])
            out.append(f"| {lab} | `{r.get('cmd', '')}` | {res} |")
        out.append("")

    # 6. issue 17
    seed1, seedn = by.get("seed_1gpu"), by.get("seed_ngpu")
    if seed1 or seedn:
        out += ["### 6. The seed recipe's shape (global batch 1024 x 2048)", ""]
        out.append("| run | micro-batch x accumulation | steps timed | ms/step | tokens/s/GPU | "
                   "model TFLOP/s/GPU | MFU | NVML peak GiB | status |")
        out.append("|---|---|---:|---:|---:|---:|---:|---:|---|")
        for r in (seed1, seedn):
            if not r:
                continue
            t = r.get("gbs", 0) * r.get("seq", 0) / (r["ms_per_step"] / 1e3) / r["gpus"] \
                if r.get("ms_per_step") and r.get("gbs") else None
            out.append(f"| {r['gpus']} GPU(s) | {r.get('mb')} x {r.get('accum', '?')} | "
                       f"{r.get('timed_steps', '–')} | {f(r.get('ms_per_step'), ',.1f')} | {f(t)} | "
                       f"{f(r.get('model_tflops_median'), '.1f')} | "
                       f"{f(r.get('mfu_median'), '.1f')}{'%' if r.get('mfu_median') else ''} | "
                       f"{mem_cell(r)} | {status(r)} |")
        t1 = seed1 and seed1.get("ms_per_step") and \
            seed1["gbs"] * seed1["seq"] / (seed1["ms_per_step"] / 1e3)
        tn = seedn and seedn.get("ms_per_step") and \
            seedn["gbs"] * seedn["seq"] / (seedn["ms_per_step"] / 1e3) / seedn["gpus"]
        out.append("")
        if t1 and tn:
            sc = tn * seedn["gpus"] / t1
            out.append(f"Scaling {sc:.2f}x on {seedn['gpus']} GPUs (bar >= {0.9375 * seedn['gpus']:.2f}x: "
                       f"{'PASS' if sc >= 0.9375 * seedn['gpus'] else 'FAIL'}).")
        if seedn and seedn.get("ms_per_step"):
            full = seedn.get("full_ms_per_step") or seedn["ms_per_step"]
            out.append(f"The recipe's 4768 iterations at {full:,.1f} ms/step: "
                       f"{4768 * full / 3.6e6:.2f} h of wall time on {seedn['gpus']} GPUs "
                       f"(steps only: no evaluation, checkpoints or data loading stalls).")
        if tn:
            out.append(f"Seed's 8x MI300X (Primus, FLA side): FLA 175,617 and Primus 178,810 "
                       f"tokens/s/GPU; this run {tn:,.0f} tokens/s/GPU = {tn / 175617:.2f}x FLA's, "
                       f"{tn / 178810:.2f}x Primus's (different hardware: H200 vs MI300X).")
        out.append("")
        if seedn and seedn.get("profile_lines"):
            out += ["Per-op profile of one step, rank 0:", ""] + seedn["profile_lines"] + [""]

    b1 = sorted([r for r in results if r.get("stage") == "1b"],
                key=lambda r: (r.get("recompute") != "none", r.get("mb") or 0))
    if b1:
        out += ["### 7. KDA-1B with ZeRO-1", ""]
        out.append("| run | recompute | mb | status | tokens/s/GPU | ms/step | NVML peak GiB per GPU |")
        out.append("|---|---|---:|---|---:|---:|---:|")
        for r in b1:
            out.append(f"| {r['name']} | {r.get('recompute', '?')} | {r.get('mb')} | {status(r)} | "
                       f"{f(tok(r, r.get('mb')))} | {f(r.get('ms_per_step'), ',.1f')} | "
                       f"{mem_cell(r)} |")
        for rc_ in ("none", "full"):
            fit = [r["mb"] for r in b1 if r.get("recompute") == rc_ and status(r) == "ok"]
            nofit = [r["mb"] for r in b1 if r.get("recompute") == rc_ and status(r) != "ok"]
            if fit or nofit:
                out.append("")
                out.append(f"* recompute {rc_}: largest micro-batch that ran "
                           f"{max(fit) if fit else '–'}; failed at "
                           f"{min(nofit) if nofit else '– (larger sizes not tried)'}")
        out.append("")

    skipped = [r for r in results if r.get("skipped") and r.get("kind") == "skip"]
    if skipped:
        out += ["### Not run", ""] + [f"* {r['name']}: {r['skipped']}" for r in skipped] + [""]
    return "\n".join(out) + "\n"


def tok(r, mb):
    if not r or r.get("rc") not in (0, None) or not r.get("ms_per_step") or not mb:
        return None
    return mb * r.get("accum", 1) * r["seq"] / (r["ms_per_step"] / 1e3)


def human_bytes(b):
    for unit, s in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if b >= unit:
            return f"{b / unit:g} {s}"
    return f"{b} B"


def cmd_report(a):
    results, sweep = [], []
    for path, dst in ((a.results, results), (a.sweep, sweep)):
        if not path:
            continue
        try:
            for line in open(path):
                line = line.strip()
                if line.startswith("{"):
                    try:
                        dst.append(json.loads(line))
                    except ValueError:
                        pass
        except OSError:
            pass
    sys.stdout.write(report(results, sweep, a.ngpu, a.title, a.note, a.tol))


def main():
    ap = argparse.ArgumentParser(description="helpers of bench/dist/device_multi.sh")
    sub = ap.add_subparsers(dest="sub", required=True)
    p = sub.add_parser("bytes-data")
    p.add_argument("prefix")
    p.add_argument("files", nargs="+")
    p.add_argument("--length", type=int, default=65)
    p.add_argument("--min-sequences", type=int, default=0)
    p = sub.add_parser("random-data")
    p.add_argument("prefix")
    p.add_argument("--sequences", type=int, required=True)
    p.add_argument("--length", type=int, required=True)
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--seed", type=int, default=1234)
    p = sub.add_parser("mem")
    p.add_argument("--out", required=True)
    p.add_argument("--devices", required=True)
    p.add_argument("--interval-ms", type=float, default=50)
    p.add_argument("--timeout", type=float)
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    p = sub.add_parser("launch")
    p.add_argument("--nproc", type=int, required=True)
    p.add_argument("--log-prefix", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--timeout", type=float)
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    p = sub.add_parser("log")
    p.add_argument("log")
    p.add_argument("--name", required=True)
    p.add_argument("--stage", default="")
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--mb", type=int, default=0)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--mem")
    p.add_argument("--rc", type=int, default=0)
    p.add_argument("--metrics")
    p.add_argument("--launcher", default="")
    p.add_argument("--extra", nargs="*")
    p = sub.add_parser("fault")
    p.add_argument("--name", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--want")
    p.add_argument("--rcs", default="")
    p.add_argument("--seconds", type=float)
    p.add_argument("--bound", type=float, default=60)
    p.add_argument("--expect", choices=["nonzero", "zero"], default="nonzero")
    p.add_argument("--extra", nargs="*")
    p = sub.add_parser("report")
    p.add_argument("results")
    p.add_argument("--sweep")
    p.add_argument("--ngpu", type=int, required=True)
    p.add_argument("--title", default="Multi-GPU run")
    p.add_argument("--note", action="append", default=[])
    p.add_argument("--tol", type=float, default=5e-3)
    a = ap.parse_args()
    {"bytes-data": cmd_bytes_data, "random-data": cmd_random_data, "mem": cmd_mem,
     "launch": cmd_launch, "log": cmd_log, "fault": cmd_fault, "report": cmd_report}[a.sub](a)


if __name__ == "__main__":
    main()

# torch_allreduce.py - the all-reduce bandwidth sweep of bench/dist/allreduce_bench.c through
# torch.distributed (the peer on the same GPUs): in-place SUM all_reduce over message sizes, fp32
# and bf16, one JSON line per (dtype, size) from rank 0, in allreduce_bench.c's format:
#   {"impl": "torch", "engine": "nccl", "op": "all_reduce", "dtype": "bf16", "world": N,
#    "bytes": B, "iters": k, "ms": t, "algbw_GBps": B / t, "busbw_GBps": algbw * 2 (N - 1) / N}
# Per size: a correctness check (rank r adds r + 1), `warmup` untimed calls, an iteration count
# all ranks agree on (~target-ms of work, in [min-iters, max-iters]), then the timed loop between
# two CUDA events; ms is the slowest rank's mean per call.
#
#   torchrun --nproc-per-node N bench/dist/torch_allreduce.py [--dtypes fp32 bf16]
#       [--min-bytes 1M] [--max-bytes 2G] [--factor 2] [--warmup 5] [--target-ms 100]
#   --backend gloo (CPU tensors, host clock) is the CPU smoke test's form.
# NVLink multicast stays off: NCCL_NVLS_ENABLE=0 (and torch's symmetric-memory multicast) are
# set before the process group starts unless already set.
import argparse
import json
import os
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip()
    return int(float(s[:-1]) * mult[s[-1].upper()]) if s[-1].upper() in mult else int(s)


def main():
    ap = argparse.ArgumentParser(description="all-reduce bandwidth sweep through torch.distributed")
    ap.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    ap.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=list(DTYPES))
    ap.add_argument("--min-bytes", type=size, default=1 << 20)
    ap.add_argument("--max-bytes", type=size, default=2 << 30)
    ap.add_argument("--factor", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--min-iters", type=int, default=5)
    ap.add_argument("--max-iters", type=int, default=200)
    ap.add_argument("--target-ms", type=float, default=100.0)
    a = ap.parse_args()

    cuda = a.backend == "nccl"
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    dist.init_process_group(a.backend, device_id=dev if cuda else None)
    rank, world = dist.get_rank(), dist.get_world_size()

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    def timed(buf, iters):
        """ms per call on this rank."""
        dist.barrier()
        sync()
        if cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(iters):
                dist.all_reduce(buf)
            e1.record()
            e1.synchronize()
            return e0.elapsed_time(e1) / iters
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        return (time.perf_counter() - t0) * 1e3 / iters

    def slowest(x):
        t = torch.tensor([x], dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    if rank == 0:
        nccl = ""
        if cuda:
            try:
                v = torch.cuda.nccl.version()
                nccl = ", NCCL " + (".".join(map(str, v)) if isinstance(v, tuple) else str(v))
            except Exception:  # the version is a label only
                nccl = ", NCCL ?"
        print(f"torch_allreduce: {world} ranks ({a.backend}), torch {torch.__version__}{nccl}",
              file=sys.stderr)
    for name in a.dtypes:
        dt = DTYPES[name]
        esize = torch.tensor([], dtype=dt).element_size()
        buf = torch.zeros(a.max_bytes // esize, dtype=dt, device=dev)
        # correctness: small integers are exact in bf16 too (world <= 8: sum <= 36)
        n0 = a.min_bytes // esize
        buf[:n0].fill_(rank + 1)
        dist.all_reduce(buf[:n0])
        want = world * (world + 1) / 2
        bad = (buf[:n0] != want).sum().item()
        if bad:
            sys.exit(f"torch_allreduce: rank {rank}: {name} check: {bad} elements differ from {want}")
        buf.zero_()
        nbytes = a.min_bytes
        while nbytes <= a.max_bytes:
            view = buf[: nbytes // esize]
            est = slowest(timed(view, max(a.warmup, 1)))
            iters = int(min(max(a.target_ms / est if est > 0 else a.max_iters, a.min_iters),
                            a.max_iters))
            ms = slowest(timed(view, iters))
            alg = nbytes / (ms / 1e3) / 1e9
            if rank == 0:
                print(json.dumps({"impl": "torch", "engine": a.backend, "op": "all_reduce",
                                  "dtype": name, "world": world, "bytes": nbytes, "iters": iters,
                                  "ms": round(ms, 6), "algbw_GBps": round(alg, 3),
                                  "busbw_GBps": round(alg * 2 * (world - 1) / world, 3)}),
                      flush=True)
            nbytes *= a.factor
        del buf, view
        if cuda:
            torch.cuda.empty_cache()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

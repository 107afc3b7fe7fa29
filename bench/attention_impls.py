"""Benchmark: attention forward with the online (tiled), SDPA and stable implementations.

Side by side in one run: time and peak extra memory at T = 1024, 4096, 8192 (B=1, H=4,
d=64, float32, forward only).  Each measurement runs in a fresh child process so that the
peak resident memory (ru_maxrss) it reports belongs to that implementation alone.

    .venv/bin/python bench/attention_impls.py [--sizes 1024 4096 8192] [--repeats 3] [--block 512]

Targets (issue 2): online's peak memory at T=8192 at most 1/8 of stable's; online's time
within 3x of SDPA's.  Not a test: it prints what it measures.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

IMPLS = ("sdpa", "online", "stable")


def child(impl: str, t: int, repeats: int, block: int) -> dict:
    import torch

    from attnscale import attention

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, t, 64, generator=g) for _ in range(3))
    base_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    with torch.no_grad():
        for _ in range(repeats + 1):  # the first call is a warm-up
            start = time.perf_counter()
            attention(q, k, v, impl=impl, block_size=block)
            times.append(time.perf_counter() - start)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"impl": impl, "T": t, "seconds": statistics.median(times[1:]), "peak_mib": (peak_kb - base_kb) / 1024}


def measure(impl: str, t: int, repeats: int, block: int) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", impl, str(t), str(repeats), str(block)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 8192])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--block", type=int, default=512, help="online's key block size")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        impl, t, repeats, block = args.child
        print(json.dumps(child(impl, int(t), int(repeats), int(block))))
        return
    print(f"attention forward, B=1 H=4 d=64 float32, online block {args.block}, median of {args.repeats}")
    print(f"{'T':>6} {'impl':>7} {'time ms':>9} {'peak MiB':>9}")
    rows = {}
    for t in args.sizes:
        for impl in IMPLS:
            row = measure(impl, t, args.repeats, args.block)
            rows[(impl, t)] = row
            print(f"{t:>6} {impl:>7} {row['seconds'] * 1e3:>9.1f} {row['peak_mib']:>9.1f}")
    print("\nratios")
    for t in args.sizes:
        online, sdpa, stable = (rows[(i, t)] for i in ("online", "sdpa", "stable"))
        mem_ratio = online["peak_mib"] / stable["peak_mib"] if stable["peak_mib"] > 0 else float("nan")
        print(f"T={t}: online/sdpa time {online['seconds'] / sdpa['seconds']:.2f}x (target <= 3), "
              f"online/stable peak memory {mem_ratio:.3f} (target <= 0.125), "
              f"stable/sdpa time {stable['seconds'] / sdpa['seconds']:.2f}x")


if __name__ == "__main__":
    main()

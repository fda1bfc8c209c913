"""CUDA check (run where a GPU exists): kornia graphs on CUDA tensors equal eager, and timings.

    python benchmarks/cuda_check.py
"""
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import lazytrace  # noqa: E402
from kornia_cases import CASES, to_device  # noqa: E402


def median_us(fn, args, calls=200):
    for _ in range(10):
        fn(*args)
    torch.cuda.synchronize()
    samples = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        fn(*args)
        torch.cuda.synchronize()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000


def main():
    assert torch.cuda.is_available(), "no CUDA device"
    print(torch.__version__, torch.cuda.get_device_name())
    failures, speedups = [], []
    print(f"{'function (1x3x32x32 cuda)':40} {'eager us':>9} {'lazy us':>9} {'speedup':>8} {'hits':>5}")
    for name, fn, make in CASES:
        lazy = lazytrace.trace_graph(fn)
        ok = True
        for seed in range(3):
            args = to_device(make(seed), "cuda")
            got, expected = lazy(*args), fn(*args)
            same = torch.equal(got, expected) if isinstance(got, torch.Tensor) \
                else all(torch.equal(g, e) for g, e in zip(got, expected))     # bit-identical
            ok = ok and same and (not isinstance(got, torch.Tensor) or got.device.type == "cuda")
        if not ok:
            failures.append(name)
        args = to_device(make(0), "cuda")
        eager, fast = median_us(fn, args), median_us(lazy, args)
        speedups.append(eager / fast)
        print(f"{name:40} {eager:9.1f} {fast:9.1f} {eager / fast:7.2f}x {lazy.stats.hits:5d}"
              f"{'  MISMATCH' if not ok else ''}{'  eager: ' + str(dict(lazy.stats.reasons)) if lazy.stats.eager else ''}")
    print(f"\ngeomean speedup on CUDA: {statistics.geometric_mean(speedups):.2f}x over {len(speedups)} functions; "
          f"mismatches: {failures or 'none'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

"""Python replay vs compiled graphs, for every kornia case of the test-suite at 1x3x32x32.

Modes, timed in one run (medians of many calls): eager kornia; LazyGraph (generated Python);
LazyGraph with return_backend_traced_fn=True (the graph compiled: inductor called directly when
the graph has no guards, random ops, in-place writes or autograd needs, keeping whichever of
inductor and the plain generated code is faster; torch.compile otherwise); and
torch.compile of the kornia function itself (--with-torch-compile, slow). Prints per function
and the geometric means, including the best of replay and compiled graph per function.

    python benchmarks/bench_compile_tier.py [--only NAME ...] [--with-torch-compile] [--device cuda]
"""
import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import lazytrace  # noqa: E402
from kornia_cases import CASES, to_device  # noqa: E402


def median_us(fn, args, seconds=0.25):
    sync = torch.cuda.synchronize if any(isinstance(a, torch.Tensor) and a.is_cuda for a in args) \
        else (lambda: None)
    for _ in range(5):
        fn(*args)
    sync()
    samples, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(samples) < 30:
        start = time.perf_counter_ns()
        fn(*args)
        sync()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000



def _close(a, b):
    if isinstance(a, torch.Tensor):
        return torch.allclose(a, b, atol=1e-4, rtol=1e-4, equal_nan=True)
    return all(_close(x, y) for x, y in zip(a, b))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--with-torch-compile", action="store_true")
    parser.add_argument("--device", default="cpu")
    opts = parser.parse_args()
    warnings.simplefilter("ignore")
    torch._dynamo.config.cache_size_limit = 256
    torch.compile(lambda x: x + 1)(torch.ones(2))          # inductor start-up, not counted
    print(f"torch {torch.__version__}, {opts.device}, {torch.get_num_threads()} threads, 1x3x32x32 float32; "
          f"us per call (median); compile s = first compiled call")
    head = f"{'function':36} {'eager':>8} {'lazy':>8} {'compiled':>9} {'compile s':>9} {'kept':>13}"
    print(head + (f" {'torch.compile':>13}" if opts.with_torch_compile else ""))
    rows = []
    for name, fn, make in CASES:
        if opts.only and not any(o in name for o in opts.only):
            continue
        args = to_device(make(0), opts.device)
        lazy = lazytrace.trace_graph(fn)
        tier = lazytrace.trace_graph(fn, return_backend_traced_fn=True)
        lazy(*args), tier(*args)                            # traces
        start = time.perf_counter()
        tier(*args)                                         # first replay: compiles
        compile_s = time.perf_counter() - start
        checked = to_device(make(1), opts.device)
        ok = _close(tier(*checked), fn(*checked))
        row = [median_us(fn, args), median_us(lazy, args), median_us(tier, args)]
        kept = getattr(tier.graph_for(*args).fn, "choice", None) or "torch.compile"
        line = f"{name:36} {row[0]:8.1f} {row[1]:8.1f} {row[2]:9.1f} {compile_s:9.2f} {kept:>13}"
        if opts.with_torch_compile:
            compiled = torch.compile(fn)
            compiled(*args)
            line += f" {median_us(compiled, args):13.1f}"
        print(line + ("" if ok else "  DIFFERS FROM EAGER"))
        rows.append(row)
    geo = [statistics.geometric_mean([r[0] / r[i] for r in rows]) for i in (1, 2)]
    best = statistics.geometric_mean([r[0] / min(r[1], r[2]) for r in rows])
    print(f"\ngeomean speedup over eager ({len(rows)} functions): replay {geo[0]:.2f}x, compiled graph "
          f"{geo[1]:.2f}x, best of the two per function {best:.2f}x")


if __name__ == "__main__":
    main()

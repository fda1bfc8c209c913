#!/usr/bin/env python
"""The fixed cost of a trace: first calls of small functions (1x3x32x32 torch) against one eager call.

    python benchmarks/first_call_fixed.py                          # this tree
    python benchmarks/first_call_fixed.py --trees . /tmp/base      # A/B: trees interleaved, same minutes
    python benchmarks/first_call_fixed.py --only hflip swish --rounds 5

Per function, in a fresh process (one per tree, function and round; the trees take turns):
  eager    median thread CPU of one eager call
  cold     the process's first trace of the function (per-code and per-torch-function caches
           empty: the static analysis of its code, the schema lookups of torch functions it is
           the first to call), lazytrace itself warmed by another function's trace
  fresh    the first LazyGraph of a new function object with the same code (first_call_bytecodes.fresh:
           per-code caches are warm, what lazytrace keeps per function object is not)
  warm     first calls of 30 fresh LazyGraphs of the function: min and median thread CPU
  bytecodes      Python bytecodes of one warm first call (deterministic: the measure when timings are noisy)
  cold bytecodes those of the cold first call (in a process of its own: counting slows it down)
Times are thread CPU in us (median over rounds for cold and fresh, min of mins and median of medians
for warm); `x` columns are ratios to the eager call. A LazyGraph is made before its first call is timed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NAMES = ["identity", "hflip", "invert", "rgb_to_grayscale", "adjust_brightness", "normalize", "swish",
         "gaussian_blur2d"]


def functions():
    """name -> (fn, extra positional arguments after the image)."""
    import torch
    import kornia

    mean, std = torch.tensor([0.5, 0.4, 0.3]), torch.tensor([0.2, 0.25, 0.3])

    def swish(x):                   # three torch calls
        return x * torch.sigmoid(1.702 * x)

    return {"identity": (lambda x: x, ()),
            "hflip": (kornia.geometry.transform.hflip, ()),
            "invert": (kornia.enhance.invert, ()),
            "rgb_to_grayscale": (kornia.color.rgb_to_grayscale, ()),
            "adjust_brightness": (kornia.enhance.adjust_brightness, (0.2,)),
            "normalize": (kornia.enhance.normalize, (mean, std)),
            "swish": (swish, ()),
            "gaussian_blur2d": (kornia.filters.gaussian_blur2d, ((3, 3), (1.5, 1.5)))}


def _cpu(call) -> float:
    t = time.thread_time_ns()
    call()
    return (time.thread_time_ns() - t) / 1e3


def worker(name: str, count_cold: bool) -> dict:
    import warnings
    import torch
    import lazytrace
    sys.path.insert(0, HERE)
    from first_call_bytecodes import bytecodes, fresh

    warnings.simplefilter("ignore")
    x = torch.rand(1, 3, 32, 32)
    lazytrace.trace_graph(lambda a: torch.sigmoid(a + 1.0) * 2.0)(x)    # lazytrace's own first-use costs
    fn, extra = functions()[name]
    eager = [_cpu(lambda: fn(x, *extra)) for _ in range(203)][3:]
    lazy = lazytrace.trace_graph(fn)
    if count_cold:
        return {"cold_bytecodes": bytecodes(lambda: lazy(x, *extra), lambda out: None)}
    cold = _cpu(lambda: lazy(x, *extra))
    lazy = lazytrace.trace_graph(fresh(fn))
    fresh_t = _cpu(lambda: lazy(x, *extra))
    warm = []
    for _ in range(30):
        lazy = lazytrace.trace_graph(fn)
        warm.append(_cpu(lambda: lazy(x, *extra)))
    lazy = lazytrace.trace_graph(fn)
    count = bytecodes(lambda: lazy(x, *extra), lambda out: None)
    return {"eager": statistics.median(eager), "cold": cold, "fresh": fresh_t, "warm_min": min(warm),
            "warm_med": statistics.median(warm), "bytecodes": count, "lazytrace": lazytrace.__file__}


def run(tree: str, name: str, *more) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", name, *more], env=env,
                         cwd=os.path.abspath(tree), capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trees", nargs="+", default=[os.path.dirname(HERE)], help="source trees (PYTHONPATH)")
    p.add_argument("--only", nargs="*", choices=NAMES)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--count-cold", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.count_cold)))
        return
    names = args.only or NAMES
    results = {(t, n): [] for t in args.trees for n in names}
    for _ in range(args.rounds):
        for n in names:
            for t in args.trees:            # interleaved: machine noise hits every tree alike
                results[t, n].append(run(t, n))
    cold_counts = {(t, n): run(t, n, "--count-cold")["cold_bytecodes"] for n in names for t in args.trees}
    geo = {t: {} for t in args.trees}
    for t in args.trees:
        print(f"\n## {t} (lazytrace from {results[t, names[0]][0]['lazytrace']})")
        print(f"{'function':18} {'eager':>7} {'cold':>8} {'x':>6} {'fresh':>8} {'x':>6} {'warm min':>9} {'x':>6} "
              f"{'warm med':>9} {'x':>6} {'bytecodes':>9} {'cold bytecodes':>14}")
        for n in names:
            rs = results[t, n]
            eager = statistics.median(r["eager"] for r in rs)
            row = {"cold": statistics.median(r["cold"] for r in rs),
                   "fresh": statistics.median(r["fresh"] for r in rs),
                   "warm_min": min(r["warm_min"] for r in rs),
                   "warm_med": statistics.median(r["warm_med"] for r in rs)}
            for k, v in row.items():
                geo[t].setdefault(k, []).append(v / eager)
            print(f"{n:18} {eager:7.1f} " + " ".join(f"{v:8.1f} {v / eager:6.1f}" if k in ("cold", "fresh") else
                                                       f"{v:9.1f} {v / eager:6.1f}" for k, v in row.items())
                  + f" {rs[0]['bytecodes']:9d} {cold_counts[t, n]:14d}")
            geo[t].setdefault("bytecodes", []).append(rs[0]["bytecodes"])
            geo[t].setdefault("cold bytecodes", []).append(cold_counts[t, n])
        print("geomean ratio to eager: " + ", ".join(f"{k} {statistics.geometric_mean(v):.1f}x"
                                                     for k, v in geo[t].items() if "bytecodes" not in k))
    if len(args.trees) > 1:
        first = args.trees[0]
        for t in args.trees[1:]:
            print(f"\n{first} / {t}, geomean of per-function time ratios: " +
                  ", ".join(f"{k} {statistics.geometric_mean([a / b for a, b in zip(geo[first][k], geo[t][k])]):.3f}"
                            for k in geo[first]))


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""First calls (traces) repeated: medians over many fresh LazyGraphs, next to eager's median.

    python benchmarks/first_call_repeat.py --frameworks jax tensorflow --repeat 30
    python benchmarks/first_call_repeat.py --frameworks jax --only swish --profile 20
    python benchmarks/first_call_repeat.py --frameworks jax --no-collect   # CPU caches warm

bench_frameworks.py times one first call per function (one sample: its ratio moves 1.5-2x
between runs). Here each sample is a fresh LazyGraph of a fresh function object (the same code,
globals and closure: nothing lazytrace keeps per function object is reused) called once, after
eager calls and two traces warmed the framework's caches; samples are timed as bench_frameworks
times a first call (gc.collect(), one eager call, cyclic GC off), and alternate with timed eager
calls so that machine noise hits both alike. `--no-collect`: without the gc.collect(), whose walk
over every object leaves the trace's own code and data out of the CPU caches (the difference is
that cold-cache cost: 300-450 us of a JAX or TF identity trace, session 11). Columns: median
eager call, median first call (wall clock and thread CPU), their ratio (issue 4's target: <= 5).
`--profile N` prints cProfile's top N entries (by total time) over all the samples instead.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import statistics
import sys
import time
import types

import bench_frameworks as bf

import lazytrace


def fresh(fn):
    """A new function object running `fn`'s code (same globals, defaults and closure)."""
    new = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    return new


def timed(call, done, rewarm, collect=True):
    if collect:
        gc.collect()
    rewarm()
    gc.disable()
    try:
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        done(call())
        return (time.perf_counter_ns() - t0) / 1e3, (time.thread_time_ns() - c0) / 1e3
    finally:
        gc.enable()


def measure(fn, x, done, repeat, profiler=None, collect=True):
    rewarm = lambda: done(fn(x))      # noqa: E731
    for _ in range(3):
        rewarm()
    for _ in range(2):
        done(lazytrace.trace_graph(fresh(fn))(x))
    eager, first, cpu = [], [], []
    for _ in range(repeat):
        for _ in range(3):
            t0 = time.perf_counter_ns()
            rewarm()
            eager.append((time.perf_counter_ns() - t0) / 1e3)
        graph = lazytrace.trace_graph(fresh(fn))
        if profiler is not None:
            profiler.enable()
        wall, thread = timed(lambda: graph(x), done, rewarm, collect)
        if profiler is not None:
            profiler.disable()
        first.append(wall)
        cpu.append(thread)
    return statistics.median(eager), statistics.median(first), statistics.median(cpu)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frameworks", nargs="+", default=["jax", "tensorflow"])
    p.add_argument("--only", nargs="*", help="function names (default: all six)")
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--profile", type=int, default=0, metavar="N", help="print cProfile's top N entries")
    p.add_argument("--no-collect", action="store_true", help="no gc.collect() before a timed first call")
    args = p.parse_args()
    for name in args.frameworks:
        x, done = bf.make_input(name), bf.sync(name)
        done(lazytrace.trace_graph(lambda a: a)(x))        # one-time set-up of the first trace
        print(f"\n## {name}: first call of a fresh LazyGraph, median of {args.repeat} (us)")
        print(f"{'function':10} {'eager':>8} {'first':>9} {'first cpu':>10} {'first/eager':>12}")
        ratios = []
        for fname, fn in bf.functions(name).items():
            if args.only and fname not in args.only:
                continue
            profiler = cProfile.Profile() if args.profile else None
            eager, first, cpu = measure(fn, x, done, args.repeat, profiler, not args.no_collect)
            ratios.append(first / eager)
            print(f"{fname:10} {eager:8.1f} {first:9.1f} {cpu:10.1f} {first / eager:12.1f}")
            if profiler is not None:
                pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(args.profile)
        print(f"met (<= 5x): {sum(r <= 5 for r in ratios)} of {len(ratios)}")


if __name__ == "__main__":
    main()

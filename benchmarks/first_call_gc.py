#!/usr/bin/env python
"""The cyclic garbage collector's share of first calls (traces) over bench_kornia's suite at 1x3x32x32.

    python benchmarks/first_call_gc.py                             # 48 functions, 10 rounds
    python benchmarks/first_call_gc.py --only hflip normalize --rounds 30
    python benchmarks/first_call_gc.py --gc-off                    # collector off while a trace runs
    python benchmarks/first_call_gc.py --trees . /tmp/base         # A/B: a process per tree, alternating

Each sample is the first call of a fresh LazyGraph (trace + run) of one suite function, after eager
calls and two traces warmed the caches; the functions take turns (round after round), the collector
on as a user's process has it (no gc.collect() before a sample: its thresholds carry over from call
to call), torch on one thread. The graphs of one round stay alive until the next round, as a program keeps what it traced.
`gc.callbacks` time every collection (thread CPU) and count them per generation, inside the traces
and outside them. Columns: min and median thread CPU of a first call, the median wall clock, and the
collector's time inside the function's traces (sum over rounds / rounds). `cycles` is the cyclic
garbage one trace leaves (gc.collect() after a trace and dropping its LazyGraph, collector off while
it ran; the same for an eager call is subtracted): what refcounting could not free.
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _suite(only, threads):
    saved = sys.argv
    sys.argv = [saved[0]]
    try:
        sys.path.insert(0, HERE)
        import bench_kornia
    finally:
        sys.argv = saved
    import torch
    torch.set_num_threads(threads)
    x = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    suite = []
    for name, fn, build in bench_kornia._suite():
        if only and not any(o in name for o in only):
            continue
        args, kwargs = build(x, 32)
        suite.append((name, fn, args, kwargs))
    return suite


class Collections:
    """gc.callbacks: per generation, the number and thread CPU of collections, inside traces or not."""

    def __init__(self):
        self.inside = False
        self.stats = {(where, g): [0, 0] for where in (True, False) for g in range(3)}
        self._t0 = 0

    def __call__(self, phase, info):
        if phase == "start":
            self._t0 = time.thread_time_ns()
        else:
            s = self.stats[self.inside, info["generation"]]
            s[0] += 1
            s[1] += time.thread_time_ns() - self._t0


def cycles_left(fn, args, kwargs) -> int:
    import lazytrace
    gc.collect()
    gc.disable()
    try:
        lazytrace.trace_graph(fn)(*args, **kwargs)
        traced = gc.collect()
        fn(*args, **kwargs)
        return traced - gc.collect()
    finally:
        gc.enable()


def run(args):
    import lazytrace
    suite = _suite(args.only, args.threads)
    for name, fn, a, kw in suite:
        for _ in range(3):
            fn(*a, **kw)
        for _ in range(2):
            lazytrace.trace_graph(fn)(*a, **kw)
    cycles = {name: cycles_left(fn, a, kw) for name, fn, a, kw in suite}
    gc.collect()
    counter = Collections()
    gc.callbacks.append(counter)
    cpu = {name: [] for name, *_ in suite}
    wall = {name: [] for name, *_ in suite}
    gc_in = {name: 0 for name, *_ in suite}
    kept = []
    loop_cpu = time.thread_time_ns()
    for _ in range(args.rounds):
        kept = []
        for name, fn, a, kw in suite:
            graph = lazytrace.trace_graph(fn)
            before = sum(counter.stats[True, g][1] for g in range(3))
            counter.inside = True
            if args.gc_off:
                gc.disable()
            w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            graph(*a, **kw)
            c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
            if args.gc_off:
                gc.enable()
            counter.inside = False
            cpu[name].append((c1 - c0) / 1e3)
            wall[name].append((w1 - w0) / 1e3)
            gc_in[name] += sum(counter.stats[True, g][1] for g in range(3)) - before
            kept.append(graph)
    kept = None
    loop_cpu = (time.thread_time_ns() - loop_cpu) / 1e6
    gc.callbacks.remove(counter)
    print(f"lazytrace from {os.path.dirname(os.path.dirname(lazytrace.__file__))}; {len(suite)} functions, "
          f"{args.rounds} rounds{', collector off during traces' if args.gc_off else ''}; "
          f"gc thresholds {gc.get_threshold()}, {len(gc.get_objects())} tracked objects")
    print(f"{'function':28} {'cpu min':>8} {'cpu med':>8} {'wall med':>9} {'gc in':>7} {'cycles':>7}")
    for name, *_ in suite:
        print(f"{name:28} {min(cpu[name]):8.1f} {statistics.median(cpu[name]):8.1f} "
              f"{statistics.median(wall[name]):9.1f} {gc_in[name] / args.rounds / 1e3:7.1f} {cycles[name]:7d}")
    total_cpu = sum(map(sum, cpu.values()))
    total_gc = sum(gc_in.values()) / 1e3
    print(f"sum of medians: cpu {sum(statistics.median(v) for v in cpu.values()):.0f} us, "
          f"wall {sum(statistics.median(v) for v in wall.values()):.0f} us; "
          f"sum of mins: cpu {sum(min(v) for v in cpu.values()):.0f} us; "
          f"cycles left per trace: {sum(cycles.values())} objects over the suite")
    print(f"all traces: cpu {total_cpu / 1e3:.1f} ms, of it in the collector {total_gc / 1e3:.1f} ms "
          f"({100 * total_gc / total_cpu:.1f}%); the whole loop: cpu {loop_cpu:.1f} ms")
    for where in (True, False):
        parts = ", ".join(f"gen{g} {counter.stats[where, g][0]} x {counter.stats[where, g][1] / 1e6:.1f} ms"
                          for g in range(3))
        print(f"collections {'inside traces ' if where else 'outside traces'}: {parts}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="+", help="functions whose name contains one of these")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--threads", type=int, default=1,
                   help="torch.set_num_threads (default 1: with 2, OpenMP's waits for a core that another "
                        "process holds made 32x32 eager calls 50x slower on the 2-core test machine)")
    p.add_argument("--gc-off", action="store_true", help="collector off while a first call runs")
    p.add_argument("--trees", nargs="+", help="run in a process per tree (PYTHONPATH), the trees alternating")
    p.add_argument("--repeat", type=int, default=1, help="with --trees: processes per tree")
    args = p.parse_args()
    if not args.trees:
        return run(args)
    rest = ["--rounds", str(args.rounds), "--threads", str(args.threads), *(["--gc-off"] if args.gc_off else []), *(["--only", *args.only] if args.only else [])]
    per_tree(__file__, args.trees, rest, args.repeat)


def per_tree(script, trees, rest, repeat=1):
    """Run `script rest...` in a process per tree (PYTHONPATH), the trees alternating, `repeat` rounds."""
    for _ in range(repeat):
        for tree in trees:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
            subprocess.run([sys.executable, os.path.abspath(script), *rest], env=env, check=True)
            print(flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""What a first call leaves for the cyclic garbage collector, over bench_kornia's suite at 1x3x32x32.

    python benchmarks/gc_objects.py                         # 48 functions
    python benchmarks/gc_objects.py --only hflip canny --types 10
    python benchmarks/gc_objects.py --trees . /tmp/base     # a process per tree

Per function, after eager calls and two traces warmed the caches, with the collector off: a fresh
LazyGraph's first call (trace + run), then
  kept     tracked objects the kept LazyGraph holds (new objects alive after two full collections:
           the second one untracks tuples whose items the first untracked), which young
           collections walk until they are promoted, and full collections after that;
  cycles   cyclic garbage the trace left while its graph is kept (a collection's count, less an
           eager call's), which waits for the next collection;
  dropped  cyclic garbage left when the LazyGraph is dropped (what refcounting cannot free).
"""
from __future__ import annotations

import argparse
import collections
import gc
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(args):
    sys.path.insert(0, HERE)
    from first_call_gc import _suite
    import lazytrace
    suite = _suite(args.only, 1)
    for name, fn, a, kw in suite:
        for _ in range(3):
            fn(*a, **kw)
        for _ in range(2):
            lazytrace.trace_graph(fn)(*a, **kw)
    types = collections.Counter()
    totals = [0, 0, 0]
    print(f"lazytrace from {os.path.dirname(os.path.dirname(lazytrace.__file__))}; {len(suite)} functions")
    print(f"{'function':28} {'kept':>6} {'cycles':>6} {'dropped':>7}")
    gc.disable()
    try:
        for name, fn, a, kw in suite:
            gc.collect()
            fn(*a, **kw)
            eager = gc.collect()
            before = {id(o) for o in gc.get_objects()}
            before.add(id(before))
            graph = lazytrace.trace_graph(fn)
            graph(*a, **kw)
            cycles = gc.collect() - eager
            gc.collect()
            new = [o for o in gc.get_objects() if id(o) not in before]
            types.update(type(o).__name__ for o in new)
            kept = len(new)
            del new, before
            graph = None
            dropped = gc.collect()
            totals = [totals[0] + kept, totals[1] + cycles, totals[2] + dropped]
            print(f"{name:28} {kept:6d} {cycles:6d} {dropped:7d}")
    finally:
        gc.enable()
    print(f"{'total':28} {totals[0]:6d} {totals[1]:6d} {totals[2]:7d}")
    print("kept, by type:", ", ".join(f"{k} {v}" for k, v in types.most_common(args.types)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="+", help="functions whose name contains one of these")
    p.add_argument("--types", type=int, default=16, help="types listed (most kept objects first)")
    p.add_argument("--trees", nargs="+", help="run in a process per tree (PYTHONPATH)")
    args = p.parse_args()
    if not args.trees:
        return run(args)
    rest = ["--types", str(args.types), *(["--only", *args.only] if args.only else [])]
    sys.path.insert(0, HERE)
    from first_call_gc import per_tree
    per_tree(__file__, args.trees, rest)


if __name__ == "__main__":
    main()

"""Cache-hit time of a key traced again after a guard failed (a global the function reads changed:
the key then holds two graphs) against a key holding one graph, torch and NumPy, in one run.

    .venv/bin/python benchmarks/hit_after_change.py [--repeat 21] [--number 2000]

Prints the median per-call time of each (interleaved runs) and their ratio: ~1.0 since session 20
(the graph that hits among a key's variants gets the fast path, LazyGraph._remember_variant);
2.6-2.8 before, every call taking the general path and checking the older graph first. Session 19
had reverted that fast path (249259d): a newer graph could lack a check the older one had (a user
function global patched at the trace, restored later); such globals are checked since."""
import argparse
import statistics
import timeit

import numpy as np

import lazytrace

SCALE = 2.0
GAIN = 3.0


def scaled(x):
    return x * SCALE


def gained(x):
    return x * GAIN


def hit_options(doc: str, argv=None):
    """--repeat and --number of a benchmark of cache hits on small arrays (also code_checks.py's)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--number", type=int, default=2000)
    return parser.parse_args(argv)


def small_arrays() -> dict:
    """{framework: an array of 3 ones}: NumPy, and torch where installed."""
    arrays = {"numpy": np.ones(3)}
    try:
        import torch
        arrays["torch"] = torch.ones(3)
    except ImportError:
        pass
    return arrays


def main(argv=None):
    ns, arrays = hit_options(__doc__, argv), small_arrays()
    global SCALE
    for name, x in arrays.items():
        SCALE = 2.0
        changed, single = lazytrace.trace_graph(scaled), lazytrace.trace_graph(gained)
        for _ in range(3):
            changed(x), single(x)
        SCALE = 3.0                       # a guard fails: traced again, the key now holds two graphs
        for _ in range(3):
            changed(x)
        times = {"one graph": [], "after a change": []}
        for _ in range(ns.repeat):
            times["one graph"].append(timeit.timeit(lambda: single(x), number=ns.number) / ns.number * 1e6)
            times["after a change"].append(timeit.timeit(lambda: changed(x), number=ns.number) / ns.number * 1e6)
        one, after = (statistics.median(t) for t in times.values())
        print(f"{name:6s} hit, one graph {one:6.2f} us   hit after a change {after:6.2f} us   ratio {after / one:.2f}   "
              f"(guard failures {changed.stats.guard_failures} over {changed.stats.calls} calls)")


if __name__ == "__main__":
    main()

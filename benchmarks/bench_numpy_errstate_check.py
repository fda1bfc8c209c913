"""Cache-hit cost of a NumPy graph with an integer constant, which checks np.errstate at every
call (an integer error leaves no inf/nan to mark it). A/B: run under the base and the branch:
    PYTHONPATH=<tree> python benchmarks/bench_numpy_errstate_check.py"""
import time

import numpy as np

import lazytrace


def add_index(x):
    return x + np.arange(3) * 2


def main(repeats=15, calls=20000):
    lazy = lazytrace.trace_graph(add_index)
    x = np.ones(3)
    lazy(x), lazy(x)
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time_ns()
        for _ in range(calls):
            lazy(x)
        best = min(best, (time.thread_time_ns() - start) / calls)
    print(f"hit of x + np.arange(3) * 2: {best:.0f} ns (min of {repeats} x {calls}, thread CPU)")


if __name__ == "__main__":
    main()

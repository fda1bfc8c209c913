"""kornia modules made per call vs made once, eager and through a traced library, in one run.

Code often builds a module where it uses it (`K.filters.GaussianBlur2d((5, 5), (1.5, 1.5))(x)`
inside a loop). Each object made by a traced library has its own LazyGraph of forward; an object
of the same structure as one traced before adopts that one's graph (lazytrace/graph/shared.py)
instead of tracing again. This times, per call (median of many, modes interleaved), on a float32
1x3x32x32 input: eager kornia and `trace_graph(kornia)`, with the module made at every call and
made once; it prints the ratios and the traced library's stats. `make` columns: making the object
alone (eager) and making it with its forward bound (traced: the LazyGraph installed); what a
traced object made per call costs beyond its make and a cached call is its first call's miss
(signature key, structure described, a template adopted).

    python benchmarks/bench_module_per_call.py [--size 32] [--rounds 15] [--calls 20] [--breakdown]

`--breakdown` then times, per module, the stages of binding and of the first call of objects made
in advance (thread CPU time, medians; each stage wrapped, so the stages add ~1 us each), and
counts the container objects an object made and called leaves to the cyclic garbage collector.
"""
import argparse
import collections
import contextlib
import gc
import statistics
import time

import torch
import kornia

import lazytrace

MODULES = {
    "GaussianBlur2d((5, 5), (1.5, 1.5))": lambda k: k.filters.GaussianBlur2d((5, 5), (1.5, 1.5)),
    "BoxBlur((3, 3))": lambda k: k.filters.BoxBlur((3, 3)),
    "Sobel()": lambda k: k.filters.Sobel(),
    "Normalize(mean, std)": lambda k: k.enhance.Normalize(torch.tensor([0.5, 0.4, 0.3]), torch.tensor([0.2, 0.2, 0.2])),
    "RgbToHsv()": lambda k: k.color.RgbToHsv(),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    parser.add_argument("--calls", type=int, default=20, help="calls per mode per round (default 20)")
    parser.add_argument("--breakdown", action="store_true", help="also time the stages of a new object's first call")
    ns = parser.parse_args()
    torch.set_num_threads(1)
    x = torch.rand(1, 3, ns.size, ns.size)
    traced = lazytrace.trace_graph(kornia)
    print(f"torch {torch.__version__}, kornia {kornia.__version__}; 1x3x{ns.size}x{ns.size} float32, 1 thread; "
          f"us per call, median of {ns.rounds} rounds x {ns.calls} calls, modes interleaved")
    print(f"{'module':38} {'eager/call':>10} {'traced/call':>11} {'ratio':>6} {'eager once':>10} {'traced once':>11} "
          f"{'ratio':>6} {'eager make':>10} {'traced make':>11} {'1st call miss':>13}  a new traced object's first call")
    for label, make in MODULES.items():
        once = {"eager": make(kornia), "traced": make(traced)}
        modes = {"eager/call": lambda: make(kornia)(x), "traced/call": lambda: make(traced)(x),
                 "eager once": lambda: once["eager"](x), "traced once": lambda: once["traced"](x),
                 "eager make": lambda: make(kornia), "traced make": lambda: make(traced).forward}
        for f in modes.values():
            f(), f()
        times = {m: [] for m in modes}
        for _ in range(ns.rounds):
            for m, f in modes.items():
                for _ in range(ns.calls):
                    t0 = time.perf_counter_ns()
                    f()
                    times[m].append(time.perf_counter_ns() - t0)
        med = {m: statistics.median(v) / 1e3 for m, v in times.items()}
        fresh = make(traced)             # one more object, as made per call: does it trace or share?
        fresh(x)
        stats = fresh.forward.stats
        print(f"{label:38} {med['eager/call']:10.1f} {med['traced/call']:11.1f} "
              f"{med['eager/call'] / med['traced/call']:6.2f} {med['eager once']:10.1f} {med['traced once']:11.1f} "
              f"{med['eager once'] / med['traced once']:6.2f} {med['eager make']:10.1f} {med['traced make']:11.1f} "
              f"{med['traced/call'] - med['traced make'] - med['traced once']:13.1f}  traces={stats.traces} shared={stats.shared} "
              f"hits={stats.hits}")
    print("ratio = eager / traced (above 1: the traced library is faster)")
    if ns.breakdown:
        for label, make in MODULES.items():
            breakdown(label, make, traced, x)


#: (owner, method, label) of the stages --breakdown times
def _stages():
    from lazytrace.backends.torch import ModuleLiveInputs
    from lazytrace.graph.lazy import LazyGraph
    from lazytrace.graph.shared import SharedGraphs, Template
    from lazytrace.importhook.proxy import TracedLibrary
    return [(TracedLibrary, "bind", "bind (first read of .forward)"), (LazyGraph, "__call__", "  LazyGraph.__call__"),
            (ModuleLiveInputs, "__call__", "    the module key"), (LazyGraph, "_miss", "    miss"),
            (SharedGraphs, "describe", "      structure (shareable)"), (LazyGraph, "_adopt", "      adopt"),
            (SharedGraphs, "candidates", "        templates"), (Template, "graph", "        Graph for the object"),
            (LazyGraph, "_store", "        store")]


@contextlib.contextmanager
def _timed(stages, times):
    saved = [(owner, name, vars(owner)[name]) for owner, name, _ in stages]
    for owner, name, label in stages:
        f = vars(owner)[name]
        static = isinstance(f, staticmethod)

        def timed(*a, _f=f.__func__ if static else f, _label=label, **k):
            t0 = time.thread_time_ns()
            try:
                return _f(*a, **k)
            finally:
                times[_label].append(time.thread_time_ns() - t0)
        setattr(owner, name, staticmethod(timed) if static else timed)
    try:
        yield
    finally:
        for owner, name, f in saved:
            setattr(owner, name, f)


def breakdown(label, make, traced, x, n=400):
    stages = _stages()
    times = collections.defaultdict(list)
    objects = [make(traced) for _ in range(n)]
    with _timed(stages, times):
        for o in objects:
            o.forward
        for o in objects:
            t0 = time.thread_time_ns()
            o(x)
            times["first call: Module.__call__"].append(time.thread_time_ns() - t0)
    hit, key = [], []
    for _ in range(n):
        t0 = time.thread_time_ns()
        objects[0](x)
        hit.append(time.thread_time_ns() - t0)
        t0 = time.thread_time_ns()
        objects[0].forward._extra()
        key.append(time.thread_time_ns() - t0)
    del objects
    gc.collect()
    before = gc.get_count()[0]
    make(traced)(x)
    left = gc.get_count()[0] - before
    print(f"{label}: us (thread CPU time, medians of {n} objects); containers left to the cyclic GC per object: {left}")
    order = [stages[0][2], "first call: Module.__call__"] + [stage for _, _, stage in stages[1:]]
    for stage in order:
        print(f"  {stage:40} {statistics.median(times[stage]) / 1e3:8.1f}")
    print(f"  {'a hit: Module.__call__':40} {statistics.median(hit) / 1e3:8.1f}")
    print(f"  {'a hit: the module key':40} {statistics.median(key) / 1e3:8.1f}")


if __name__ == "__main__":
    main()

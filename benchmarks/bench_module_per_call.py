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

    python benchmarks/bench_module_per_call.py [--size 32] [--rounds 15] [--calls 20]
"""
import argparse
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


if __name__ == "__main__":
    main()

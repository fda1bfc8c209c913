"""Whole-library tracing costs, measured in one run (medians; these machines are noisy):

1. whole-process `import kornia` with `lazytrace.enable("kornia")` vs without (target <= 1.05x):
   fresh interpreters, run alternately; both import lazytrace first, so the ratio is the hook's.
2. `lazytrace.trace_graph(kornia)`: time to make the proxy (does not grow with kornia).
3. per-call cost of a traced function reached through a proxy (`traced.color.rgb_to_grayscale(x)`,
   attribute reads included), of the LazyGraph an import under enable() hands out, and of a
   LazyGraph made directly with trace_graph(fn) (target: equal within noise).

    .venv/bin/python benchmarks/bench_import.py [--runs 15] [--quick]
"""
from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
import timeit

CHILD = """
import time
{setup}
t, c = time.perf_counter(), time.process_time()
import kornia
print(time.perf_counter() - t, time.process_time() - c)
"""


def import_times(runs: int) -> dict[str, list[float]]:
    """Seconds for `import kornia` in fresh processes: wall and CPU time of the import statement,
    wall and CPU (user + system) time of the whole process. CPU times are less sensitive to
    other load on the machine."""
    modes = {"bare": "", "plain": "import lazytrace", "enable": "import lazytrace; lazytrace.enable('kornia')"}
    out = {f"{mode}/{what}": [] for mode in modes for what in ("import", "import-cpu", "process", "process-cpu")}
    for _ in range(runs):
        for mode, enable in modes.items():
            start, usage = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
            proc = subprocess.run([sys.executable, "-c", CHILD.format(setup=enable)], check=True,
                                  capture_output=True, text=True)
            out[f"{mode}/process"].append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            out[f"{mode}/process-cpu"].append(after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime)
            wall, cpu = proc.stdout.split()[-2:]
            out[f"{mode}/import"].append(float(wall))
            out[f"{mode}/import-cpu"].append(float(cpu))
    return out


def per_call_us(fns: dict, args: tuple, repeat: int, budget_s: float) -> dict[str, float]:
    """Median microseconds per call of each callable, the callables timed in interleaved rounds
    of about `budget_s` seconds each."""
    samples = {name: [] for name in fns}
    for fn in fns.values():
        fn(*args), fn(*args)                 # trace, then the first replay
    once = timeit.timeit(lambda: fns["direct"](*args), number=5) / 5
    number = max(3, int(budget_s / once))
    for _ in range(repeat):
        for name, fn in fns.items():
            samples[name].append(timeit.timeit(lambda: fn(*args), number=number) / number * 1e6)
    return {name: statistics.median(v) for name, v in samples.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15, help="fresh processes per import mode")
    parser.add_argument("--quick", action="store_true", help="fewer runs and calls (smoke test)")
    opts = parser.parse_args()
    runs, repeat, budget = (3, 5, 0.005) if opts.quick else (opts.runs, 31, 0.02)

    times = import_times(runs)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"import kornia, {runs} fresh processes per mode, run in turn (median seconds; 'bare' does not "
          f"import lazytrace, 'plain' does, 'enable' also calls enable('kornia')):")
    for what in ("import", "import-cpu", "process", "process-cpu"):
        print(f"  {what:11s} bare {med[f'bare/{what}']:.3f}  plain {med[f'plain/{what}']:.3f}  "
              f"enable {med[f'enable/{what}']:.3f}  enable/plain {med[f'enable/{what}'] / med[f'plain/{what}']:.3f}x"
              f"  enable/bare {med[f'enable/{what}'] / med[f'bare/{what}']:.3f}x  (target <= 1.05x)")

    import torch
    import kornia
    import lazytrace
    made = []
    seconds = timeit.repeat(lambda: made.append(lazytrace.trace_graph(kornia)), number=1, repeat=200)
    print(f"trace_graph(kornia): median {statistics.median(seconds) * 1e6:.1f} us "
          f"(objects made: {len(made[-1]._self_library._made)}, i.e. the root proxy only)")

    lookup = {name: statistics.median(timeit.repeat(stmt, number=100000, repeat=15, globals={
        "traced": lazytrace.trace_graph(kornia), "kornia": kornia})) * 1e4 for name, stmt in
        (("proxy", "traced.color.rgb_to_grayscale"), ("module", "kornia.color.rgb_to_grayscale"))}
    print(f"attribute lookup, median ns: traced.color.rgb_to_grayscale {lookup['proxy']:.0f}, "
          f"kornia.color.rgb_to_grayscale {lookup['module']:.0f} (first access excluded)")

    torch.set_num_threads(1)                  # per-call overhead: keep intra-op threads out of it
    x = torch.rand(1, 3, 32, 32)
    traced = lazytrace.trace_graph(kornia)
    with lazytrace.enable("kornia"):
        from kornia.color import rgb_to_grayscale
        from kornia.filters import gaussian_blur2d
        from kornia.geometry.transform import hflip
    direct = {name: lazytrace.trace_graph(fn) for name, fn in
              (("rgb_to_grayscale", kornia.color.rgb_to_grayscale), ("gaussian_blur2d", kornia.filters.gaussian_blur2d),
               ("hflip", kornia.geometry.transform.hflip))}
    # every callable has the same shape (one lambda around the call), so only the lookup differs
    cases = {
        "rgb_to_grayscale": ((x,), {"direct": lambda *a: direct["rgb_to_grayscale"](*a),
                                    "proxy": lambda *a: traced.color.rgb_to_grayscale(*a),
                                    "enable": lambda *a: rgb_to_grayscale(*a)}),
        "gaussian_blur2d": ((x, (5, 5), (1.5, 1.5)), {"direct": lambda *a: direct["gaussian_blur2d"](*a),
                                                      "proxy": lambda *a: traced.filters.gaussian_blur2d(*a),
                                                      "enable": lambda *a: gaussian_blur2d(*a)}),
        "hflip": ((x,), {"direct": lambda *a: direct["hflip"](*a),
                         "proxy": lambda *a: traced.geometry.transform.hflip(*a),
                         "enable": lambda *a: hflip(*a)}),
    }
    print(f"per call, 1x3x32x32, 1 torch thread, median us of {repeat} interleaved rounds:")
    print(f"  {'function':18s} {'direct':>8s} {'proxy.attr':>10s} {'enable':>8s} {'proxy/direct':>12s}"
          f" {'enable/direct':>13s}")
    for name, (args, fns) in cases.items():
        us = per_call_us(fns, args, repeat, budget)
        print(f"  {name:18s} {us['direct']:8.2f} {us['proxy']:10.2f} {us['enable']:8.2f}"
              f" {us['proxy'] / us['direct']:12.3f} {us['enable'] / us['direct']:13.3f}")

if __name__ == "__main__":
    main()

"""Would a compiled tier help? For op-heavy kornia functions at 1x3x32x32, in one run: eager,
LazyGraph (Python replay), torch.compile of the kornia function, and LazyGraph with
return_backend_traced_fn=True (torch.compile of the simplified graph), plus compile times.

    python benchmarks/bench_compile_tier.py
"""
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import lazytrace  # noqa: E402
from kornia_cases import CASES  # noqa: E402

NAMES = ["color.rgb_to_hsv", "color.rgb_to_hls", "color.rgb_to_lab", "color.rgb_to_luv", "enhance.adjust_hue",
         "enhance.equalize", "filters.sobel", "morphology.dilation", "filters.gaussian_blur2d",
         "enhance.adjust_brightness"]


def median_us(fn, args, seconds=0.3):
    for _ in range(5):
        fn(*args)
    samples, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(samples) < 50:
        start = time.perf_counter_ns()
        fn(*args)
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000


def first_s(fn, args):
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def main():
    torch._dynamo.config.cache_size_limit = 64
    cases = {name: (fn, make) for name, fn, make in CASES}
    torch.compile(lambda x: x + 1)(torch.ones(2))            # inductor start-up, not counted
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; us per call (median), compile s")
    print(f"{'function':30} {'eager':>8} {'lazy':>8} {'compile':>8} {'lazy+compile':>12} {'compile s':>9} "
          f"{'lazy+c s':>8}")
    rows = []
    for name in NAMES:
        fn, make = cases[name]
        args = make(0)
        lazy = lazytrace.trace_graph(fn)
        compiled = torch.compile(fn)
        tier = lazytrace.trace_graph(fn, return_backend_traced_fn=True)
        tier(*args)                                            # trace (python)
        c_first, t_first = first_s(compiled, args), first_s(tier, args)   # compile happens here
        assert torch.allclose(tier(*args), fn(*args), atol=1e-5)
        row = [median_us(f, args) for f in (fn, lazy, compiled, tier)]
        rows.append(row)
        print(f"{name:30} {row[0]:8.1f} {row[1]:8.1f} {row[2]:8.1f} {row[3]:12.1f} {c_first:9.1f} {t_first:8.1f}")
    geo = [statistics.geometric_mean([r[0] / r[i] for r in rows]) for i in (1, 2, 3)]
    best = statistics.geometric_mean([r[0] / min(r[1], r[3]) for r in rows])
    print(f"\ngeomean speedup over eager: lazy {geo[0]:.2f}x, torch.compile {geo[1]:.2f}x, "
          f"lazy+compile {geo[2]:.2f}x, best of lazy and lazy+compile per function {best:.2f}x")


if __name__ == "__main__":
    main()

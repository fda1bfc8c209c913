"""First calls of fresh LazyGraphs over bench_kornia's 48-function suite at 1x3x32x32, in thread CPU
time (time.thread_time: what this thread ran, not the time it waited for a shared core): min of 3
fresh LazyGraphs of each function against min of 7 eager calls. Prints each function and a summary;
`--json PATH` also writes {name: [eager_us, first_us, cold_us]} (cold: the first of the 3).

A/B of two trees in one quiet window (what session 9 did):
    for i in 1 2; do PYTHONPATH=<old tree> .venv/bin/python benchmarks/first_call_cpu.py
                     PYTHONPATH=<new tree> .venv/bin/python benchmarks/first_call_cpu.py; done
"""
import argparse
import json
import math
import os
import statistics
import sys
import time
import warnings

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--json", help="also write the raw figures here")
options = parser.parse_args()

sys.argv = [sys.argv[0], "--sizes", "32", "--no-compile"]       # (bench_kornia parses its own at import)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import bench_kornia  # noqa: E402
import lazytrace  # noqa: E402

warnings.simplefilter("ignore")
x = torch.rand(1, 3, 32, 32)
lazytrace.trace_graph(lambda t: t + 1)(x)       # lazytrace's one-time set-up, not any function's
out = {}
for name, fn, build in bench_kornia._suite():
    args, kwargs = build(x, 32)
    for _ in range(3):
        fn(*args, **kwargs)
    eager, first = [], []
    for _ in range(7):
        t = time.thread_time()
        fn(*args, **kwargs)
        eager.append(time.thread_time() - t)
    for _ in range(3):
        lazy = lazytrace.trace_graph(fn)
        t = time.thread_time()
        lazy(*args, **kwargs)
        first.append(time.thread_time() - t)
    # min of the 3: lazytrace may keep what a trace of this function object learned (graph/reads.py
    # remembers its static walk), so the 2nd and 3rd are later traces of the function; the first
    # of the 3 is the process's first trace of it (cold)
    out[name] = [min(eager) * 1e6, min(first) * 1e6, first[0] * 1e6]
    print(f"{name:32s} eager {out[name][0]:9.1f} us  first {out[name][1]:9.1f} us  "
          f"{out[name][1] / out[name][0]:6.1f}x  cold {out[name][2]:9.1f} us {out[name][2] / out[name][0]:6.1f}x")


def geomean(ratios):
    return math.exp(sum(map(math.log, ratios)) / len(ratios))


print(f"lazytrace {lazytrace.__file__}: geomean first/eager {geomean([f / e for e, f, _ in out.values()]):.1f}x "
      f"(cold {geomean([c / e for e, _, c in out.values()]):.1f}x), median trace cost "
      f"{statistics.median(f - e for e, f, _ in out.values()) / 1e3:.2f} ms "
      f"(cold {statistics.median(c - e for e, _, c in out.values()) / 1e3:.2f} ms) (thread CPU)")
if options.json:
    with open(options.json, "w") as f:
        json.dump(out, f)

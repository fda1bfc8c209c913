"""What of a first call (the trace) is the interception, and what is lazytrace's recording, over
bench_kornia's 48-function suite at 1x3x32x32, in thread CPU time (time.thread_time).

Per function: eager (min of 7 calls); `mode`: eager under a TorchFunctionMode whose handler only
calls through (min of 7: the floor of any tracer built on torch's function modes, the mechanism
lazytrace uses); `log`: one that also keeps each call, its arguments, result, calling frame and
the version counters of its tensor arguments (what a trace must take while the function runs;
the rest could be worked out after it returns); `first`: a fresh LazyGraph's first call (min of
3); the intercepted calls; and lazytrace's own cost per intercepted call, (first - mode) / calls.
The first call's 5x target (issue 2) leaves 5 x eager - mode for recording: the last column says
how many us per call that is.

    .venv/bin/python benchmarks/first_call_floor.py [--json PATH]
"""
import argparse
import json
import math
import os
import pathlib
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
from torch.overrides import TorchFunctionMode  # noqa: E402

import bench_kornia  # noqa: E402
import lazytrace  # noqa: E402


class PassThrough(TorchFunctionMode):
    """The least a function-mode tracer does: be called for each call, and call it."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


class Log(PassThrough):
    """What a trace must take at each call while the function runs, and nothing more."""

    def __init__(self):
        super().__init__()
        self.log = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        versions = [(a, a._version) for a in args if type(a) is torch.Tensor]
        out = super().__torch_function__(func, types, args, kwargs)
        self.log.append((func, args, kwargs, out, versions, sys._getframe(1)))
        return out


def cpu_min(call, times):
    best = math.inf
    for _ in range(times):
        t = time.thread_time()
        call()
        best = min(best, time.thread_time() - t)
    return best * 1e6


warnings.simplefilter("ignore")
x = torch.rand(1, 3, 32, 32)
lazytrace.trace_graph(lambda t: t + 1)(x)       # lazytrace's one-time set-up, not any function's
out = {}
print(f"{'function':32s} {'eager':>8s} {'mode':>8s} {'log':>8s} {'first':>9s} {'calls':>6s} {'mode/e':>7s} "
      f"{'first/e':>8s} {'us/call':>8s} {'5x left':>8s}")
for name, fn, build in bench_kornia._suite():
    args, kwargs = build(x, 32)
    for _ in range(3):
        fn(*args, **kwargs)
    eager = cpu_min(lambda: fn(*args, **kwargs), 7)

    def under(mode):
        with mode:
            fn(*args, **kwargs)
        return mode
    calls = under(PassThrough()).calls
    floor = cpu_min(lambda: under(PassThrough()), 7)
    logged = cpu_min(lambda: under(Log()), 7)
    first = cpu_min(lambda: lazytrace.trace_graph(fn)(*args, **kwargs), 3)
    out[name] = [eager, floor, first, calls, logged]
    print(f"{name:32s} {eager:8.1f} {floor:8.1f} {logged:8.1f} {first:9.1f} {calls:6d} {floor / eager:7.2f} "
          f"{first / eager:8.1f} {(first - floor) / calls:8.1f} {(5 * eager - floor) / calls:8.1f}")


geomean = bench_kornia._geomean
rows = out.values()
print(f"lazytrace {lazytrace.__file__} (thread CPU): geomean mode/eager {geomean([m / e for e, m, *_ in rows]):.2f}x, "
      f"log/eager {geomean([g / e for e, *_, g in rows]):.2f}x, first/eager {geomean([f / e for e, _, f, *_ in rows]):.1f}x, "
      f"first/mode {geomean([f / m for _, m, f, *_ in rows]):.1f}x; median us per intercepted call: lazytrace "
      f"{statistics.median((f - m) / c for _, m, f, c, _ in rows):.1f}, log {statistics.median((g - m) / c for _, m, _, c, g in rows):.1f}, "
      f"what the 5x target leaves {statistics.median((5 * e - m) / c for e, m, _, c, _ in rows):.1f}")
if options.json:
    pathlib.Path(options.json).write_text(json.dumps(out))

#!/usr/bin/env python
"""Would TorchScript run lazytrace's graphs faster than their generated Python? (measured, not used)

    python benchmarks/bench_torchscript.py                 # bench_kornia's suite at 32x32, ~2 min
    python benchmarks/bench_torchscript.py --only morphology color.rgb_to_hsv

For each function of bench_kornia.py's suite on a float32 1x3x32x32 input: the graph's generated
function (`graph.fn`, what a LazyGraph hit runs) and `torch.jit.trace` of it, run by TorchScript's
interpreter with the executor's optimizations on (the default) and off (`optimized_execution(False)`:
the graph as traced). Each is checked bit for bit against the generated function on a second input
of the same signature, and timed against eager kornia (medians, modes interleaved in blocks as in
bench_kornia.py). Graphs with guards of their own (values read back), random draws, state changes or visible
writes are skipped, as the compiled tier skips them: a TorchScript trace would bake values in.

Why this is a measurement and not a tier: TorchScript's interpreter saves the Python call of each op
(morphology ~2x over the generated function) but costs more per call (single-op graphs 2 us slower),
and torch 2.13's `torch.jit.trace` warns that it is deprecated ("switch to torch.compile or
torch.export"; "not supported in Python 3.14+").
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import warnings

_p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
_p.add_argument("--size", type=int, default=32)
_p.add_argument("--only", nargs="+", default=None, help="functions whose name contains one of these")
_p.add_argument("--calls", type=int, default=300, help="timed calls per mode and function")
ARGS = _p.parse_args()
sys.argv[1:] = ["--no-compile"]                 # bench_kornia parses its own arguments on import
import bench_kornia as bk  # noqa: E402

torch = bk.torch
warnings.filterwarnings("ignore", message=".*torch.jit.trace.*")
from lazytrace.graph.ir import Kind, Source  # noqa: E402
#: nodes a TorchScript trace would replay wrongly: random draws, state, attributes (and guards on
#: the call's arrays, which it would bake in; a guard on what globals hold would stay Python's)
_NOT_TRACEABLE = (Kind.GENERATOR, Kind.STATE, Kind.SETATTR, Kind.GETATTR)


def _script(gfn, leaves):
    def graph(*arrays):                     # TorchScript names what it traces by its __module__
        return gfn(*arrays)
    with torch.no_grad():
        return torch.jit.trace(graph, leaves, check_trace=False, strict=False)


def _unoptimized(script):
    def run(*arrays):
        with torch.jit.optimized_execution(False):
            return script(*arrays)
    return run


def _identical(a, b) -> bool:
    la, lb = bk.tree_flatten(a)[0], bk.tree_flatten(b)[0]
    return len(la) == len(lb) and all(
        x.shape == y.shape and x.dtype == y.dtype and x.stride() == y.stride() and torch.equal(x.nan_to_num(), y.nan_to_num())
        if isinstance(x, torch.Tensor) else x == y for x, y in zip(la, lb))


def main():
    rows, skipped = [], []
    size = ARGS.size
    for name, fn, build in bk._suite():
        if ARGS.only and not any(o in name for o in ARGS.only):
            continue
        torch.manual_seed(0)
        args, kwargs = build(torch.rand(1, 3, size, size), size)
        graph = bk.lazytrace.trace_graph(fn, args=args, kwargs=kwargs)
        plan = graph._plan           # what the compiled tier (TorchBackend.compile) also asks
        if plan.visible_effects or any(n.kind in _NOT_TRACEABLE or n.kind is Kind.GUARD and any(
                v.source is not Source.EXTERNAL for v in n.inputs) for n in plan.nodes):
            skipped.append(name)
            continue
        gfn, leaves = bk._graph_fn(graph), tuple(bk._leaves(args, kwargs))
        script = _script(gfn, leaves)
        plain = _unoptimized(script)
        for _ in range(3):                  # the profiling executor optimizes after two runs
            script(*leaves), plain(*leaves)
        args2, kwargs2 = build(torch.rand(1, 3, size, size), size)
        leaves2 = tuple(bk._leaves(args2, kwargs2))
        want = gfn(*leaves2)
        same = _identical(want, script(*leaves2)) and _identical(want, plain(*leaves2))
        modes = {"eager": (fn, args, kwargs), "direct": (gfn, leaves, {}), "ts": (script, leaves, {}),
                 "ts_plain": (plain, leaves, {})}
        med = {k: v["median"] / 1e3 for k, v in bk._interleaved(modes, ARGS.calls, 10).items()}
        rows.append((name, med, same))
        e = med["eager"]
        print(f"{name:28} eager {e:8.1f}  direct {med['direct']:8.1f}  torchscript {med['ts']:8.1f}  "
              f"unoptimized {med['ts_plain']:8.1f}  eager/direct {e / med['direct']:5.2f}  eager/ts "
              f"{e / med['ts']:5.2f}  eager/ts_plain {e / med['ts_plain']:5.2f}  bit-identical {same}", flush=True)

    def geomean(values):
        values = list(values)
        return math.exp(sum(map(math.log, values)) / len(values))
    print(f"\n{len(rows)} functions (skipped: {', '.join(skipped) or 'none'}); geomean speedup over eager kornia:")
    for label, key in [("generated Python (direct)", "direct"), ("TorchScript", "ts"), ("TorchScript unoptimized", "ts_plain")]:
        print(f"  {label:32} {geomean(r[1]['eager'] / r[1][key] for r in rows):.2f}x")
    best = geomean(r[1]["eager"] / min(r[1]["direct"], r[1]["ts"]) for r in rows)
    print(f"  {'faster of Python and TorchScript':32} {best:.2f}x")
    print(f"  TorchScript over Python, median per function: "
          f"{statistics.median(r[1]['direct'] / r[1]['ts'] for r in rows):.2f}x; all bit-identical: "
          f"{all(r[2] for r in rows)}")


if __name__ == "__main__":
    main()

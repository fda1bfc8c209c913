#!/usr/bin/env python
"""Python bytecodes executed by a first call (the trace) against one eager call, per function.

    python benchmarks/first_call_bytecodes.py --frameworks jax tensorflow
    python benchmarks/first_call_bytecodes.py --frameworks tensorflow --top 30 --only swish
    python benchmarks/first_call_bytecodes.py --frameworks torch --cold

A deterministic measure of the trace's Python work (sys.settrace opcode events), for comparing
two versions on a machine too loaded for timings to show a 10% change. C and C++ work (the
framework's kernels and dispatch, NumPy's getters) is not counted: timings (bench_frameworks.py)
stay the measure of speed. The functions and the input are bench_frameworks.py's; a first call
is a fresh LazyGraph's, after eager calls and two earlier traces warmed every cache.
"""
from __future__ import annotations

import argparse
import collections
import sys
import types

import bench_frameworks as bf

import lazytrace


def bytecodes(call, done, per_code=None) -> int:
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        frame.f_trace_opcodes = True
        if event == "opcode":
            count += 1
            if per_code is not None:
                per_code[frame.f_code.co_filename.rpartition("site-packages/")[2], frame.f_code.co_qualname] += 1
        return tracer

    sys.settrace(tracer)
    try:
        done(call())
    finally:
        sys.settrace(None)
    return count


def fresh(fn):
    """A new function object running `fn`'s code (same globals, defaults and closure)."""
    new = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    return new


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frameworks", nargs="+", default=["torch", "numpy", "jax", "tensorflow"])
    p.add_argument("--only", nargs="*", help="function names (default: all)")
    p.add_argument("--top", type=int, default=0, help="also list the N functions executing most bytecodes")
    p.add_argument("--cold", action="store_true",
                   help="trace a new function object (the same code, globals and closure) in the counted call: "
                        "nothing lazytrace keeps per function object (its remembered static walk) is reused")
    args = p.parse_args()
    for name in args.frameworks:
        x, done = bf.make_input(name), bf.sync(name)
        print(f"\n## {name}: Python bytecodes, first call (trace) / eager call")
        for fname, fn in {"identity": lambda a: a, **bf.functions(name)}.items():
            if args.only and fname not in args.only:
                continue
            for _ in range(3):
                done(fn(x))
            for _ in range(2):
                done(lazytrace.trace_graph(fn)(x))
            per_code = collections.Counter() if args.top else None
            eager = bytecodes(lambda: fn(x), done)
            traced = fresh(fn) if args.cold else fn
            first = bytecodes(lambda: lazytrace.trace_graph(traced)(x), done, per_code)
            print(f"{fname:10} eager {eager:7d}  first call {first:7d}  ratio {first / max(eager, 1):7.1f}")
            for (path, qualname), n in (per_code.most_common(args.top) if per_code else ()):
                print(f"    {n:6d} {path}:{qualname}")


if __name__ == "__main__":
    main()

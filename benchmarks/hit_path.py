#!/usr/bin/env python
"""What a cache hit of a LazyGraph costs, piece by piece.

    python benchmarks/hit_path.py                          # this checkout
    python benchmarks/hit_path.py --against ../base        # A/B: another checkout's lazytrace, same run

For each function (one float32 1x3xHxW image in [0, 1], plus the suite's fixed arguments), the
modes below are timed in the same rounds, interleaved (medians over rounds, nanoseconds per call):

  eager     the kornia function
  direct    the graph's generated function called on the call's array leaves
  lazy      the LazyGraph call (a cache hit)
  check     the compiled check of the hit path alone (its graph call replaced by a no-op)
  call      the LazyGraph call with that no-op check: LazyGraph.__call__ + check
  cond[i]   each condition of the check, alone, less a function doing only the unpacking

`warm`: calls back to back. `cold`: before each timed call, --flush-mib MiB are written (untimed):
1 MiB leaves the CPU's L2 cache as a 512x512 image op leaves it, 6 MiB (what such an op reads and
writes) also much of a shared L3: what the hit path's code and data cost when they have to come
from L3 or from memory (why lazy - direct grows with the image size).

With --against, this script runs itself in subprocesses, alternating this checkout and the
other one (PYTHONPATH) for --runs rounds, and prints the medians of both side by side.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import types

FUNCTIONS = ["enhance.invert", "geometry.hflip", "enhance.adjust_brightness", "enhance.normalize"]


def _parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="+", default=FUNCTIONS, help=f"kornia functions (default: {' '.join(FUNCTIONS)})")
    p.add_argument("--size", type=int, default=32, help="H=W of the image (default 32)")
    p.add_argument("--rounds", type=int, default=25, help="interleaved rounds per process (default 25)")
    p.add_argument("--against", metavar="PATH", default=None,
                   help="a checkout of lazytrace to compare with (its directory goes first on PYTHONPATH)")
    p.add_argument("--runs", type=int, default=4, help="with --against: processes per side, alternating (default 4)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--flush-mib", type=float, default=1.0,
                   help="MiB written before each cold call (default 1: L2; 6: what a 512x512 op streams)")
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)     # child mode: medians as JSON
    return p.parse_args(argv)


def _split_conditions(test: str) -> list[str]:
    """The top-level ` and `-joined conditions of a check's `if not (...)` test."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(test):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0 and test.startswith(" and ", i):
            parts.append(test[start:i])
            start = i + 5
    return parts + [test[start:]]


def _pieces(check) -> tuple[str, str]:
    """The lines before the test of a compiled check (guards.compile_dispatch's source: argument
    count, unpacking), and its test."""
    lines = check.source.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("    if not ("))
    return "\n".join(lines[1:at]), lines[at][len("    if not ("):-len("):")]


def _name(obj) -> str:
    """A short readable name of a constant of a check (k<n> in its source)."""
    import re
    owner = getattr(obj, "__self__", None)
    if callable(obj) and owner is not None and not isinstance(owner, types.ModuleType):
        return f"{type(owner).__name__}.{obj.__name__}"
    if isinstance(obj, types.ModuleType):
        return obj.__name__.rsplit(".", 1)[-1]
    if isinstance(obj, types.CodeType):
        return "code"
    if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
        return obj.__name__
    if isinstance(obj, dict):
        return "dict"
    text = repr(obj)
    return text if len(text) < 16 and not re.search(r"\s", text) else type(obj).__name__


def _label(condition: str, namespace: dict) -> str:
    import re
    return re.sub(r"\b_?k\d+\b", lambda m: _name(namespace[m.group()]), condition)


def _function(namespace, prologue: str, body: str):
    source = f"def f(args, kwargs):\n{prologue}\n    return {body}\n"
    ns = dict(namespace)
    exec(compile(source, "<hit_path>", "exec"), ns)
    return ns["f"]


def measure(opts) -> dict:
    import torch
    import kornia
    import lazytrace

    torch.set_num_threads(opts.threads)
    fixed = {"enhance.adjust_brightness": lambda: (0.2,),
             "enhance.normalize": lambda: (torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225]))}
    flush = torch.empty(int(opts.flush_mib * 2 ** 20) // 4)
    out = {}
    for name in opts.only:
        fn = kornia
        for part in name.split("."):
            fn = getattr(fn, part)
        args = (torch.rand(1, 3, opts.size, opts.size), *fixed.get(name, tuple)())
        lazy = lazytrace.trace_graph(fn)
        lazy(*args), lazy(*args)
        if lazy._fast is None:
            out[name] = {"error": "no compiled check"}
            continue
        check, graph = lazy._fast
        leaves = [a for a in args if isinstance(a, torch.Tensor)]
        gfn = graph.fn
        prologue, test = _pieces(check)
        conditions = _split_conditions(test)
        # the check, then nothing (whether the graph is called from it or inlined into it)
        noop_check = _function(check.__globals__, f"{prologue}\n    if not ({test}):\n        return MISS", "None")
        call = lazytrace.trace_graph(fn)
        call(*args), call(*args)
        call._fast = (noop_check, call._fast[1])
        kw = {}
        modes = {"eager": lambda: fn(*args), "direct": lambda: gfn(*leaves), "lazy": lambda: lazy(*args),
                 "check": lambda: noop_check(args, kw), "call": lambda: call(*args)}
        unpack = _function(check.__globals__, prologue, "True")
        modes["unpack"] = lambda: unpack(args, kw)
        for i, cond in enumerate(conditions):
            f = _function(check.__globals__, prologue, cond)
            assert f(args, kw) is not False, cond
            modes[f"cond{i}"] = lambda f=f: f(args, kw)
        modes["nothing"] = lambda: None
        warm = {m: [] for m in modes}
        cold = {m: [] for m in modes}
        pc = time.perf_counter_ns
        for _ in range(opts.rounds):
            for m, f in modes.items():
                n = 400
                t = pc()
                for _ in range(n):
                    f()
                warm[m].append((pc() - t) / n)
                samples = []
                for i in range(40):
                    flush.fill_(i)
                    t = pc()
                    f()
                    samples.append(pc() - t)
                cold[m].append(statistics.median(samples))
        out[name] = {"conditions": [_label(c, check.__globals__) for c in conditions],
                     "warm": {m: statistics.median(v) for m, v in warm.items()},
                     "cold": {m: statistics.median(v) for m, v in cold.items()}}
    return out


def _derived(t: dict, conditions: list) -> list[tuple[str, float]]:
    """(label, ns) rows of one function's breakdown, the timing of doing nothing taken off."""
    z = t["nothing"]
    rows = [(m, t[m] - z) for m in ("eager", "direct", "lazy", "call", "check")]
    rows.append(("  lazy - direct (hit overhead)", t["lazy"] - t["direct"]))
    rows.append(("  LazyGraph.__call__ (call - check)", t["call"] - t["check"]))
    rows.append(("  check: call + unpacking", t["unpack"] - z))
    for i, cond in enumerate(conditions):
        rows.append((f"  check: {cond[:56]}", t[f"cond{i}"] - t["unpack"]))
    rows.append(("  lazy / direct", t["lazy"] / max(t["direct"], 1e-9)))
    return rows


def report(results: dict, labels: list[str]) -> None:
    names = [n for n in results[0] if "error" not in results[0][n]]
    for name in names:
        conditions = [r[name]["conditions"] for r in results]
        for temp in ("warm", "cold"):
            print(f"\n{name} ({temp}; ns per call, a ratio for lazy / direct)")
            rows = [dict(_derived(r[name][temp], c)) for r, c in zip(results, conditions)]
            order = list(dict.fromkeys(label for r in rows for label in r))
            order.append(order.pop(order.index("  lazy / direct")))
            width = max(map(len, order))
            print(f"  {'':{width}s}" + "".join(f"{label:>10s}" for label in labels))
            for label in order:
                fmt = "{:10.2f}" if label == "  lazy / direct" else "{:10.0f}"
                print(f"  {label:{width}s}" + "".join(fmt.format(r[label]) if label in r else f"{'-':>10s}"
                                                      for r in rows))


def _median_of(runs: list[dict]) -> dict:
    out = {}
    for name in runs[0]:
        if "error" in runs[0][name]:
            out[name] = runs[0][name]
            continue
        out[name] = {"conditions": runs[0][name]["conditions"]}
        for temp in ("warm", "cold"):
            out[name][temp] = {m: statistics.median(r[name][temp][m] for r in runs) for m in runs[0][name][temp]}
    return out


def main():
    opts = _parse()
    if opts.json:
        print(json.dumps(measure(opts)))
        return
    if opts.against is None:
        report([measure(opts)], ["this"])
        return
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sides = {"before": os.path.abspath(opts.against), "after": here}
    runs = {side: [] for side in sides}
    child = [sys.executable, os.path.abspath(__file__), "--json", "--size", str(opts.size), "--rounds",
             str(opts.rounds), "--threads", str(opts.threads), "--flush-mib", str(opts.flush_mib), "--only", *opts.only]
    for _ in range(opts.runs):
        for side, path in sides.items():
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([path, os.environ.get("PYTHONPATH", "")]))
            done = subprocess.run(child, env=env, capture_output=True, text=True, check=True)
            runs[side].append(json.loads(done.stdout.splitlines()[-1]))
    print(f"{opts.runs} processes per side, alternating; medians of their medians. before: {sides['before']}")
    report([_median_of(runs["before"]), _median_of(runs["after"])], ["before", "after"])


if __name__ == "__main__":
    main()

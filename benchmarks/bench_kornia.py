#!/usr/bin/env python
"""Benchmark lazytrace on a suite of kornia functions.

    python benchmarks/bench_kornia.py                      # full run: 32x32 and 512x512
    python benchmarks/bench_kornia.py --quick              # smoke run, 32x32 only, < 60 s
    python benchmarks/bench_kornia.py --sizes 32 --no-compile --json out.json

For every function, at every size, on one float32 1x3xHxW input in [0, 1]:

  eager    the kornia function itself
  lazy     lazytrace.trace_graph(fn) after warm-up (the graph is cached; inputs fixed)
  direct   the generated function of lazy.graph_for(...) called on the call's tensor leaves
           (graph.fn, or graph._fn in older lazytrace), without the signature lookup
  compile  torch.compile(fn) after its first call (unless --no-compile); its first call is
           timed too (a fresh inductor cache dir per run, so this is a cold compile)
  first    the first call of a fresh LazyGraph (trace + run), against the median eager call
           (the eager median of the timed calls)

Per-call times are medians of calls timed one by one with time.perf_counter_ns; the
modes alternate in short blocks (about --block-ms) so that drift and bursts of load from
other processes hit all of them alike.
The number of calls is adaptive (about --target-ms of calls per mode) unless --repeat
gives it.

A second table compares the cache-hit path of a LazyGraph of an identity function with
jax.jit dispatch of an identity function (skipped when jax is not installed).
"""
from __future__ import annotations

import argparse
import atexit
import gc
import json
import math
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
import traceback


def _parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=None, help="H=W sizes (default: 32 512)")
    p.add_argument("--repeat", type=int, default=None,
                   help="timed calls per mode per function (default: adaptive, see --target-ms)")
    p.add_argument("--target-ms", type=float, default=None,
                   help="adaptive count: ms of calls per mode per function "
                        "(default 200 at <=64 px, 400 above; --quick: 20)")
    p.add_argument("--block-ms", type=float, default=2.0,
                   help="modes alternate in blocks of about this many ms of calls (at least 3 "
                        "timed calls, after one untimed call)")
    p.add_argument("--quick", action="store_true", help="smoke run: 32x32 only, few calls, few compiles")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    p.add_argument("--compile-budget", type=float, default=None,
                   help="seconds of torch.compile first calls in all; later functions skip compile "
                        "(default 360; --quick: 8)")
    p.add_argument("--compile-large", type=int, default=6,
                   help="number of functions compiled at sizes > 64 (default 6; the rest of the "
                        "suite is compiled at small sizes only)")
    p.add_argument("--warm-compile-cache", action="store_true",
                   help="use the default (persistent) inductor cache instead of a fresh one")
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads(N) (default: leave torch's default)")
    p.add_argument("--only", nargs="+", default=None, help="run functions whose name contains one of these")
    p.add_argument("--malloc", choices=["default", "fixed"], default="default",
                   help="fixed: glibc malloc keeps freed memory (mallopt: mmap threshold 32 MiB, no trimming), "
                        "as MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_ or jemalloc would: at large sizes, "
                        "which of eager and the graph page-faults on every call depends on the order of frees")
    p.add_argument("--json", metavar="PATH", default=None, help="write all results as JSON to PATH")
    args = p.parse_args(argv)
    if args.sizes is None:
        args.sizes = [32] if args.quick else [32, 512]
    if args.compile_budget is None:
        args.compile_budget = 8.0 if args.quick else 360.0
    return args


ARGS = _parse_args()
if ARGS.malloc == "fixed":
    import ctypes
    _libc = ctypes.CDLL(None)
    # M_MMAP_THRESHOLD (-3): its glibc maximum (32 MiB on 64-bit); M_TRIM_THRESHOLD (-1): never return the top
    if not (_libc.mallopt(-3, 32 * 1024 * 1024) and _libc.mallopt(-1, 1 << 30)):
        sys.exit("--malloc fixed: mallopt failed (not glibc?)")
if not ARGS.warm_compile_cache and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    # a cold cache: the compile first-call numbers are what a new process on a new machine pays
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_kornia_inductor_")
    atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)

import torch  # noqa: E402
import kornia as K  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

import lazytrace  # noqa: E402

if ARGS.threads:
    torch.set_num_threads(ARGS.threads)

# the thresholds the summary checks
TARGET_SLOWDOWN_PCT = 2.0     # at the largest size: no function more than 2 % slower than eager
TARGET_LAZY_DIRECT = 1.15     # lazy / direct
TARGET_FIRST_EAGER = 5.0      # first call of a fresh LazyGraph / one eager call
TARGET_LOOKUP_JAX = 0.5       # LazyGraph identity call / jax.jit identity dispatch

#: functions compiled at large sizes too (when --compile-large allows)
COMPILE_LARGE_PREFERENCE = ["color.rgb_to_hsv", "filters.gaussian_blur2d", "enhance.adjust_contrast",
                            "geometry.rotate", "morphology.dilation", "enhance.normalize",
                            "filters.sobel", "geometry.hflip"]


# ---------------------------------------------------------------------------------------------
# the suite: name, function, and a builder (image, size) -> (args, kwargs) of one valid call
# ---------------------------------------------------------------------------------------------
def _t(*values):
    return torch.tensor(values, dtype=torch.float32)


def _affine(size):
    m = K.geometry.transform.get_rotation_matrix2d(_t(size / 2, size / 2)[None], _t(20.0), _t(1.1, 1.1)[None])
    return m  # 1x2x3


def _perspective(size):
    m = torch.eye(3)[None].clone()
    m[0, 0, 1] = 0.1
    m[0, 2, 0] = 0.2 / size
    m[0, 0, 2] = size * 0.05
    return m  # 1x3x3


#: the suite: functions called with the image alone ...
_IMAGE_ONLY = {
    "color": "rgb_to_grayscale rgb_to_hsv rgb_to_hls rgb_to_lab rgb_to_ycbcr rgb_to_yuv rgb_to_xyz rgb_to_luv "
             "rgb_to_linear_rgb",
    "filters": "sobel canny spatial_gradient",
    "enhance": "equalize invert equalize_clahe",
    "geometry": "hflip vflip rot180 pyrdown pyrup",
}
#: ... and with more arguments after the image: a tuple, or size -> tuple
_MORE_ARGS = {
    "filters.gaussian_blur2d": ((5, 5), (1.5, 1.5)), "filters.box_blur": ((5, 5),), "filters.laplacian": (5,),
    "filters.median_blur": ((3, 3),), "filters.unsharp_mask": ((5, 5), (1.5, 1.5)),
    "filters.motion_blur": (5, 35.0, 0.5), "filters.bilateral_blur": ((5, 5), 0.1, (1.5, 1.5)),
    "enhance.adjust_brightness": (0.2,), "enhance.adjust_contrast": (1.5,), "enhance.adjust_gamma": (2.2,),
    "enhance.adjust_saturation": (1.5,), "enhance.adjust_hue": (0.3,),
    "enhance.normalize": lambda s: (_t(0.485, 0.456, 0.406), _t(0.229, 0.224, 0.225)),
    "enhance.sharpness": (0.5,), "enhance.solarize": (0.5,), "enhance.posterize": (4,),
    "geometry.rotate": lambda s: (_t(30.0),), "geometry.resize": lambda s: ((s // 2, s // 2),),
    "geometry.warp_affine": lambda s: (_affine(s), (s, s)),
    "geometry.warp_perspective": lambda s: (_perspective(s), (s, s)),
    "geometry.translate": lambda s: (_t(3.0, 5.0)[None],), "geometry.scale": lambda s: (_t(1.2, 1.2)[None],),
    **{f"morphology.{n}": lambda s: (torch.ones(3, 3),)
       for n in "dilation erosion opening closing gradient top_hat".split()},
}
#: the order of the tables (and of the output): by module
_ORDER = "color filters enhance geometry morphology".split()


def _suite():
    """(name, function, builder (image, size) -> (args, kwargs) of one valid call), grouped by module."""
    modules = {"color": K.color, "filters": K.filters, "enhance": K.enhance, "geometry": K.geometry.transform,
               "morphology": K.morphology}
    names = [f"{m}.{n}" for m, ns in _IMAGE_ONLY.items() for n in ns.split()] + list(_MORE_ARGS)
    names.sort(key=lambda n: _ORDER.index(n.split(".")[0]))
    suite = []
    for name in names:
        module, fn_name = name.split(".")
        more = _MORE_ARGS.get(name, ())
        suite.append((name, getattr(modules[module], fn_name),
                      lambda x, s, more=more: ((x, *(more(s) if callable(more) else more)), {})))
    return suite


# ---------------------------------------------------------------------------------------------
# timing helpers
# ---------------------------------------------------------------------------------------------
_pc = time.perf_counter_ns
#: the fewest timed calls per block (each block also makes one untimed call first)
MIN_BLOCK = 3


def _time_calls(fn, args, kwargs, n, out):
    if kwargs:
        for _ in range(n):
            t0 = _pc()
            fn(*args, **kwargs)
            out.append(_pc() - t0)
    else:
        for _ in range(n):
            t0 = _pc()
            fn(*args)
            out.append(_pc() - t0)


def _time_once(fn, *args, **kwargs):
    t0 = _pc()
    result = fn(*args, **kwargs)
    return _pc() - t0, result


def _interleaved(modes: dict, n: int, block: int, deadline_s: float | None = None) -> dict:
    """Per-call time distribution of each mode. The n calls per mode are made in blocks of
    `block` calls, the modes taking turns block by block (in rotating order), so that drift
    and bursts of load from other processes hit all modes alike. Each block starts with one
    untimed call: the first call after another mode ran pays for that mode's memory
    traffic (at 512x512 the caching allocator/page faults add ~1 ms to whichever mode runs
    right after eager), which would bias the comparison by the order of the modes. Past
    `deadline_s` the rounds stop early (each mode then has the same number of calls)."""
    samples = {name: [] for name in modes}
    block = max(MIN_BLOCK, min(block, n))
    names = list(modes)
    done = 0
    r = 0
    stop_at = None if deadline_s is None else _pc() + deadline_s * 1e9
    while done < n:
        count = min(block, n - done)
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            fn, args, kwargs = modes[name]
            fn(*args, **kwargs)                  # untimed: settles the memory after a mode switch
            _time_calls(fn, args, kwargs, count, samples[name])
        done += count
        r += 1
        if stop_at is not None and _pc() > stop_at:
            break
    out = {name: _describe(v) for name, v in samples.items()}
    for d in out.values():
        d["capped"] = done < n
    return out


def _describe(v):
    q = statistics.quantiles(v, n=4) if len(v) >= 4 else [min(v), statistics.median(v), max(v)]
    return {"median": statistics.median(v), "min": min(v), "p25": q[0], "p75": q[2], "n": len(v)}


def _same(a, b, rtol=1e-4, atol=1e-5) -> bool:
    la, _ = tree_flatten(a)
    lb, _ = tree_flatten(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
                return False
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
            if x.is_floating_point():
                if not torch.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True):
                    return False
            elif not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True


def _graph_fn(graph):
    """The generated function of a Graph (`graph.fn`; `graph._fn` before lazytrace renamed it)."""
    fn = getattr(graph, "fn", None)
    return fn if callable(fn) else graph._fn


def _leaves(args, kwargs):
    """The tensor arguments, in argument order (Python scalars/tuples are baked into graphs)."""
    flat, _ = tree_flatten((list(args), dict(kwargs)))
    return [a for a in flat if isinstance(a, torch.Tensor)]


def _geomean(values):
    values = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _short_exc(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return text if len(text) <= 140 else text[:137] + "..."


# ---------------------------------------------------------------------------------------------
# one function at one size
# ---------------------------------------------------------------------------------------------
class CompileState:
    def __init__(self, enabled, budget_s, large_names):
        self.enabled = enabled
        self.budget_ns = budget_s * 1e9
        self.spent_ns = 0
        self.large_names = large_names


def bench_one(name, fn, build, size, opts, compile_state: CompileState, errors: list) -> dict:
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(1, 3, size, size, generator=gen, dtype=torch.float32)
    args, kwargs = build(x, size)
    res = {"function": name, "size": size, "status": "ok", "notes": []}
    gc.collect()

    # ---- eager: warm up, then a few timed calls to size the adaptive call count
    try:
        expected = fn(*args, **kwargs)
        for _ in range(2):
            fn(*args, **kwargs)
    except Exception as exc:           # the call itself is invalid: a bug in this benchmark
        res["status"] = "error"
        res["notes"].append(f"eager call failed: {_short_exc(exc)}")
        errors.append((name, size, "eager", traceback.format_exc()))
        return res
    few = []
    _time_calls(fn, args, kwargs, 5, few)
    eager_few = min(few)        # sizes the adaptive call count; the min is robust to load bursts
    res["eager_few_ns"] = few

    # ---- first call of fresh LazyGraphs (trace + run); the first one is the reported number
    firsts = []
    lazy = None
    try:
        for i in range(3):
            fresh = lazytrace.trace_graph(fn)
            t, out = _time_once(fresh, *args, **kwargs)
            firsts.append(t)
            if i == 0:
                lazy, first_out = fresh, out
    except Exception as exc:
        res["status"] = "lazytrace error"
        res["notes"].append(f"lazytrace raised: {_short_exc(exc)}")
        errors.append((name, size, "lazytrace first call", traceback.format_exc()))
        return res
    res["first_ns"] = firsts[0]
    res["first_repeats_ns"] = firsts
    if not _same(first_out, expected):
        res["notes"].append("first lazy call differs from eager")

    # ---- lazy warm-up (the graph is cached), fallback detection, the graph and its leaves
    try:
        for _ in range(3):
            lazy_out = lazy(*args, **kwargs)
    except Exception as exc:
        res["status"] = "lazytrace error"
        res["notes"].append(f"cached lazy call raised: {_short_exc(exc)}")
        errors.append((name, size, "lazytrace cached call", traceback.format_exc()))
        return res
    graph = lazy.graph_for(*args, **kwargs)
    stats = lazy.stats
    direct = None
    if stats.eager > 0 or graph is None:
        reasons = list(stats.reasons) or lazy.eager_signatures or ["graph_for() returned None"]
        res["status"] = "eager fallback"
        res["fallback_reason"] = "; ".join(reasons)
    else:
        leaves = _leaves(args, kwargs)
        try:
            gfn = _graph_fn(graph)
            direct_out = gfn(*leaves)
            direct = (gfn, tuple(leaves), {})
            if not _same(direct_out, expected):
                res["notes"].append("direct graph output differs from eager")
        except Exception as exc:
            res["notes"].append(f"graph function(*leaves) raised: {_short_exc(exc)}")
            errors.append((name, size, "graph function(*leaves)", traceback.format_exc()))
        res["graph_lines"] = len(graph.source.strip().splitlines())
    if not _same(lazy_out, expected):
        res["notes"].append("cached lazy output differs from eager")
    if stats.guard_failures:
        res["notes"].append(f"{stats.guard_failures} guard failures in warm-up")

    # ---- torch.compile: a cold compile per function and size, first call timed
    compiled = None
    if compile_state.enabled:
        if size > 64 and name not in compile_state.large_names:
            res["compile_skipped"] = "not in the large-size compile subset"
        elif compile_state.spent_ns >= compile_state.budget_ns:
            res["compile_skipped"] = "compile budget spent"
        else:
            torch._dynamo.reset()
            try:
                cfn = torch.compile(fn, dynamic=False)
                t, cout = _time_once(cfn, *args, **kwargs)
                compile_state.spent_ns += t
                res["compile_first_ns"] = t
                for _ in range(2):
                    cfn(*args, **kwargs)
                compiled = (cfn, args, kwargs)
                if not _same(cout, expected, rtol=1e-3, atol=1e-4):
                    res["notes"].append("compiled output differs from eager")
            except Exception as exc:
                res["compile_skipped"] = f"compile failed: {_short_exc(exc)}"
                errors.append((name, size, "torch.compile", traceback.format_exc()))

    # ---- steady-state timing, interleaved
    target_ms = 0
    if opts.repeat:
        n = opts.repeat
    else:
        target_ms = opts.target_ms if opts.target_ms else (20 if opts.quick else (200 if size <= 64 else 400))
        n = int(target_ms * 1e6 / max(eager_few, 1))
        n = max(15 if size > 64 else 50, min(n, 20000))
    res["calls_per_mode"] = n
    modes = {"eager": (fn, args, kwargs), "lazy": (lazy, args, kwargs)}
    if direct is not None:
        modes["direct"] = direct
    if compiled is not None:
        modes["compile"] = compiled
    before = (stats.hits, stats.eager, stats.traces)
    try:
        block = int(opts.block_ms * 1e6 / max(eager_few, 1))
        budget = None if opts.repeat else 3 * len(modes) * target_ms / 1e3 + 1
        medians = _interleaved(modes, n, block, budget)
    except Exception as exc:
        res["status"] = "error"
        res["notes"].append(f"timing raised: {_short_exc(exc)}")
        errors.append((name, size, "timing", traceback.format_exc()))
        return res
    for mode, d in medians.items():
        res[f"{mode}_ns"] = d["median"]
        res[f"{mode}_dist_ns"] = d
    # noise: interquartile range of eager and lazy samples, relative to their medians
    res["iqr_pct"] = 100 * max((medians[m]["p75"] - medians[m]["p25"]) / medians[m]["median"]
                               for m in ("eager", "lazy"))
    if "compile" in medians:
        c = medians["compile"]
        res["compile_iqr_pct"] = 100 * (c["p75"] - c["p25"]) / c["median"]
        if res["compile_iqr_pct"] > 50:
            res["notes"].append(f"compile timings noisy (iqr {res['compile_iqr_pct']:.0f}%, "
                                f"min {c['min'] / 1e3:.1f} us)")
    if medians["eager"]["capped"]:
        res["calls_per_mode"] = medians["eager"]["n"]
        res["notes"].append(f"time cap hit after {medians['eager']['n']} of {n} calls per mode")
    res["speedup_min"] = medians["eager"]["min"] / medians["lazy"]["min"]
    medians = {m: d["median"] for m, d in medians.items()}
    hits, eager_calls, traces = (stats.hits - before[0], stats.eager - before[1], stats.traces - before[2])
    if res["status"] == "ok" and (eager_calls or traces):
        res["status"] = "eager fallback" if eager_calls else "ok"
        res["notes"].append(f"during timing: {hits} hits, {eager_calls} eager calls, {traces} traces")
        if eager_calls:
            res["fallback_reason"] = "; ".join(stats.reasons)
    res["speedup"] = medians["eager"] / medians["lazy"]
    for mode in ("eager", "lazy"):       # minor page faults per call: memory the allocator gave back and takes again
        call, margs, mkwargs = modes[mode]
        count = min(n, 20)
        before_faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(count):
            call(*margs, **mkwargs)
        res[f"{mode}_faults"] = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before_faults) / count
    # first call against the median eager call (the steady-state one: many calls, robust to bursts)
    res["first_over_eager"] = res["first_ns"] / medians["eager"]
    if "direct" in medians:
        res["lazy_over_direct"] = medians["lazy"] / medians["direct"]
    return res


# ---------------------------------------------------------------------------------------------
# signature lookup: LazyGraph identity vs jax.jit identity
# ---------------------------------------------------------------------------------------------
def ident(x):
    return x


def bench_lookup(opts) -> dict:
    res = {}
    x = torch.rand(1, 3, 32, 32)
    lazy = lazytrace.trace_graph(ident)
    for _ in range(20):
        lazy(x)
    graph = lazy.graph_for(x)
    if graph is None or lazy.stats.eager:
        res["lazy_note"] = f"identity LazyGraph did not cache a graph: {dict(lazy.stats.reasons)}"
    n = opts.repeat or (5000 if opts.quick else 50000)
    modes = {"python call": (ident, (x,), {}), "lazytrace": (lazy, (x,), {})}
    if graph is not None:
        modes["graph fn"] = (_graph_fn(graph), (x,), {})
    try:
        import jax
        import jax.numpy as jnp
        import numpy as np
        jf = jax.jit(lambda a: a)
        xj = jnp.asarray(np.random.default_rng(0).random((1, 3, 32, 32), dtype=np.float32))
        for _ in range(20):
            jf(xj).block_until_ready()
        modes["jax.jit"] = (jf, (xj,), {})
        res["jax_version"] = jax.__version__
        res["jax_backend"] = jax.default_backend()
    except ImportError as exc:
        res["jax_skipped"] = f"jax not installed ({exc})"
    except Exception as exc:
        res["jax_skipped"] = f"jax failed: {_short_exc(exc)}"
    res["calls_per_mode"] = n
    for mode, d in _interleaved(modes, n, 200).items():
        res[f"{mode}_ns"] = d["median"]
        res[f"{mode}_dist_ns"] = d
    if "graph fn_ns" in res:
        res["cache_hit_overhead_ns"] = res["lazytrace_ns"] - res["graph fn_ns"]
    if "jax.jit_ns" in res:
        res["lazy_over_jax"] = res["lazytrace_ns"] / res["jax.jit_ns"]
    return res


# ---------------------------------------------------------------------------------------------
# reporting
# ---------------------------------------------------------------------------------------------
def _us(ns):
    if ns is None:
        return "-"
    us = ns / 1e3
    return f"{us:.1f}" if us < 1000 else f"{us:.0f}"


def _x(v, fmt="{:.2f}"):
    return "-" if v is None else fmt.format(v)


def print_table(size, rows):
    print(f"\n=== {size}x{size} (float32 1x3x{size}x{size}; medians per call; us = microseconds; "
          f"iqr% = interquartile range of the eager/lazy samples over their median, the larger) ===")
    head = (f"{'function':<28} {'eager us':>9} {'lazy us':>9} {'direct us':>9} {'compile us':>10} "
            f"{'compile 1st s':>13} {'eager/lazy':>10} {'lazy/direct':>11} {'1st/eager':>9} {'calls':>6} {'iqr%':>5} "
            f"{'faults e/l':>11}  note")
    print(head)
    print("-" * len(head))
    for r in rows:
        note = []
        if r["status"] != "ok":
            note.append(r["status"] + (f" ({r['fallback_reason']})" if r.get("fallback_reason") else ""))
        note += r["notes"]
        if r.get("compile_skipped") and not r["compile_skipped"].startswith("not in"):
            note.append("compile: " + r["compile_skipped"])
        cfirst = r.get("compile_first_ns")
        print(f"{r['function']:<28} {_us(r.get('eager_ns')):>9} {_us(r.get('lazy_ns')):>9} "
              f"{_us(r.get('direct_ns')):>9} {_us(r.get('compile_ns')):>10} "
              f"{_x(cfirst / 1e9 if cfirst else None, '{:.1f}'):>13} {_x(r.get('speedup'), '{:.3f}'):>10} "
              f"{_x(r.get('lazy_over_direct'), '{:.3f}'):>11} {_x(r.get('first_over_eager'), '{:.1f}'):>9} "
              f"{r.get('calls_per_mode', '-'):>6} {_x(r.get('iqr_pct'), '{:.0f}'):>5} "
              f"{_x(r.get('eager_faults'), '{:.0f}') + '/' + _x(r.get('lazy_faults'), '{:.0f}'):>11}  {'; '.join(note)}")


def _pf(ok):
    return "PASS" if ok else "FAIL"


def summarize(results_by_size: dict) -> dict:
    summary = {"per_size": {}, "targets": {}}
    print("\n=== summary ===")
    for size, rows in results_by_size.items():
        sp = [r["speedup"] for r in rows if r.get("speedup")]
        gm = _geomean(sp)
        fallbacks = [r["function"] for r in rows if r["status"] == "eager fallback"]
        errs = [r["function"] for r in rows if r["status"] in ("error", "lazytrace error")]
        summary["per_size"][size] = {"geomean_speedup": gm, "functions": len(rows), "timed": len(sp),
                                     "fallbacks": fallbacks, "errors": errs}
        gm_min = _geomean([r["speedup_min"] for r in rows if r.get("speedup_min")])
        summary["per_size"][size]["geomean_speedup_of_minimums"] = gm_min
        print(f"{size}x{size}: geomean speedup eager/lazy = {_x(gm, '{:.3f}')}x over {len(sp)} functions"
              f" ({len(fallbacks)} eager fallbacks, {len(errs)} errors); from per-mode minimum times "
              f"instead of medians: {_x(gm_min, '{:.3f}')}x")

    all_rows = [r for rows in results_by_size.values() for r in rows]

    # slowdown at the largest size
    big = max(results_by_size)
    slow = [(r["lazy_ns"] / r["eager_ns"] - 1) * 100 for r in results_by_size[big] if r.get("speedup")]
    if slow:
        worst_i = max(range(len(slow)), key=slow.__getitem__)
        worst_fn = [r for r in results_by_size[big] if r.get("speedup")][worst_i]["function"]
        worst = slow[worst_i]
        n_over = sum(s > TARGET_SLOWDOWN_PCT for s in slow)
        ok = worst <= TARGET_SLOWDOWN_PCT
        summary["targets"]["max_slowdown_pct"] = {"size": big, "value": worst, "function": worst_fn,
                                                 "over_target": n_over, "target": TARGET_SLOWDOWN_PCT,
                                                 "pass": ok}
        print(f"max slowdown lazy vs eager at {big}x{big}: {worst:+.2f}% ({worst_fn}); "
              f"{n_over} function(s) over {TARGET_SLOWDOWN_PCT:.0f}% "
              f"[target <= {TARGET_SLOWDOWN_PCT:.0f}%] {_pf(ok)}")
        over = [r for r in results_by_size[big] if r.get("speedup") and (1 / r["speedup"] - 1) * 100 > TARGET_SLOWDOWN_PCT]
        faulting = [r["function"] for r in over if r.get("lazy_faults", 0) > r.get("eager_faults", 0) + 1]
        if over:
            print(f"  of those, {len(faulting)} page-fault more per call than eager (the allocator returns and "
                  f"takes back memory: compare --malloc fixed): {', '.join(faulting) or '-'}")
        summary["targets"]["max_slowdown_pct"]["over_with_more_faults"] = faulting

    def ratio_target(key, label, target, fmt):
        out = {}
        scopes = [(f"{s}x{s}", results_by_size[s]) for s in results_by_size]
        if len(results_by_size) > 1:
            scopes.append(("all sizes", all_rows))
        for scope, rows in scopes:
            vals = [(r[key], r["function"]) for r in rows if r.get(key)]
            if not vals:
                continue
            mx, mx_fn = max(vals)
            gm = _geomean([v for v, _ in vals])
            out[scope] = {"max": mx, "max_function": mx_fn, "geomean": gm, "n": len(vals), "target": target,
                          "max_pass": mx <= target, "geomean_pass": gm <= target}
            print(f"{label} ({scope}, n={len(vals)}): max {fmt.format(mx)} ({mx_fn}) "
                  f"[target <= {fmt.format(target)}] {_pf(mx <= target)}; "
                  f"geomean {fmt.format(gm)} [target <= {fmt.format(target)}] {_pf(gm <= target)}")
        return out

    summary["targets"]["lazy_over_direct"] = ratio_target("lazy_over_direct", "lazy/direct",
                                                          TARGET_LAZY_DIRECT, "{:.3f}")
    summary["targets"]["first_over_eager"] = ratio_target("first_over_eager", "first call/eager",
                                                          TARGET_FIRST_EAGER, "{:.2f}x")
    for size, rows in results_by_size.items():
        extra = [((r["first_ns"] - r["eager_ns"]) / 1e6, r["function"]) for r in rows
                 if r.get("first_ns") and r.get("eager_ns")]
        if extra:
            mx, mx_fn = max(extra)
            med = statistics.median(v for v, _ in extra)
            summary["per_size"][size]["trace_overhead_ms"] = {"median": med, "max": mx, "max_function": mx_fn}
            print(f"first call - eager call (absolute trace cost) at {size}x{size}: median {med:.2f} ms, "
                  f"max {mx:.2f} ms ({mx_fn})")
    return summary


def print_lookup(res):
    print("\n=== signature lookup: cache-hit call of an identity function, 1x3x32x32 float32 ===")
    rows = [("python call (def ident(x): return x)", "python call_ns"),
            ("graph.fn(x)  (generated code only)", "graph fn_ns"),
            ("LazyGraph(ident)(x)  (lazytrace hit)", "lazytrace_ns"),
            ("jax.jit(lambda x: x)(x)  (dispatch)", "jax.jit_ns")]
    for label, key in rows:
        if key in res:
            print(f"{label:<44} {res[key] / 1e3:8.2f} us")
    if "cache_hit_overhead_ns" in res:
        print(f"{'lazytrace cache-hit overhead (hit - fn)':<44} {res['cache_hit_overhead_ns'] / 1e3:8.2f} us")
    if "lazy_over_jax" in res:
        ok = res["lazy_over_jax"] <= TARGET_LOOKUP_JAX
        res["pass"] = ok
        print(f"lazytrace / jax.jit = {res['lazy_over_jax']:.3f} [target <= {TARGET_LOOKUP_JAX}] {_pf(ok)}"
              f"   (jax {res.get('jax_version')}, backend {res.get('jax_backend')}; no block_until_ready)")
    else:
        print(f"jax.jit comparison skipped: {res.get('jax_skipped')}")
    if res.get("lazy_note"):
        print("note:", res["lazy_note"])


def _loadavg():
    try:
        return list(os.getloadavg())
    except (OSError, AttributeError):
        return None


def _fmt_load(v):
    return "n/a" if v is None else " ".join(f"{x:.2f}" for x in v)


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def main(opts):
    t_start = time.perf_counter()
    header = {
        "python": sys.version.split()[0], "torch": torch.__version__, "kornia": K.__version__,
        "lazytrace": lazytrace.__version__, "torch_num_threads": torch.get_num_threads(),
        "processor": platform.processor(), "machine": platform.machine(), "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(), "platform": platform.platform(),
        "inductor_cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR", "default"),
        "argv": sys.argv[1:], "loadavg_start": _loadavg(), "malloc": ARGS.malloc,
    }
    print(f"bench_kornia: torch {header['torch']}, kornia {header['kornia']}, lazytrace {header['lazytrace']}, "
          f"python {header['python']}")
    print(f"machine: processor={header['processor']!r} ({header['machine']}, {header['cpu_model']}), "
          f"os.cpu_count()={header['cpu_count']}, torch.get_num_threads()={header['torch_num_threads']}, "
          f"load average {_fmt_load(header['loadavg_start'])}")
    compile_msg = "off" if opts.no_compile else \
        f"on (budget {opts.compile_budget:.0f} s, inductor cache {header['inductor_cache']})"
    print(f"sizes {opts.sizes}; compile {compile_msg}")
    load = header["loadavg_start"]
    if load and load[0] > 0.5 * (os.cpu_count() or 1):
        print(f"warning: the machine is busy (1-minute load {load[0]:.2f} on {os.cpu_count()} cores): "
              f"expect noisy timings; torch's thread pool waits on descheduled threads (--threads 1 helps)")

    suite = _suite()
    if opts.only:
        suite = [s for s in suite if any(o in s[0] for o in opts.only)]
    print(f"{len(suite)} functions")

    # one-time warm-ups, so the first function measured does not pay for imports and caches
    w = torch.rand(1, 3, 8, 8)
    t, _ = _time_once(lambda: lazytrace.trace_graph(lambda a: (a * 2 + 1).sum())(w))
    header["lazytrace_warmup_s"] = t / 1e9
    msg = f"warm-up: first lazytrace trace {t / 1e9:.3f} s"
    large = [n for n in COMPILE_LARGE_PREFERENCE if n in {s[0] for s in suite}][:opts.compile_large]
    cstate = CompileState(not opts.no_compile, opts.compile_budget, set(large))
    if cstate.enabled:
        try:
            t, _ = _time_once(lambda: torch.compile(lambda a: a * 2 + 1)(w))
            header["compile_warmup_s"] = t / 1e9
            msg += f"; first torch.compile (inductor start-up, not counted) {t / 1e9:.1f} s"
        except Exception as exc:
            print(f"torch.compile does not work here ({_short_exc(exc)}): compile mode off")
            cstate.enabled = False
        if any(s > 64 for s in opts.sizes):
            msg += f"\ncompiled at sizes > 64: {', '.join(large) or 'none'}"
    print(msg)

    errors = []
    results_by_size = {}
    for size in opts.sizes:
        rows = []
        t_size = time.perf_counter()
        for name, fn, build in suite:
            rows.append(bench_one(name, fn, build, size, opts, cstate, errors))
        results_by_size[size] = rows
        print_table(size, rows)
        print(f"({size}x{size} took {time.perf_counter() - t_size:.0f} s; torch.compile first calls so far "
              f"{cstate.spent_ns / 1e9:.0f} s)")

    summary = summarize(results_by_size)

    lookup = bench_lookup(opts)
    print_lookup(lookup)

    if errors:
        print("\n=== errors (tracebacks) ===")
        for name, size, where, tb in errors:
            print(f"--- {name} at {size}x{size}, in {where}:\n{tb}")

    total = time.perf_counter() - t_start
    header["loadavg_end"] = _loadavg()
    print(f"\ntotal {total:.0f} s; load average at the end {_fmt_load(header['loadavg_end'])}"
          f" (other processes on this machine's {os.cpu_count()} cores add noise: see iqr%)")
    if opts.json:
        out = {"header": header, "results": {str(s): rows for s, rows in results_by_size.items()},
               "summary": summary, "signature_lookup": lookup, "total_s": total,
               "errors": [{"function": n, "size": s, "where": w, "traceback": tb} for n, s, w, tb in errors]}
        with open(opts.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
        print(f"results written to {opts.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))

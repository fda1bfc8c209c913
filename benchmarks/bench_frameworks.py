#!/usr/bin/env python
"""Eager vs lazytrace vs each framework's own compiler, on small functions, in one run.

    python benchmarks/bench_frameworks.py                 # torch, numpy, jax, tensorflow
    python benchmarks/bench_frameworks.py --frameworks jax tensorflow --calls 300

For every framework and function, on a float32 3x32x32 input:
  eager      the function itself
  lazy       lazytrace.trace_graph(fn), cached (after its first calls)
  native     jax.jit / tf.function / torch.compile of the function, cached
  lazy+nat   trace_graph(fn, return_backend_traced_fn=True), cached
  first      the first call of a fresh LazyGraph (the trace; after eager calls warmed the
             framework's own caches) / of a fresh native compile, as a ratio to the median
             eager call
  retrace    the first call of a second fresh LazyGraph of the same function: lazytrace's
             own trace work, once the framework has met the function's calls under a trace
The first trace in a process also pays one-time set-up (lazytrace's modules, the backend):
it is timed apart, on an identity function, before the table ("set-up"). First calls are
timed as timeit times calls, with the cyclic GC off, after gc.collect() and then one eager
call of the function: the collection walks every object of the process (~350k with
TensorFlow loaded) and leaves the CPU caches cold, which the median eager call it is compared
with never is (right after gc.collect(), one eager call of TF's softmax took 503 us against
142 us warm, JAX's swish 278 us against 46 us: session 8, 2026-11-23; without that eager call,
a first call's ratio also counted the cold caches the benchmark itself made).
Per-call times are medians (us) of calls timed one by one; modes alternate in rounds so
that machine noise hits all alike. Ratios: eager / mode (> 1: faster than eager).
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time

import numpy as np

import lazytrace


def functions(name):
    """name -> fn, written with framework `name`'s own calls (the same math everywhere)."""
    if name == "torch":
        import torch as xp
        sig, exp, mean, std, clip = xp.sigmoid, xp.exp, xp.mean, xp.std, xp.clamp
        softmax = lambda x: xp.softmax(x, dim=-1)
        arange = xp.arange
        ew = lambda x: xp.tensor([0.299, 0.587, 0.114]).view(3, 1, 1)
    elif name == "numpy":
        xp = np
        sig = lambda x: 1 / (1 + np.exp(-x))
        exp, mean, std, clip = np.exp, np.mean, np.std, np.clip
        softmax = lambda x: np.exp(x - x.max(-1, keepdims=True)) / np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)
        arange = np.arange
        ew = lambda x: np.asarray([0.299, 0.587, 0.114], dtype=np.float32).reshape(3, 1, 1)
    elif name == "jax":
        import jax
        xp = jax.numpy
        sig, exp, mean, std, clip = jax.nn.sigmoid, xp.exp, xp.mean, xp.std, xp.clip
        softmax = lambda x: jax.nn.softmax(x, axis=-1)
        arange = xp.arange
        ew = lambda x: xp.asarray([0.299, 0.587, 0.114]).reshape(3, 1, 1)
    else:
        import tensorflow as tf
        sig, exp, clip = tf.sigmoid, tf.exp, tf.clip_by_value
        mean = lambda x, **kw: tf.reduce_mean(x, **{"axis": kw.get("axis"), "keepdims": kw.get("keepdims", False)})
        std = lambda x, **kw: tf.math.reduce_std(x, **{"axis": kw.get("axis"), "keepdims": kw.get("keepdims", False)})
        softmax = lambda x: tf.nn.softmax(x, axis=-1)
        arange = lambda n, dtype=None: tf.range(n, dtype=tf.float32)
        ew = lambda x: tf.reshape(tf.constant([0.299, 0.587, 0.114]), (3, 1, 1))

    def normalize(x):
        if len(x.shape) != 3:
            raise ValueError("expected CxHxW")
        return (x - mean(x, axis=(1, 2), keepdims=True)) / (std(x, axis=(1, 2), keepdims=True) + 1e-6)

    def swish(x):
        return x * sig(1.702 * x)

    def soft(x):
        return softmax(x * 2.0)

    def blur(x):
        r = arange(5, dtype=None) * 1.0 - 2.0
        k = exp(-(r ** 2) / 4.5)
        k = k / k[2]                       # kernel from Python numbers: folded
        return x * k[0] + x * k[1] + x * k[2]

    def gray(x):
        w = ew(x)
        g = (x * w)
        return clip(g[0] + g[1] + g[2], 0.0, 1.0)

    def chain(x):
        y = x
        for i in range(8):                 # overhead-bound: 16 tiny ops
            y = y * 0.9 + 0.01 * i
        return y

    return {"normalize": normalize, "swish": swish, "softmax": soft, "blur": blur, "gray": gray,
            "chain16": chain}


def make_input(name):
    data = np.random.default_rng(0).random((3, 32, 32), dtype=np.float32)
    if name == "torch":
        import torch
        return torch.from_numpy(data)
    if name == "jax":
        import jax.numpy as jnp
        return jnp.asarray(data)
    if name == "tensorflow":
        import tensorflow as tf
        return tf.constant(data)
    return data


def sync(name):
    if name == "jax":
        import jax
        return lambda out: jax.block_until_ready(out)
    return lambda out: out


def native(name, fn):
    if name == "jax":
        import jax
        return jax.jit(fn)
    if name == "tensorflow":
        import tensorflow as tf
        return tf.function(fn, autograph=False)
    if name == "torch" and ARGS.torch_compile:
        import torch
        return torch.compile(fn)
    return None


def time_first(call, done, rewarm=None) -> float:
    """One call, timed as timeit times: after a collection, with the cyclic GC off (with jax and
    tensorflow loaded, a full collection landing in a single timed call costs ~100 ms); then
    `rewarm()` (an eager call: the caches the collection evicted warm again, as the eager
    median's are)."""
    gc.collect()
    if rewarm is not None:
        rewarm()
    gc.disable()
    try:
        t0 = time.perf_counter_ns()
        done(call())
        return (time.perf_counter_ns() - t0) / 1e3
    finally:
        gc.enable()


def bench(name):
    x = make_input(name)
    done = sync(name)
    rows = []
    setup = time_first(lambda: lazytrace.trace_graph(lambda a: a)(x), done)
    for fname, fn in functions(name).items():
        modes = {"eager": fn}
        for _ in range(3):                 # the framework's own first-call costs are not the trace's
            done(fn(x))
        rewarm = lambda: done(fn(x))       # noqa: E731 - (the function of this iteration)
        first_lazy = time_first(lambda: lazytrace.trace_graph(fn)(x), done, rewarm)
        retrace = time_first(lambda: lazytrace.trace_graph(fn)(x), done, rewarm)
        modes["lazy"] = lazytrace.trace_graph(fn)
        nat = native(name, fn)
        first_native = None
        if nat is not None:
            first_native = time_first(lambda: nat(x), done, rewarm)
            modes["native"] = nat
            modes["lazy+nat"] = lazytrace.trace_graph(fn, return_backend_traced_fn=True)
        for f in modes.values():          # warm-up: traces, graph generation, compiles
            for _ in range(3):
                done(f(x))
        times = {m: [] for m in modes}
        for _ in range(ARGS.rounds):
            for m, f in modes.items():
                for _ in range(max(1, ARGS.calls // ARGS.rounds)):
                    t0 = time.perf_counter_ns()
                    done(f(x))
                    times[m].append(time.perf_counter_ns() - t0)
        med = {m: statistics.median(v) / 1e3 for m, v in times.items()}
        lazy_stats = modes["lazy"].stats
        rows.append((fname, med, first_lazy / med["eager"], retrace / med["eager"],
                     None if first_native is None else first_native / med["eager"], lazy_stats))
    return rows, setup


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frameworks", nargs="+", default=["torch", "numpy", "jax", "tensorflow"])
    p.add_argument("--calls", type=int, default=400, help="timed calls per mode per function")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--torch-compile", action="store_true", help="include torch.compile (slow to compile)")
    ARGS = p.parse_args()
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}")
    for name in ARGS.frameworks:
        try:
            rows, setup = bench(name)
        except ImportError as exc:
            print(f"\n{name}: skipped ({exc})")
            continue
        mod = sys.modules[{"numpy": "numpy"}.get(name, name)]
        print(f"\n## {name} {getattr(mod, '__version__', '')}  (us per call, median; x = eager/mode)")
        print(f"set-up: first trace in this process (identity function) {setup:.0f} us")
        print(f"{'function':10} {'eager':>8} {'lazy':>8} {'x':>6} {'native':>8} {'x':>6} {'lazy+nat':>9} {'x':>6}"
              f" {'first lazy/eager':>17} {'retrace/eager':>14} {'first native/eager':>19}  lazy stats")
        speedups = []
        for fname, med, first_lazy, retrace, first_native, stats in rows:
            e = med["eager"]
            cols = []
            for m in ("lazy", "native", "lazy+nat"):
                cols.append(f"{med[m]:8.1f} {e / med[m]:6.2f}" if m in med else f"{'-':>8} {'-':>6}")
            speedups.append(e / med["lazy"])
            fn = "-" if first_native is None else f"{first_native:.1f}"
            print(f"{fname:10} {e:8.1f} {cols[0]} {cols[1]} {cols[2]:>16} {first_lazy:17.1f} {retrace:14.1f} {fn:>19}  "
                  f"hits={stats.hits} eager={stats.eager}")
        print(f"geomean lazy speedup over eager: {statistics.geometric_mean(speedups):.2f}x")


if __name__ == "__main__":
    main()

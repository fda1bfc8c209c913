"""Time to first result of a warmed kornia function in a fresh process: from the persistent cache
(preloaded when the library's proxy is made, with and without prewarm) vs traced there, and vs
its cached call (target: first call from the cache <= 2x a cached call).

One run: a warm-up process stores the graphs of the test-suite's kornia cases (1x3x32x32) in a
temporary cache, through `lazytrace.trace_graph(kornia, cache=DIR)`. Then, each in a fresh
process that has imported torch and kornia:
- "preload": `trace_graph(kornia, cache=DIR)` (timed: it loads every stored graph), then each
  function called once (the first call, timed) and again for its cached call (median);
- "prewarm": the same with `prewarm=True` (the proxy also runs each graph once on
  constant-filled inputs);
- "trace": `trace_graph(kornia, cache=False)`: each function's first call traces there;
- "eager": kornia itself, for reference: its own first call in a fresh process vs its cached call
  (what cold caches and the framework's first-use costs give without lazytrace);
- "eager warmed": kornia itself after the warm-up prewarm gives a graph (each function run twice
  on an input of its signature, before any timed call): the first call the framework itself
  reaches in a fresh process, what a prewarmed graph's first call is measured against.
Each fresh process runs --repeat times (modes interleaved); a time is the median over them.
The ratios are per function (first call / cached call of the same process), then the median
and max over the functions; every function counts, the first of a process included.
With --framework jax or tensorflow, the same for a small library of five functions of that
framework (written to the temporary directory; 1x3x32x32 float32 inputs) instead of kornia.
With --jax-compilation-cache, every JAX process also turns on JAX's own persistent cache of
compiled programs (in the temporary directory, filled by the warm-up process): a fresh process
then loads the programs its first calls run instead of compiling them, eager or traced.

    python benchmarks/bench_persist.py [--framework kornia|jax|tensorflow] [--only NAME ...] [--repeat N]
                                       [--json PATH] [--jax-compilation-cache]
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
CHILD = r"""
import functools, json, statistics, sys, time, warnings
start = time.perf_counter()
import lazytrace
{setup}
imported = time.perf_counter() - start
warnings.simplefilter("ignore")
mode, cache, only = sys.argv[1], sys.argv[2], set(sys.argv[3:])
start = time.perf_counter()
if mode == "eager warmed":
    for name, _, make in CASES:
        if not only or name in only:
            for _ in range(2):
                functools.reduce(getattr, name.split("."), library)(*make(1))
traced = library if mode.startswith("eager") else \
    lazytrace.trace_graph(library, cache=cache if mode != "trace" else False, prewarm=mode == "prewarm")
made = time.perf_counter() - start
out, calls = {{}}, []
for name, _, make in CASES:
    if only and name not in only:
        continue
    lazy = functools.reduce(getattr, name.split("."), traced)
    args = make(1)
    start = time.perf_counter_ns()
    lazy(*args)
    first = (time.perf_counter_ns() - start) / 1000
    out[name] = {{"first_us": first, **{{k: lazy.stats.as_dict()[k] for k in ("loaded", "traces", "stored",
                                                                            "prewarmed")}}}} \
        if not mode.startswith("eager") else {{"first_us": first}}
    calls.append((name, lazy, args))
if mode not in ("trace", "warm"):
    for name, lazy, args in calls:     # each once more, in the same order: as cold as the first call
        start = time.perf_counter_ns()
        lazy(*args)
        out[name]["second_us"] = (time.perf_counter_ns() - start) / 1000
    for name, lazy, args in calls:     # then its cached call, in a loop
        samples, end = [], time.perf_counter() + 0.2
        while time.perf_counter() < end or len(samples) < 30:
            t = time.perf_counter_ns()
            lazy(*args)
            samples.append(time.perf_counter_ns() - t)
        out[name]["cached_us"] = statistics.median(samples) / 1000
        if not mode.startswith("eager"):
            out[name].update(hits=lazy.stats.hits, calls=lazy.stats.calls)
print(json.dumps({{"import_ms": imported * 1e3, "proxy_ms": made * 1e3, "functions": out}}))
"""
KORNIA = """
import torch, kornia
torch.set_num_threads(1)
sys.path.insert(0, {tests!r})
from kornia_cases import CASES
library = kornia
"""
#: --framework jax / tensorflow: a library of small functions, and how to make their inputs
LIBRARIES = {
    "jax": ("""
import jax
import jax.numpy as jnp

def normalize(x):
    return (x - x.mean(axis=(-1, -2), keepdims=True)) / (x.std(axis=(-1, -2), keepdims=True) + 1e-5)

def swish(x):
    return x * jax.nn.sigmoid(x)

def softmax(x):
    return jax.nn.softmax(x, axis=-1)

def gray(x):
    return 0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]

def chain(x):
    for _ in range(8):
        x = jnp.tanh(x) * 1.1 + 0.1
    return x
""", "jax.numpy.asarray(np.random.default_rng(0).random((n, 3, 32, 32), dtype=np.float32))"),
    "tensorflow": ("""
import tensorflow as tf

def normalize(x):
    mean, variance = tf.nn.moments(x, axes=[2, 3], keepdims=True)
    return (x - mean) / (tf.sqrt(variance) + 1e-5)

def swish(x):
    return x * tf.sigmoid(x)

def softmax(x):
    return tf.nn.softmax(x, axis=-1)

def gray(x):
    return 0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]

def chain(x):
    for _ in range(8):
        x = tf.tanh(x) * 1.1 + 0.1
    return x
""", "tf.constant(np.random.default_rng(0).random((n, 3, 32, 32), dtype=np.float32))"),
}
FRAMEWORK = """
import numpy as np
import {module}{alias}
{xla_cache}
sys.path.insert(0, {folder!r})
import bench_persist_{framework} as library
CASES = [(name, None, lambda n: ({make},)) for name in ("normalize", "swish", "softmax", "gray", "chain")]
"""
MODES = ("preload", "prewarm", "trace", "eager", "eager warmed")


#: --jax-compilation-cache: JAX's own persistent cache of compiled programs, in every mode (eager too)
XLA_CACHE = """
jax.config.update("jax_compilation_cache_dir", {folder!r} + "/xla")
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
"""


def child_code(framework: str, folder: str, xla_cache: bool = False) -> str:
    """The fresh process's script; for jax/tensorflow, their library is written to `folder`."""
    if framework == "kornia":
        return CHILD.format(setup=KORNIA.format(tests=str(HERE.parents[1] / "tests")))
    source, make = LIBRARIES[framework]
    Path(folder, f"bench_persist_{framework}.py").write_text(source)
    alias = " as tf" if framework == "tensorflow" else ""
    return CHILD.format(setup=FRAMEWORK.format(module=framework, alias=alias, folder=folder, framework=framework,
                                               make=make, xla_cache=XLA_CACHE.format(folder=folder) if xla_cache
                                               else ""))


def run(code, mode, cache, only):
    done = subprocess.run([sys.executable, "-c", code, mode, cache, *only], capture_output=True, text=True)
    if done.returncode:
        sys.exit(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def medians(runs: list) -> dict:
    """Per function, the median of each time over several fresh processes (counts of the first)."""
    functions = [r["functions"] for r in runs]
    names = [n for n in functions[0] if all(n in r for r in functions)]
    return {"import_ms": statistics.median(r["import_ms"] for r in runs),
            "proxy_ms": statistics.median(r["proxy_ms"] for r in runs),
            "functions": {n: {k: statistics.median(r[n][k] for r in functions) if k.endswith("_us") else v
                              for k, v in functions[0][n].items()} for n in names}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=["kornia", *LIBRARIES], default="kornia",
                        help="kornia's test cases (default), or a small library of jax or tensorflow functions")
    parser.add_argument("--only", nargs="*", default=[], help="case names (e.g. filters.gaussian_blur2d)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="fresh processes per mode; each time is the median over them (default 3)")
    parser.add_argument("--json", help="write the raw numbers here")
    parser.add_argument("--jax-compilation-cache", action="store_true",
                        help="jax: turn on JAX's persistent compilation cache in every process (all modes)")
    ns = parser.parse_args()
    if ns.repeat < 1:
        parser.error("--repeat must be at least 1")
    if ns.jax_compilation_cache and ns.framework != "jax":
        parser.error("--jax-compilation-cache goes with --framework jax")
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as folder:
        code = child_code(ns.framework, folder, ns.jax_compilation_cache)
        warm = run(code, "warm", cache, ns.only)
        runs = {mode: [] for mode in MODES}
        for _ in range(ns.repeat):            # modes interleaved: a busy moment touches all alike
            for mode, done in runs.items():
                done.append(run(code, mode, cache, ns.only))
        result = {mode: medians(runs[mode]) for mode in MODES}
    pre, warmed, traced, eager, ewarmed = (result[m]["functions"] for m in MODES)
    names = [n for n in pre if n in warmed and n in traced and n in eager and n in ewarmed and all(
        r[n]["loaded"] and not r[n]["traces"] and r[n]["hits"] == r[n]["calls"] for r in (pre, warmed))]
    print(f"{'function':36} {'preloaded':>10} {'prewarmed':>10} {'2nd call':>9} {'cached':>8} {'ratio':>6} "
          f"{'vs 2nd':>6} {'traced':>9} {'eager 1st':>9} {'eager':>7} {'ratio':>6} {'warmed 1st':>10} {'ratio':>6}")
    ratios, warm_ratios, second_ratios, speedups, eager_ratios, ewarm_ratios = [], [], [], [], [], []
    for name in names:
        first, wfirst = pre[name]["first_us"], warmed[name]["first_us"]
        second, cached, trace = warmed[name]["second_us"], warmed[name]["cached_us"], traced[name]["first_us"]
        ratios.append(first / pre[name]["cached_us"])
        warm_ratios.append(wfirst / cached)
        second_ratios.append(wfirst / second)
        speedups.append(trace / wfirst)
        efirst, ecached = eager[name]["first_us"], eager[name]["cached_us"]
        eager_ratios.append(efirst / ecached)
        wefirst, wecached = ewarmed[name]["first_us"], ewarmed[name]["cached_us"]
        ewarm_ratios.append(wefirst / wecached)
        print(f"{name:36} {first:8.0f}us {wfirst:8.0f}us {second:7.0f}us {cached:6.0f}us {wfirst / cached:6.2f} "
              f"{wfirst / second:6.2f} {trace:7.0f}us {efirst:7.0f}us {ecached:5.0f}us {efirst / ecached:6.2f} "
              f"{wefirst:8.0f}us {wefirst / wecached:6.2f}")
    skipped = sorted(set(pre) - set(names))
    if skipped:
        print(f"not replayed from the cache (traced or eager in a fresh process): {', '.join(skipped)}")
    stored = sum(r["stored"] for r in warm["functions"].values())
    prewarmed = sum(r["prewarmed"] for r in warmed.values())
    print(f"\n{len(names)} functions replayed from the cache ({stored} graphs stored by the warm-up, "
          f"{prewarmed} prewarmed)")
    print(f"fresh process: import {'torch+kornia' if ns.framework == 'kornia' else ns.framework} "
          f"{result['preload']['import_ms']:.0f} ms; "
          f"trace_graph(library, cache=DIR) (preload of {stored} graphs) {result['preload']['proxy_ms']:.1f} ms; "
          f"with prewarm=True {result['prewarm']['proxy_ms']:.1f} ms; "
          f"cache off {result['trace']['proxy_ms']:.2f} ms")
    if ratios:
        median, worst = statistics.median(ratios), max(ratios)
        wmedian, wworst = statistics.median(warm_ratios), max(warm_ratios)
        print(f"first call / cached call, preloaded: median {median:.2f}x, max {worst:.2f}x")
        print(f"first call / cached call, preloaded and prewarmed: median {wmedian:.2f}x, max {wworst:.2f}x")
        print(f"first call / second call (made after the other functions' first calls, as cold), prewarmed: "
              f"median {statistics.median(second_ratios):.2f}x, max {max(second_ratios):.2f}x")
        print(f"first call traced / first call prewarmed: median {statistics.median(speedups):.1f}x")
        print(f"for reference, without lazytrace: eager first call / eager cached call in a fresh process: "
              f"median {statistics.median(eager_ratios):.2f}x, max {max(eager_ratios):.2f}x")
        print(f"for reference, without lazytrace after the same warm-up (each function run twice first): eager "
              f"first call / its cached call: median {statistics.median(ewarm_ratios):.2f}x, "
              f"max {max(ewarm_ratios):.2f}x")
        for label, m, rs in (("preloaded", median, ratios), ("prewarmed", wmedian, warm_ratios)):
            print(f"target (median first call <= 2x a cached call), {label}: {'PASS' if m <= 2 else 'FAIL'} "
                  f"({sum(r > 2 for r in rs)} of {len(rs)} functions above 2x)")
    if ns.json:
        Path(ns.json).write_text(json.dumps({"warm": warm, **result}, indent=1))


if __name__ == "__main__":
    main()

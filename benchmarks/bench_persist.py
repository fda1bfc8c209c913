"""Time to first result of a warmed kornia function in a fresh process: replayed from the persistent
cache vs traced there, and vs its cached call (target: first call from the cache <= 2x a cached call).

One run: a warm-up process stores the graphs of the test-suite's kornia cases (1x3x32x32) in a
temporary cache; then a fresh process calls each function once with the cache on (loaded from
disk: read, decoded, source generated and compiled) and times its cached calls (medians), and
another fresh process calls each function once with tracing. Both fresh processes import torch
and kornia before timing. The first function of a process also pays one-time costs (reading
lazytrace's and kornia's file fingerprints, distribution versions, torch's list of overridable
functions): shown apart. A fourth fresh process gives the floor: each stored graph's generated
code (loaded and compiled untimed) run a first time there, vs the cached call: what the
framework's own first calls of these ops cost in a new process, which no cache can avoid.

Each fresh process runs --repeat times (modes interleaved); a time is the median over them.

    python benchmarks/bench_persist.py [--only NAME ...] [--repeat N] [--json PATH]
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
sys.path.insert(0, {tests!r})
import torch, lazytrace
from lazytrace.graph.tracer import make_graph
torch.set_num_threads(1)
from kornia_cases import CASES
warnings.simplefilter("ignore")
mode, cache, only = sys.argv[1], sys.argv[2], set(sys.argv[3:])
out = {{}}
for name, fn, make in CASES:
    if only and name not in only:
        continue
    args = make(1)
    lazy = lazytrace.trace_graph(fn, cache=cache if mode != "trace" else False)
    if mode == "ops":       # the floor: the stored graph's own code, generated untimed, run a first time
        key, leaves, backends = lazy._key(args, {{}})
        backend, plans = lazy._persistent().load(key, backends)
        if not plans:
            continue
        graph = make_graph(backend, plans[0], name=name, key=key, signature=lazy._signature, original=fn,
                           options=lazy._options, state=backend.global_state())
        call = functools.partial(graph.fn, *leaves)
    else:
        call = functools.partial(lazy, *args)
    start = time.perf_counter_ns()
    call()
    first = (time.perf_counter_ns() - start) / 1000
    row = {{"first_us": first, "loaded": lazy.stats.loaded, "traces": lazy.stats.traces,
            "stored": lazy.stats.stored}}
    if mode == "load":
        samples, end = [], time.perf_counter() + 0.2
        while time.perf_counter() < end or len(samples) < 30:
            t = time.perf_counter_ns()
            lazy(*args)
            samples.append(time.perf_counter_ns() - t)
        row["cached_us"] = statistics.median(samples) / 1000
    out[name] = row
print(json.dumps(out))
"""


def run(mode, cache, only):
    code = CHILD.format(tests=str(HERE.parents[1] / "tests"))
    done = subprocess.run([sys.executable, "-c", code, mode, cache, *only], capture_output=True, text=True)
    if done.returncode:
        sys.exit(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def medians(runs: list) -> dict:
    """Per function, the median of each time over several fresh processes (counts of the first)."""
    names = [n for n in runs[0] if all(n in r for r in runs)]
    return {n: {k: statistics.median(r[n][k] for r in runs) if k.endswith("_us") else v
                for k, v in runs[0][n].items()} for n in names}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], help="case names (e.g. filters.gaussian_blur2d)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="fresh processes per mode; each time is the median over them (default 3)")
    parser.add_argument("--json", help="write the raw numbers here")
    ns = parser.parse_args()
    if ns.repeat < 1:
        parser.error("--repeat must be at least 1")
    with tempfile.TemporaryDirectory() as cache:
        warm = run("warm", cache, ns.only)
        runs = {"load": [], "trace": [], "ops": []}
        for _ in range(ns.repeat):            # modes interleaved: a busy moment touches all alike
            for mode, done in runs.items():
                done.append(run(mode, cache, ns.only))
        load, traced, ops = (medians(runs[mode]) for mode in ("load", "trace", "ops"))
    names = [n for n in load if load[n]["loaded"] and not load[n]["traces"] and n in ops]
    print(f"{'function':40} {'from cache':>11} {'cached':>9} {'ratio':>6} {'ops first':>10} {'floor':>6} "
          f"{'traced':>10} {'trace/cache':>11}")
    ratios, floors, speedups = [], [], []
    for i, name in enumerate(names):
        first, cached, trace = load[name]["first_us"], load[name]["cached_us"], traced[name]["first_us"]
        floor = ops[name]["first_us"]
        note = "  (first of the process: one-time costs)" if i == 0 else ""
        if i:
            ratios.append(first / cached)
            floors.append(floor / cached)
            speedups.append(trace / first)
        print(f"{name:40} {first:9.0f}us {cached:7.0f}us {first / cached:6.2f} {floor:8.0f}us {floor / cached:6.2f} "
              f"{trace:8.0f}us {trace / first:10.1f}x{note}")
    skipped = sorted(set(load) - set(names))
    if skipped:
        print(f"not replayed from the cache (traced or eager in the fresh process): {', '.join(skipped)}")
    stored = sum(r["stored"] for r in warm.values())
    print(f"\n{len(names)} functions replayed from the cache ({stored} graphs stored by the warm-up)")
    if ratios:
        print(f"first call from the cache / cached call: median {statistics.median(ratios):.2f}x, "
              f"max {max(ratios):.2f}x (target <= 2x; first function of the process excluded)")
        print(f"floor: the same graphs' generated code run a first time in a fresh process (ops first) / "
              f"cached call: median {statistics.median(floors):.2f}x, max {max(floors):.2f}x")
        print(f"first call traced / first call from the cache: median {statistics.median(speedups):.1f}x")
    if ns.json:
        Path(ns.json).write_text(json.dumps({"warm": warm, "load": load, "trace": traced, "ops": ops}, indent=1))


if __name__ == "__main__":
    main()

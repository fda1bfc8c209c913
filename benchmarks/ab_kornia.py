#!/usr/bin/env python
"""bench_kornia.py, this checkout against another one, in one time window.

    python benchmarks/ab_kornia.py --against ../base --runs 3 -- --sizes 32 512 --no-compile --only enhance.invert

Runs bench_kornia.py (with the arguments after `--`) alternately on the other checkout
(`before`: its directory first on PYTHONPATH, its own bench script) and on this one (`after`),
--runs times each, and prints per function and size the medians over the runs of each run's
per-call medians: eager, lazy, direct, lazy/direct, lazy against eager, lazy - direct; then the
signature-lookup table (LazyGraph hit of an identity function against jax.jit dispatch).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def _run(checkout: str, bench_args: list[str], path: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([checkout, os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, os.path.join(checkout, "benchmarks", "bench_kornia.py"), *bench_args,
                    "--json", path], env=env, cwd=checkout, check=True, stdout=subprocess.DEVNULL)
    with open(path) as f:
        return json.load(f)


def _row(runs: list[dict], size: str, name: str) -> str:
    rows = [next(r for r in run["results"][size] if r["function"] == name) for run in runs]
    if any("lazy_ns" not in r or "direct_ns" not in r for r in rows):
        return "  (not timed: " + "; ".join(sorted({r["status"] for r in rows})) + ")"

    def med(f):
        return statistics.median(f(r) for r in rows)
    return (f"{med(lambda r: r['eager_ns']) / 1e3:9.2f} {med(lambda r: r['lazy_ns']) / 1e3:9.2f} "
            f"{med(lambda r: r['direct_ns']) / 1e3:9.2f} {med(lambda r: r['lazy_ns'] / r['direct_ns']):12.3f} "
            f"{med(lambda r: 100 * (r['lazy_ns'] / r['eager_ns'] - 1)):+13.1f}% "
            f"{med(lambda r: r['lazy_ns'] - r['direct_ns']) / 1e3:14.2f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--against", required=True, metavar="PATH", help="the other checkout of lazytrace (before)")
    p.add_argument("--runs", type=int, default=3, help="bench runs per side, alternating (default 3)")
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="after `--`: bench_kornia.py's arguments")
    opts = p.parse_args()
    bench_args = opts.bench_args[1:] if opts.bench_args[:1] == ["--"] else opts.bench_args
    sides = {"before": os.path.abspath(opts.against), "after": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    runs = {side: [] for side in sides}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(opts.runs):
            for side, checkout in sides.items():
                runs[side].append(_run(checkout, bench_args, os.path.join(tmp, f"{side}{i}.json")))
    print(f"bench_kornia.py {' '.join(bench_args)}: {opts.runs} runs per side, alternating; medians over the runs "
          f"of each run's per-call medians (us)\nbefore: {sides['before']}\nafter:  {sides['after']}")
    for size in runs["before"][0]["results"]:
        print(f"\n{size}x{size}\n  {'function':36s} {'eager':>9s} {'lazy':>9s} {'direct':>9s} {'lazy/direct':>12s} "
              f"{'lazy vs eager':>14s} {'lazy-direct':>14s}")
        for row in runs["before"][0]["results"][size]:
            for side in sides:
                print(f"  {row['function'] + ' [' + side + ']':36s} {_row(runs[side], size, row['function'])}")
    print("\nsignature lookup: LazyGraph hit of an identity function, 1x3x32x32 (us)")
    for side in sides:
        lookups = [run["signature_lookup"] for run in runs[side]]
        hit = statistics.median(x["lazytrace_ns"] for x in lookups) / 1e3
        fn = statistics.median(x["graph fn_ns"] for x in lookups) / 1e3
        jax = [x["lazytrace_ns"] / x["jax.jit_ns"] for x in lookups if x.get("jax.jit_ns")]
        print(f"  [{side}] hit {hit:.2f}, generated function {fn:.2f}, overhead {hit - fn:.2f}"
              + (f", hit / jax.jit dispatch {statistics.median(jax):.3f}" if jax else ", jax.jit not timed"))


if __name__ == "__main__":
    main()

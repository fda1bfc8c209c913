#!/usr/bin/env python
"""Print the kornia coverage table (issue 3) as markdown, for the README.

    python benchmarks/kornia_coverage_report.py
    python benchmarks/kornia_coverage_report.py --to torch    # enable("kornia", to="torch")

Runs tests/kornia_coverage.py: every public function of the listed kornia submodules and a set
of augmentation classes, through `with lazytrace.enable("kornia"): import kornia`, each called
eagerly and traced on two different random inputs of one signature (outputs compared exactly,
then gradients where the output is differentiable). Per module: functions, called, served from
a graph on the second call, fell back (with reasons), wrong, skipped.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import kornia_coverage as kc  # noqa: E402


def _module(name: str) -> str:
    return name.rsplit(".", 1)[0]


def table(results, skipped) -> str:
    rows = defaultdict(lambda: {"called": 0, "graph": 0, "fallback": 0, "wrong": 0, "error": 0, "skipped": 0,
                                "grad": 0})
    for r in results:
        row = rows[_module(r.name)]
        row["called"] += 1
        row[r.status] += 1
        row["grad"] += r.gradient.startswith("equal")
    for name in skipped:
        rows[_module(name)]["skipped"] += 1
    head = ("| kornia module | public functions | called | served from a graph (2nd call) | fell back | wrong "
            "| gradients compared (equal) | skipped |\n|---|---|---|---|---|---|---|---|")
    lines = [head]
    total = defaultdict(int)
    for module, row in rows.items():
        label = "augmentation (classes)" if module == "augmentation" else module
        n = row["called"] + row["skipped"]
        lines.append(f"| {label} | {n} | {row['called']} | {row['graph']} | {row['fallback']} | "
                     f"{row['wrong'] + row['error']} | {row['grad']} | {row['skipped']} |")
        if module != "augmentation":
            for k, v in row.items():
                total[k] += v
    n = total["called"] + total["skipped"]
    lines.append(f"| **functions, all modules** | **{n}** | {total['called']} | **{total['graph']} "
                 f"({100 * total['graph'] / n:.1f}%)** | {total['fallback']} | {total['wrong'] + total['error']} | "
                 f"{total['grad']} | {total['skipped']} |")
    return "\n".join(lines)


def fallbacks(results, skipped) -> str:
    lines = ["| function | why it is not served from a graph |", "|---|---|"]
    by_reason = defaultdict(list)
    for r in results:
        if r.status == "fallback":
            by_reason["; ".join(r.reasons)].append(r.name)
    for reason, names in sorted(by_reason.items(), key=lambda x: -len(x[1])):
        lines.append(f"| {', '.join(names)} | {reason} |")
    lines += [f"| {name} (skipped) | {reason} |" for name, reason in skipped.items()]
    problems = [f"| {r.name} (**{r.status}**) | {r.detail} |" for r in results if r.status in ("wrong", "error")]
    return "\n".join(lines + problems)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--to", choices=["torch"], help='pass to= to enable("kornia"): functions without '
                                                         'array arguments are traced against that framework')
    args = parser.parse_args()
    warnings.simplefilter("ignore")       # retrace warnings of the fallbacks are expected here
    results, skipped = kc.run_all(**({"to": args.to} if args.to else {}))
    print(table(results, skipped))
    print()
    print(fallbacks(results, skipped))


if __name__ == "__main__":
    main()

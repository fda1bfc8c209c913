#!/usr/bin/env python
"""The calls a trace sees over bench_kornia's suite (1x3x32x32), and the Python bytecodes of its first calls.

    PYTHONPATH=<tree> .venv/bin/python benchmarks/kornia_call_kinds.py [--top N]

After three warm-up rounds (every per-code and per-function cache warm, remembered walks replayed),
one more round of fresh LazyGraphs of the suite's 48 functions:
  kinds      TraceSession.on_call and on_metadata invocations by the call's kind (CallFacts.kind;
             UNKNOWN is resolved by the result), metadata reads by name
  bytecodes  total Python bytecodes of the round's first calls (sys.settrace opcode events), and the
             N functions executing most
"""
import argparse
import collections
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--top", type=int, default=15)
    args = p.parse_args()
    sys.argv = sys.argv[:1]             # (bench_kornia parses its own arguments at import)
    import torch
    import bench_kornia
    import lazytrace
    from first_call_bytecodes import bytecodes
    from lazytrace.graph import tracer

    warnings.simplefilter("ignore")
    x = torch.rand(1, 3, 32, 32)
    suite = [(fn, build(x, 32)) for _, fn, build in bench_kornia._suite()]

    def round_(count=None):
        total = 0
        for fn, (a, k) in suite:
            if count is None:
                lazytrace.trace_graph(fn)(*a, **k)
            else:
                total += bytecodes(lambda: lazytrace.trace_graph(fn)(*a, **k), lambda out: None, count)
        return total

    for _ in range(3):
        round_()
    kinds, names = collections.Counter(), collections.Counter()
    on_call, on_metadata = tracer.TraceSession.on_call, getattr(tracer.TraceSession, "on_metadata", None)

    def counted_call(self, func, a, k, caller=None, facts=None):
        facts = facts if facts is not None else self.backend.call_facts(func)
        result = on_call(self, func, a, k, caller, facts)
        kind = facts.kind.name
        if kind == "UNKNOWN":
            kind += " -> array" if isinstance(result, torch.Tensor) or isinstance(result, (tuple, list)) and any(
                isinstance(r, torch.Tensor) for r in result) else " -> other"
        kinds["on_call " + kind] += 1
        if kind == "METADATA":
            names[getattr(facts, "name", func)] += 1
        return result

    def counted_metadata(self, func, a, caller, facts):
        kinds["on_metadata"] += 1
        names[getattr(facts, "name", func)] += 1
        return on_metadata(self, func, a, caller, facts)

    tracer.TraceSession.on_call = counted_call
    if on_metadata is not None:         # (a tree before session 15: every call is on_call's)
        tracer.TraceSession.on_metadata = counted_metadata
    try:
        round_()
    finally:
        tracer.TraceSession.on_call = on_call
        if on_metadata is not None:
            tracer.TraceSession.on_metadata = on_metadata
    print(f"## calls seen over {len(suite)} functions ({sum(kinds.values())}; on_metadata's fallbacks to "
          f"on_call are counted by both)")
    for kind, n in kinds.most_common():
        print(f"{kind:28s} {n:6d}")
    print("metadata reads by name: " + ", ".join(f"{name} {n}" for name, n in names.most_common()))
    per_code = collections.Counter()
    print(f"## first-call bytecodes, total {round_(per_code)}")
    for (path, qualname), n in per_code.most_common(args.top):
        print(f"{n:9d}  {path.rpartition('/')[2]}:{qualname}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""What one recorded torch call costs inside a trace: Python bytecodes (deterministic) and thread CPU.

    PYTHONPATH=<tree> .venv/bin/python benchmarks/per_call_cost.py [op ...]

For each kind of call, a function making it 10 times and one making it 40 times are traced (fresh
LazyGraphs, after two warm-up traces); the difference over 30 calls is the cost of one call, trace
passes included (a call the passes drop costs them too). Thread CPU is the min of 15 traces of each,
against eager's min: swings with a loaded machine, the bytecode count does not (it leaves out C work:
torch's dispatch, hashing, allocation).
"""
import contextlib
import os
import sys
import time
import warnings

import torch
import torch.nn.functional as F

import lazytrace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import first_call_bytecodes  # noqa: E402  (its opcode counter)

warnings.simplefilter("ignore")
x = torch.rand(1, 3, 32, 32)


def _add_under_no_grad(y, t):
    with torch.no_grad():       # a with block (its manager read at each call: graph/handlers.py)
        return y + t


def _add_under_suppress(y, t):
    with contextlib.suppress(RuntimeError):
        return y + t


w = torch.rand(3, 1, 3, 3)
OPS = {
    "t + t": lambda y, t: y + t,
    "t * 1.01": lambda y, t: y * 1.01,
    "relu": lambda y, t: torch.relu(y),
    "getitem": lambda y, t: y[:, :, 1:, 1:],
    "F.pad": lambda y, t: F.pad(y, [1, 1, 1, 1]),
    "mean kw": lambda y, t: y.mean(dim=1, keepdim=True),
    "stack": lambda y, t: torch.stack([y, t], 1),
    "conv2d": lambda y, t: F.conv2d(y, w, padding=1, groups=3),
    "shape": lambda y, t: y.shape,
    "no_grad +": _add_under_no_grad,
    "suppress +": _add_under_suppress,
}


def repeated(op, n):
    def f(t):
        for _ in range(n):
            op(t, t)
        return t
    return f


def bytecodes(call) -> int:
    return first_call_bytecodes.bytecodes(call, lambda result: None)


def least_cpu(call, times=15) -> float:
    best = float("inf")
    for _ in range(times):
        t = time.thread_time()
        call()
        best = min(best, time.thread_time() - t)
    return best


def main():
    lazytrace.trace_graph(lambda t: t + 1)(x)       # lazytrace's one-time set-up
    for name in sys.argv[1:] or OPS:
        few, many = repeated(OPS[name], 10), repeated(OPS[name], 40)
        for f in (few, many):
            for _ in range(2):
                lazytrace.trace_graph(f)(x)
        traced = [bytecodes(lambda: lazytrace.trace_graph(f)(x)) for f in (few, many)]
        eager = [bytecodes(lambda: f(x)) for f in (few, many)]
        cpu = [least_cpu(lambda: lazytrace.trace_graph(f)(x)) for f in (few, many)]
        eager_cpu = [least_cpu(lambda: f(x)) for f in (few, many)]
        print(f"{name:10s} bytecodes/call {(traced[1] - traced[0]) / 30:6.0f} (eager {(eager[1] - eager[0]) / 30:4.0f})"
              f"  thread CPU/call {(cpu[1] - cpu[0]) / 30 * 1e6:6.1f} us (eager {(eager_cpu[1] - eager_cpu[0]) / 30 * 1e6:5.1f})")


if __name__ == "__main__":
    main()

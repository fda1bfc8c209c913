#!/usr/bin/env python
"""JAX's own cost of a jax.numpy call given a tracer, which no backend can cut (issue 4's floor).

    python benchmarks/jax_tracer_floor.py

A minimal `core.Trace` answers each primitive at once with a ready array (no computation, no
recording): the time of `jnp.exp(tracer)` under it is JAX's Python path from the call to
`process_primitive` (the C++ dispatcher's cache miss, argument checks, abstract values, the
cached jaxpr lookup, bind), against the eager call in a tight loop (thread CPU, min of 5 x 2000).
Session 11, 2026-11-23, two runs (load 3.5-5 on 2 cores), eager / JAX's path given a tracer, us:
jnp.exp 8.7 / 16.6 and 8.9 / 18.7; jax.nn.sigmoid 7.4 / 15.5 and 15.5 / 18.1; `x * 1.702` 20.2 / 26.5
and 19.8 / 28.0 (lazytrace's operators skip this path); jnp.subtract(t, t) 16.2 / 49.9 and 11.7 / 23.9.
"""
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core

x = jnp.asarray(np.random.default_rng(0).random((3, 32, 32), dtype=np.float32))


class ReadyTracer(core.Tracer):
    __slots__ = ("val",)

    def __init__(self, trace, val):
        self._trace = trace
        self.val = val
        self.aval = core.typeof(val)


class ReadyTrace(core.Trace):
    """Answers every primitive with `x` (each call below maps a 3x32x32 float32 array to one)."""

    def process_primitive(self, primitive, tracers, params):
        out = ReadyTracer(self, x)
        return [out] if primitive.multiple_results else out


def thread_us(f, n=2000, rounds=5) -> float:
    best = []
    for _ in range(rounds):
        t = time.thread_time_ns()
        for _ in range(n):
            f()
        best.append((time.thread_time_ns() - t) / n / 1e3)
    return min(best)


CALLS = {"jnp.exp": jnp.exp, "jax.nn.sigmoid": jax.nn.sigmoid, "x * 1.702 (operator)": lambda a: a * 1.702,
         "jnp.subtract(x, x)": lambda a: jnp.subtract(a, a)}

for name, call in CALLS.items():
    for _ in range(5):
        jax.block_until_ready(call(x))
    eager = thread_us(lambda: call(x))
    trace = ReadyTrace()
    tracer = ReadyTracer(trace, x)
    with core.set_current_trace(trace):
        call(tracer)
        given_tracer = thread_us(lambda: call(tracer))
    print(f"{name:24} eager {eager:6.1f} us   JAX's path to process_primitive, given a tracer {given_tracer:6.1f} us")

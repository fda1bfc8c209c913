"""JAX backend.

Interception: JAX's own tracing. Input arrays are handed to the function as
`JaxTracer`s of a `LazyTrace`, a `jax.core.Trace` made current for this
thread only (JAX keeps its current trace per thread). Every primitive that
jax.numpy, jax.lax, jax.nn, jax.random, array methods and operators bind
reaches `process_primitive`, which reports it to the session and computes it
eagerly on the real arrays under the trace that was current before (plain
evaluation, or an outer `jax.grad` / `jax.vmap` / `jax.jit`). A jitted
function called inside (most of jax.numpy is) is one `jit` primitive.

What is recorded, and replayed: a `jax.jit` function called inside (all of
jax.numpy's functions, jax.nn's, a user's) is recorded as that call, with its
arguments, static ones and keywords included: the trace runs it, and every
replay calls it, through JAX's C++ dispatch with the cache its eager calls
filled (JAX shares it between jits of one function and options), so a trace
after eager calls compiles and dispatches nothing through Python. It is found
on the stack where JAX binds its `jit` primitive (checked by the identity of
the jaxpr); a call that closes over tracers, takes them inside other pytree
nodes, returns anything but arrays or a flat tuple/list of them, or donates
arguments is recorded as its primitive, replayed by JAX's C++ `pjit`
dispatcher over the same jaxpr. The arithmetic operators of a tracer
(`+ - * / **`, reflected too) with a Python number, a concrete array or
another tracer record the jax.numpy call JAX's operator makes, without going
through JAX's Python path for a jitted call given a tracer. A custom_jvp /
custom_vjp function (jax.nn.relu, a user's) is recorded as its own call the
same way (its rule serves `jax.grad` of a graph; staging it into a jaxpr
compiled a new XLA executable at every trace: 46-49 ms for relu, now 2-7 ms);
traced under an outer transformation it runs eagerly. Any other primitive
replays as eager dispatches it: an eager rule of its own (`slice` as a
`dynamic_slice` compiled once per shape, `stop_gradient` returning its
argument), else `dispatch.xla_primitive_callable`. Results are bit-identical
to eager (one exception: a `jax.jit` of a closure over the function's own arrays,
`jax.jit(lambda v: v * x.sum())(x)`, compiles `x` into eager's program as a constant, which
XLA may fold in another summation order; the graph passes it as an argument: last-bit
differences, as between eager and jax.jit of the whole function), and the Python work of jax.numpy's wrappers (operators, argument
checks, dtype promotion) is gone from a replay. (Recording `x[0]` as JAX's
indexing call was tried: a trace 3x cheaper per index, but a replay of JAX's
eager indexing costs ~140 us an index against ~15 us for its primitives.)

Measured on this repository's CI machine kind (2 cores, jax 0.10.2 CPU), a
function of 8 jax.numpy calls on a 3x8 array: eager 295-325 us; replaying the
recorded primitives with `Primitive.bind` 512 us (bind's Python path for `jit`
is slower than jax.numpy's C++ fast path); with C++ dispatch 207 us;
`jax.jit` of the whole function 9-16 us (`return_backend_traced_fn=True`).
The alternative of `jax.make_jaxpr` + `eval_jaxpr` evaluates the same
primitives through `bind` (the 512 us path) and cannot read values back into
Python (`if x.max() > 0`), which the tracer here guards like the other
backends do. benchmarks/bench_frameworks.py (six small functions on 3x32x32,
results/frameworks_cpu.txt, machine shared, load 2-4): LazyGraph over eager
1.07x to 7.7x, geomean 2.0x-2.3x (swish 1.07x; thread CPU 1.18x); jax.jit
cached 2.3x to 18x. First call (trace): thread CPU of a first trace after
eager calls, mean of 2 runs, before -> after this backend's recording of
jitted calls, operators and custom rules: normalize 4.9 -> 2.5 ms, swish
2.8 -> 1.3, softmax 3.4 -> 2.7, blur 6.9 -> 5.3, gray 4.9 -> 4.2, chain16
4.0 -> 2.0; in the benchmark's one-shot wall-clock column 4.4x to 19x an
eager call (swings 2x between runs at that load; a second trace 2.7x-9.5x).
What is left per jax.numpy call (thread CPU, chains of 30 calls): JAX's own
Python path for a jitted function given a tracer (argument parsing, abstract
values, the cached jaxpr lookup, bind: 60-90 us; operators skip it), the
tracer's bookkeeping (~25-35 us), this backend's glue (~30 us: frame lookup,
tracer objects, switching traces), and the call itself (~25-40 us inside a
trace against 8-20 us in a tight eager loop: XLA's CPU worker thread wakes
for each call after a gap of Python work); an operator costs ~100 us of
trace, a jax.numpy call ~140-190 us; plus the trace's fixed cost (~0.3-0.4
ms for a one-call function) and constants computed inside (blur's kernel:
each of its calls takes the same path before it is folded).
Session 6 (issue 4's target, first call <= 5x an eager call), measured, not met: a trace
and the first replay of the six benchmark functions compile nothing with XLA (jax.monitoring:
no compile event after the eager calls). Python bytecodes per first call (sys.settrace, the
same in every run: the machine was shared, load 4-6 on 2 cores, timings swung 2x): swish
12965 against eager's 327 (jax.numpy is C++ below its Python wrappers), an identity function
6625 (the fixed cost), ~1000-1300 per recorded call; lazytrace's framework-free tracer ~75% of
them, this backend ~10%, JAX's own Python ~8%. The calls themselves cost more inside a trace
than in eager's tight loop: JAX's CPU client dispatches to a worker thread that sleeps during a
gap of Python work; a call after ~50-100 us of it costs 100-140 us of wall clock (~50 us of
CPU) against 24-41 us back to back at that load (jnp.subtract, jnp.mean, `x * 1.702`, 3x32x32;
JAX_CPU_ENABLE_ASYNC_DISPATCH=0: 70-150 us), and a trace's wall clock was ~3x its thread CPU.
So swish (eager ~100 us) cannot trace in 500 us while each of its 3 calls costs ~100 us of
wall clock and the tracer's fixed cost is 6600 bytecodes. What this backend could cut it did:
explanations' text memoized per global state and per (shape, dtype) (~7% of a swish trace).
Session 9 (benchmarks/first_call_repeat.py: medians of 20 fresh LazyGraphs; load 3-6 on 2
cores): one `jnp.exp` under a trace, wall clock from the user's call (medians of a 20-call
chain): 30 us in JAX's own Python path before `process_primitive` (the C++ dispatcher's
cache_miss, _infer_params, _run_python_pjit, bind; no hook short of patching JAX's modules), 11
us here to find the jitted call on the stack, 15 us of the tracer before `run`, 50 us in `run`
(the call itself 26-35 us against 12 us eager, the rest unwrapping and the result's tracer), 12
us of the tracer's recording, 5 us back through JAX: ~125 us against 12 us eager. Cut here:
flat arguments unwrapped in one pass (`base.flat_unwrap`), `_plain` without generator expressions,
a jitted call named once: Python bytecodes of a first call normalize 25540 -> 25066, softmax
25756 -> 25108, chain16 36218 -> 35594 (-2%). JAX's swish (eager 45 us on a quiet machine) has
a floor of the identity function's first trace, ~650 us (thread CPU, load ~4): 14x.
Session 11 (results/first_call_jaxtf_s11.txt): the benchmark times a first call after
gc.collect(), which leaves the trace's code and data out of the CPU caches: an identity trace
costs 170-220 us of thread CPU warm, 500-700 after a collection. Two cuts here: a tracer of an
array on one device takes the array's own aval (typeof's result there, without its cache
lookup) and `run` switches traces without a context manager (bytecodes of a first call chain16
30680 -> 28981, swish 12965 -> 12618; an operator in a chain, warm, ~100 -> ~75 us); and in
backends/mtstate.py the ctypes types the global generators are read with are held (ctypes made
them anew after each collection: ~130 us of every trace after one, now ~60). JAX's own part,
benchmarks/jax_tracer_floor.py (a core.Trace answering each primitive at once): JAX's Python
before `process_primitive` for jnp.exp given a tracer 17-19 us (eager call 9 us), jax.nn.sigmoid
16-18 us (7-15), jnp.subtract(t, t) 24-50 us (12-16).
Session 12 (results/first_call_jaxtf_s12.txt): a trace's own cost is Python (perf: the interpreter
~75% of the main thread's time in a loop of swish traces, the rest XLA's dispatch), so bytecodes
measure it. A jitted call under the trace cost ~2500 of them, ~45 us more than an operator: JAX's
own Python ~760, and graph.reads and handlers walking up through JAX's frames from `bind` (the
tracer took the frame below the interceptor's) ~330. Now every primitive JAX binds names the first
frame outside JAX's modules to the tracer (`_outside_jax`), JaxTracer is in JAX's table of
abstract-value rules (typeof and shaped_abstractify walked its MRO), `run` switches traces only
where Primitive.bind has not made the parent current already, and arguments holding tuples of
numbers take the one-pass path: a jitted call ~2090 bytecodes (jnp.sum with keywords 3212 ->
2535), a first call of normalize 21188 -> 19156, swish 13159 -> 12132, softmax 25614 -> 21966;
thread CPU of a first call, interleaved A/B: 3-8% less (swish after a collection 663 -> 608 us,
min of 4 processes). Left per jitted call: JAX's ~630, the framework-free tracer's ~830, this
backend's ~550; an identity trace's ~6840 (150-170 us warm, ~300 after a collection).
Session 13 (results/first_call_jaxtf_s13.txt): trims here (a jitted call's frame looked at where
it is before walking, its arguments checked in one pass, its jaxpr's effects kept with its cached
PjitParams, intercept without a generator): 1-2% of a first call's bytecodes. The larger cost is
not Python: each call a trace runs takes 55-90 us of wall clock against 8-11 us back to back in
eager's loop, of which ~15 us is this thread's CPU. After a gap of >~25 us of Python work, JAX's
CPU dispatch wakes an XLA Eigen worker that preempts this thread (0.7-0.9 involuntary context
switches per call on the 2-core CI kind; none back to back; the same with async dispatch off and
single-threaded Eigen): swish's three calls cost ~200 us of its ~500 us trace. Only running fewer
calls during a trace (deferring them to run back to back) would remove that.
Session 14 built that deferral (branch `jaxdefer`, not merged; figures in
benchmarks/results/first_call_jax_s14_defer.txt): under plain evaluation on one device, a call whose
output aval JAX already knew (a jitted call's jaxpr; a primitive learned from an earlier run on the
same avals) was recorded without running, handed back as a tracer of that aval, and the pending
calls ran back to back where a value was needed (a read back, printing, the outputs, the return).
First calls, medians of 30 fresh LazyGraphs (`benchmarks/first_call_repeat.py --frameworks jax`,
both trees interleaved, load 3.5-4.6): chain16 -25% to -35% of wall clock, softmax -9%, normalize
-2%, swish +2%; +4-6.5% bytecodes (the bookkeeping of ~100 per deferred call); at low load (the
worker wakes on the other core) chain16 ~-5%. One wake is left per trace, and what remains of a
small function's first call is the tracer's Python. Not kept for that gain: ~230 lines here, and a
hazard a deferral brings (an array the function deletes with `a.delete()` while a pending call still
reads it fails there, and the eager rerun then raises where eager code would not).

Python values read back (`bool`, `int`, `float`, `.item()`, `.tolist()`) are
guards. A jax function that asks JAX's core for a concrete value to decide a
shape gets it (`JaxTracer.to_concrete_value`): a scalar (`jnp.nonzero`'s count
without `size=`) is read back like `.item()` and guarded; another array
(`jnp.bincount` without `length=`) lets the function go on with its values and
makes that signature run eagerly from then on, with the reason recorded, as does a
boolean mask index (`x[x > 0.5]`, whose concreteness JAX's indexing asks for). Other errors a
tracer causes (JAX's TracerIntegerConversionError ...) stop the trace and the call runs eagerly (`caused_by_tracing`):
what the function did in Python before the error then happens twice. `jax.random` keys
passed in are inputs like any array; a key made inside from a constant seed
is a constant (JAX's random numbers are a pure function of the key).
"""
from __future__ import annotations

import enum
import importlib.util
import inspect
import json
import re
import sys
from functools import lru_cache, partial

import jax
import numpy as np
from jax._src import callback, config as jax_config, core, debugging, dispatch, pjit, tree_util, xla_bridge
from jax._src.array import ArrayImpl
from jax._src.interpreters import pxla
from jax._src.lax import lax as lax_internal, slicing
from jax._src.lib import _jax
from jax._src.random import prng as prng_impls
from jax._src.random.prng import PRNGKeyArray

from .base import (READBACK_BUILTINS, Backend, CallKind, ReadbackMixin, flat_unwrap, kept_per_argument,
                   load_numpy_arrays, save_numpy_arrays, unwrap_tree)

_ARRAYS = (ArrayImpl, PRNGKeyArray)     # concrete arrays; typed random keys are arrays too
_trace_context = jax_config.trace_context
_LEGACY_PRNG_KEY = jax_config.legacy_prng_key
_DEFAULT_PRNG = jax_config.default_prng_impl      # (jax.config.jax_default_prng_impl is a property reading it)
_DESCRIBED = ("jax_enable_x64", "jax_default_matmul_precision", "jax_numpy_dtype_promotion",
              "jax_numpy_rank_promotion", "jax_default_device", "jax_disable_jit", "jax_threefry_partitionable")
_NEEDS_CONCRETE = core.concrete_or_error.__code__
#: JAX's boolean-mask indexing (`x[x > 0.5]`) asks core.is_concrete for the mask and raises without it
_TO_CONCRETE, _IS_CONCRETE = core.to_concrete_value.__code__, core.is_concrete.__code__
try:
    from jax._src.numpy.indexing import NDIndexer as _NDIndexer
    _NEEDS_MASK = _NDIndexer.expand_bool_indices.__code__
except (ImportError, AttributeError):      # another layout: the mask raises, and the call runs again eagerly
    _NEEDS_MASK = None


def _mask_index(frame) -> bool:
    """Whether core.to_concrete_value (`frame`) was asked by core.is_concrete for a boolean mask
    index (NDIndexer.expand_bool_indices), which JAX must have concrete."""
    probe = frame.f_back
    return probe is not None and probe.f_code is _IS_CONCRETE and probe.f_back is not None \
        and probe.f_back.f_code is _NEEDS_MASK


def _concrete_caller() -> str:
    """The function that asked JAX's core for a concrete value (`jnp.nonzero`'s implementation)."""
    frame = sys._getframe(2)
    while frame.f_back is not None and frame.f_globals.get("__name__") == core.__name__:
        frame = frame.f_back
    return f"{frame.f_globals.get('__name__', '?')}.{frame.f_code.co_qualname}"


_ONE_DEVICE = jax.sharding.SingleDeviceSharding
_TRACE_ERRORS = (jax.errors.ConcretizationTypeError, jax.errors.NonConcreteBooleanIndexError,
                 jax.errors.TracerArrayConversionError, jax.errors.TracerIntegerConversionError)


def _readback(name):
    def method(self, *args):
        return self._lt_session.on_call(_method_callable(name), (self,) + args, {})
    return method


_METHOD_CALLABLES: dict = {}


def _method_callable(name):
    """operator.methodcaller-like function with a stable identity, named after the method."""
    fn = _METHOD_CALLABLES.get(name)
    if fn is None:
        def fn(array, *args):
            return getattr(array, name)(*args)
        fn.__name__ = fn.__qualname__ = name
        _METHOD_CALLABLES[name] = fn
    return fn


#: `x.item()`, `x.tolist()` of a tracer: guards (named so in a stored graph)
READ_ITEM, READ_TOLIST = _method_callable("item"), _method_callable("tolist")


def _escape(self, *args, **kwargs):
    return self._lt_session.on_call(np.asarray, (self,), {})


class _HostCopy(Exception):
    """`jax.device_get(x)` hands a tracer back as it is (a jax.Array, where eager gives a NumPy
    array): its `copy_to_host_async()` raises this, and the call runs eagerly."""

    reason = "copies an array to the host (jax.device_get: a NumPy array), which a graph would not"


class JaxTracer(ReadbackMixin, core.Tracer):
    """Stands in for a jax.Array during a trace; JAX routes every primitive on it to LazyTrace."""

    __slots__ = ("_lt_array", "_lt_session")

    def __init__(self, trace, value, session):
        self._trace = trace
        self._lt_array = value
        self._lt_session = session
        # (a concrete array on one device: its own aval, which is what core.typeof gives for it,
        # without typeof's cache lookup, a third of this backend's bytecodes per recorded call)
        self.aval = value.aval if type(value) is ArrayImpl and type(value.sharding) is _ONE_DEVICE \
            else core.typeof(value)

    def to_concrete_value(self):
        # abstract, as under jax.jit: jax.numpy probes it for optional shortcuts. Where JAX needs
        # the value (core.concrete_or_error): a scalar (`jnp.nonzero`'s count) is read back, a
        # guard of the graph; another array (`jnp.bincount`'s argument without length=) makes
        # this signature eager, and this call goes on with the value (stopping here would run
        # the function twice, its Python effects too)
        caller = sys._getframe(1)
        if caller.f_code is _NEEDS_CONCRETE:
            if not self.aval.shape:         # a scalar (jnp.nonzero's count): read back, guarded
                return self.item()
            self._lt_session.fail(f"needs a concrete value ({_concrete_caller()}), which a graph could not replay")
            return self._lt_array
        if caller.f_code is _TO_CONCRETE and _mask_index(caller):
            self._lt_session.fail("a boolean mask index (x[mask]): the result's shape depends on the mask's values")
            return self._lt_array
        return None

    def full_lower(self):
        # after the trace (a generator the function returned, an object it left behind), JAX's
        # eager evaluation takes the array: the tracer computes as that array would
        return self._lt_array if self._lt_session.closed else self

    def _lt_call(self, func, args):
        return self._lt_session.on_call(func, args, {})

    item = _readback("item")
    tolist = _readback("tolist")
    __array__ = _escape
    __dlpack__ = _escape
    tobytes = _escape

    @property
    def _debug_info(self):
        # read by JAX's escaped_tracer_error alone (core.py), as it is about to raise
        # UnexpectedTracerError for this tracer: used where its trace is not current, in a thread
        # the function started (JAX's current trace is per thread). The trace fails and the call
        # runs again eagerly, where that thread gets an array.
        session = self._lt_session
        if not session.closed and session.misused is None:
            session.misused = ("a tracer of the trace was used in another thread (one the function started), "
                               "where JAX's trace is not current: JAX refused it")
        return None

    def block_until_ready(self):
        return self

    def copy_to_host_async(self):
        raise _HostCopy(_HostCopy.reason)

    @property
    def device(self):
        return self._lt_array.device

    @property
    def sharding(self):
        return self._lt_array.sharding


def _operator_calls() -> dict:
    """Array operator -> (the jax.numpy function JAX's operator calls, reflected), for the
    arithmetic operators whose JAX code (jax/_src/numpy/array_methods.py `_operator_mul` ...)
    only checks the operand's type and calls that function; a jnp.ufunc as the jitted function
    its __call__ hands the arrays to. {} where this jax lays them out otherwise."""
    try:
        from jax._src.numpy import ufuncs
        pairs = {"add": ufuncs.add, "sub": ufuncs.subtract, "mul": ufuncs.multiply,
                 "truediv": ufuncs.true_divide, "pow": ufuncs.power}
        calls = {}
        for name, fn in pairs.items():
            call = getattr(fn, "_ufunc__static_props", {}).get("call", fn) if isinstance(fn, jax.numpy.ufunc) \
                else fn
            if call is None or not callable(call):
                return {}
            calls[name], calls["r" + name] = (call, False), (call, True)
        return calls
    except (ImportError, AttributeError):
        return {}


def _fast_operator(name, call, reflected):
    """`tracer * other` recorded as the call JAX's operator makes, `multiply(tracer, other)`,
    without JAX's Python path for a jitted function given a tracer (~60-90 us a call): for
    operands JAX's operator hands on as they are (this trace's tracers, Python ints and floats,
    concrete arrays) while this trace is the current one; anything else goes JAX's way."""
    forward = getattr(core.Tracer, f"__{name}__")

    def op(self, other):
        tp = type(other)
        if (tp in _FAST_OPERANDS or tp is JaxTracer and other._trace is self._trace) and \
                core.unsafe_get_current_trace() is self._trace:
            return self._lt_session.on_call(call, (other, self) if reflected else (self, other), {})
        return forward(self, other)
    op.__name__ = f"__{name}__"
    return op


_FAST_OPERANDS = frozenset({int, float, ArrayImpl})
# JAX takes a tracer's abstract value (core.typeof, shaped_abstractify: every jitted call given one)
# from this table, by type, else by walking the type's MRO to core.Tracer's entry: the same entry,
# found at once (~130 of the ~2500 Python bytecodes of a traced jax.numpy call)
core.pytype_aval_mappings.setdefault(JaxTracer, core.pytype_aval_mappings[core.Tracer])
for _name, (_call, _reflected) in _operator_calls().items():
    setattr(JaxTracer, f"__{_name}__", _fast_operator(_name, _call, _reflected))
#: the jax.numpy functions the operators record that are not jitted themselves (power)
_OPERATOR_TARGETS = frozenset(call for call, _ in _operator_calls().values() if not hasattr(call, "_jit_info"))


class LazyTrace(core.Trace):
    """Reports each primitive to the session; evaluates it under the trace current before."""

    def __init__(self, session, parent):
        super().__init__()
        self.session = session
        self.parent = parent
        self.backend = session.backend

    def process_primitive(self, primitive, tracers, params):
        if primitive is pjit.jit_p:
            if any(params["donated_invars"]):
                # a constant of the graph given to a jit that donates it would be deleted by the first
                # replay (every later one would fail): only the function's inputs stay donated
                donated = tuple(d and self._varies(t) for d, t in zip(params["donated_invars"], tracers))
                params = dict(params, donated_invars=donated)
            else:
                call = _jitted_call(params, sys._getframe(1), self.backend._jitted)
                if call is not None:
                    fn, args, kwargs, frame, effects = call
                    if effects:
                        self._effects(primitive)
                    if id(fn) not in self.backend._names:
                        self.backend.name_callable(fn, f"jit.{params['name']}")
                    result = self.session.on_call(fn, args, kwargs, _outside_jax(frame))
                    return list(result) if type(result) in (list, tuple) else [result]
        if _has_effects(primitive, params):
            self._effects(primitive)
        return self.session.on_call(self.backend.primitive_callable(primitive, params), tuple(tracers), {},
                                    _outside_jax(sys._getframe(1)))

    def _effects(self, primitive):
        # jax.debug.callback / print, io_callback: a Python callback run for its effect (a call
        # with no array argument would be folded into a constant, one whose result is unused
        # pruned), as jax.jit runs it at every call
        self.session.fail(f"{primitive.name} runs a Python callback for its effects (jax.debug.callback, "
                          f"jax.debug.print, io_callback): a graph would not run it at every call")

    def _varies(self, tracer) -> bool:
        value = self.session.value_of(tracer) if type(tracer) is JaxTracer else None
        return value is not None and not value.foldable

    def stage_value(self, val):
        """jnp.asarray of host data: made under the outer trace; the tracer sees it as a
        constant when it is used (a NumPy array the function reaches by itself is checked by
        contents: Backend.baked_contents)."""
        with core.set_current_trace(self.parent):
            return self.parent.stage_value(val)

    def _inline(self, fun, tracers):
        with core.set_current_trace(self):
            return fun.call_wrapped(*tracers)

    def process_custom_jvp_call(self, primitive, fun, jvp, tracers, *, symbolic_zeros):
        params = dict(subfuns=(fun, jvp), symbolic_zeros=symbolic_zeros)
        return self._custom_rule_call(primitive, params, tracers, f"custom_jvp.{_fun_name(fun)}")

    def process_custom_vjp_call(self, primitive, fun, fwd, bwd, tracers, *, out_trees, symbolic_zeros):
        params = dict(subfuns=(fun, fwd, bwd), out_trees=out_trees, symbolic_zeros=symbolic_zeros)
        return self._custom_rule_call(primitive, params, tracers, f"custom_vjp.{_fun_name(fun)}")

    def _custom_rule_call(self, primitive, params, tracers, name):
        """A function with its own derivative rule (jax.nn.relu, softplus, logsumexp...) is one
        node: its call staged into a jaxpr with the rule (as jax.jit stages it) and run by
        jax.jit, so that grad applied to the graph from outside uses that rule, as eager does.
        Traced under an outer transformation, the rule is being used right now and cannot be
        staged too (JAX calls either the function or its rule, once): that call is made as
        eager makes it, and the signature runs eagerly."""
        values = [unwrap_tree(t, JaxTracer) for t in tracers]
        if not isinstance(self.parent, core.EvalTrace):
            self.session.fail(f"{name} has its own derivative rule and was traced under an outer "
                              f"transformation")
            with core.set_current_trace(self.parent):
                out = primitive.bind(*values, **params)
            return [JaxTracer(self, o, self.session) for o in out]
        call = _custom_call(params["subfuns"][0], sys._getframe(2))
        if call is not None:
            fn, args = call
            self.backend.name_callable(fn, name)
            return list(self.session.on_call(fn, args, {}, _outside_jax(sys._getframe(2))))
        closed = jax.make_jaxpr(lambda *xs: primitive.bind(*xs, **params))(*values)
        fn = jax.jit(core.jaxpr_as_fun(closed))
        self.backend.name_callable(fn, name)
        return self.session.on_call(fn, tuple(tracers), {})

    def process_call(self, primitive, fun, tracers, params):
        return self._inline(fun, tracers)


class JaxBackend(Backend):
    name = "jax"
    array_types = _ARRAYS + (core.Tracer,)       # Tracer: called under an outer grad/vmap/jit
    attribute_types = (ArrayImpl,)
    tracked_types = (JaxTracer,) + _ARRAYS
    tracer_class = JaxTracer                     # made by wrap_input below (it needs the JAX trace)
    internal_modules = ("lazytrace.", "jax.", "jaxlib.")
    api_below = ("jax", "jaxlib")
    static_types = (np.dtype, jax.sharding.Sharding)
    sees_creation = True          # jnp.zeros / arange bind primitives under the current trace too
    writable_arrays = False
    knows_dynamic_shapes = True   # jax shapes never depend on data (see to_concrete_value)


    def __init__(self):
        self._names: dict = {}         # id(callable) -> (callable, display name)
        self._jit_callables: dict = {}
        self._impl_callables: dict = {}
        self._jitted: dict = {}        # id(JAX's PjitParams) -> (them, the jitted function or None, effects)
        self._primitives: dict = {}    # id(primitive callable) -> (it, primitive, params): stored calls
        self._primitive_refs: dict = {}
        self._distribution = None

    # ---- signature ------------------------------------------------------------
    def describe(self, a):
        if isinstance(a, _ARRAYS):
            return (type(a), a.aval, a.sharding)
        return (type(a), a.aval)       # an outer transformation's tracer: its shape, dtype, weak type

    def metadata_fixed(self, a):
        return True             # (immutable: no in-place resize, no `.data =`)

    def guard_conditions(self, expr, a, const):
        conditions = [f"{expr}.aval == {const(a.aval)}"]
        if isinstance(a, _ARRAYS):
            conditions.append(f"{expr}.sharding == {const(a.sharding)}")
        return conditions

    def state_conditions(self, state, const, covered=frozenset()):
        context, prng, legacy = state
        return [f"{const(_trace_context)}() == {const(context)}",
                f"{const(jax.config)}.jax_default_prng_impl == {const(prng)}",
                f"{const(_LEGACY_PRNG_KEY)}.value == {const(legacy)}"]

    def global_state(self):
        """What `jax.jit` keys its own cache on besides the arguments (`trace_context()`: x64,
        matmul precision, dtype and rank promotion, default device, threefry mode, disable_jit,
        meshes ...), plus the default PRNG implementation: a graph records primitives as jax
        traced them under these settings, and replays them unchanged; and `jax_legacy_prng_key`,
        which jax.random reads in Python before any primitive (under "error" a raw uint32 key
        raises in eager code)."""
        return (_trace_context(), _DEFAULT_PRNG.value, _LEGACY_PRNG_KEY.value)

    def unseen_state(self):
        """The same settings, changed inside the function (`jax.config.update("jax_enable_x64", True)`,
        `with jax.enable_x64(True)`, `jax.default_matmul_precision`): jax.numpy's calls under them
        were recorded, a replay would call them under the caller's (float32 where eager gave
        float64). A change makes the signature run eagerly."""
        return self.global_state()

    @kept_per_argument(64)
    def describe_global_state(self, state):
        """The settings people change by name; the rest of trace_context() as one entry."""
        context, prng, legacy = state
        try:
            named = dict(zip(jax_config.trace_context_names(), context))
        except NotImplementedError:       # an older jaxlib: no names
            named = {}
        shown = {f"jax.config.{n}": repr(named.pop(n)) for n in _DESCRIBED if n in named}
        rest = tuple(named.values()) if shown else context
        return {**shown, "jax.config.jax_default_prng_impl": repr(prng),
                "jax.config.jax_legacy_prng_key": repr(legacy),
                "jax.config (other trace settings)": f"{hash(rest) & 0xffffffff:08x}"}

    # ---- tracing ----------------------------------------------------------------
    def _trace(self, session) -> LazyTrace:
        trace = session.backend_state
        if trace is None:
            trace = session.backend_state = LazyTrace(session, core.unsafe_get_current_trace())
        return trace

    def wrap_input(self, array, session):
        return JaxTracer(self._trace(session), array, session)

    def unwrap(self, obj):
        return obj._lt_array if type(obj) is JaxTracer else obj

    def intercept(self, session):
        if jax.config.jax_debug_key_reuse:
            from ..graph.tracer import NotTraceable
            raise NotTraceable("jax_debug_key_reuse is on: JAX checks keys in its eager dispatch, which a "
                               "trace and a graph bypass")
        # JAX's own context manager object (no generator around it: ~75 bytecodes a trace); the
        # trace is not invalidated at the end: a tracer used later computes as its array (full_lower)
        return core.set_current_trace(self._trace(session))

    def caused_by_tracing(self, exc):
        if type(exc) is _HostCopy:
            return _HostCopy.reason
        return isinstance(exc, _TRACE_ERRORS) or super().caused_by_tracing(exc)

    def primitive_callable(self, primitive, params):
        """The callable eager JAX dispatches `primitive` with `params` to (see module docstring)."""
        if primitive is pjit.jit_p:
            key = id(params["jaxpr"])
            entry = self._jit_callables.get(key)
            if entry is None or entry[0] is not params["jaxpr"]:
                entry = self._jit_callables[key] = (params["jaxpr"], _jit_callable(params))
            fn = entry[1]
            name = f"jit.{params['name']}"
        elif _generic_impl(primitive):
            fn = dispatch.xla_primitive_callable(primitive, **params)
            name = f"lax.{primitive.name}_p"
        else:
            key = (primitive, *sorted(params.items()))
            fn = self._impl_callables.get(key)
            if fn is None:
                fn = self._impl_callables[key] = _eager_rule_callable(primitive, params)
            name = f"lax.{primitive.name}_p"
        self.name_callable(fn, name)
        if primitive is not pjit.jit_p and id(fn) not in self._primitives:
            self._primitives[id(fn)] = (fn, primitive, params)
        return fn

    def name_callable(self, fn, name):
        if id(fn) not in self._names:
            self._names[id(fn)] = (fn, name)

    def classify(self, func, args, kwargs) -> CallKind:
        if func is np.asarray:
            return CallKind.ESCAPE
        if func in READBACK_BUILTINS or func in _METHOD_CALLABLES.values():
            return CallKind.READBACK
        return CallKind.OP

    def run(self, func, args, kwargs):
        """Call `func` on the real arrays under the trace current before ours (a jitted function
        called under ours would come back to it); its arrays are handed on as tracers."""
        tracer, values = flat_unwrap(args, JaxTracer, _holds_no_tracer)   # (tuples of numbers: an axis)
        if values is None:          # arrays inside containers
            tracer, values = _first_tracer(args, kwargs), unwrap_tree(args, JaxTracer)
        elif tracer is None and kwargs:
            tracer = _first_tracer((), kwargs)
        trace = tracer._trace if tracer is not None else core.unsafe_get_current_trace()
        if kwargs and not _holds_no_tracer(kwargs.values()):
            kwargs = unwrap_tree(kwargs, JaxTracer)
        if type(trace) is not LazyTrace:
            return func(*values, **kwargs), ()
        ctx = core.trace_ctx         # (core.set_current_trace(trace.parent) without its context manager)
        prev = ctx.trace
        if prev is trace.parent:     # a primitive JAX bound: Primitive.bind made its parent current already
            result = func(*values, **kwargs)
        else:
            ctx.set_trace(trace.parent)
            try:
                result = func(*values, **kwargs)
            finally:
                ctx.set_trace(prev)
        if tracer is None:
            return result, ()        # made from constants only: a constant
        if type(result) in (list, tuple):
            return type(result)(self._wrap(r, trace) for r in result), ()
        return self._wrap(result, trace), ()

    def _wrap(self, result, trace):
        return JaxTracer(trace, result, trace.session) if isinstance(result, self.array_types) else result

    def storage_key(self, a):
        # jax arrays are immutable: no aliasing to follow
        return id(a._lt_array if type(a) is JaxTracer else a)

    def output_facts(self, obj) -> tuple:
        # (brief, storage_key, requires_grad, write_count) in one call, for every output a trace records
        a = obj._lt_array if type(obj) is JaxTracer else obj
        return (a.shape, a.dtype), id(a), False, None

    def clone(self, a):
        return a                     # immutable: a constant can be handed out as is

    def from_numpy(self, data):
        return jax.numpy.asarray(data)

    def brief(self, a) -> tuple:
        return (a.shape, a.dtype)

    @kept_per_argument(1024)
    def format_brief(self, brief) -> str:
        shape, dtype = brief        # (kept: str of a NumPy dtype costs ~5 us)
        return f"{'x'.join(str(d) for d in shape) or 'scalar'} {dtype}"

    # ---- persistent cache ----------------------------------------------------------
    persist_roots = ("builtins", "operator", __name__)

    @property
    def distribution(self) -> tuple:
        """jax and jaxlib (XLA, which compiles every call, is jaxlib's: its version can change
        results), and the PJRT plugins installed (the GPU and TPU runtimes, `jax_plugins`)."""
        if self._distribution is None:
            plugins = ()
            if importlib.util.find_spec("jax_plugins") is not None:
                from ..persist.identity import distribution_versions
                plugins = tuple(name for name, _ in distribution_versions("jax_plugins"))
            self._distribution = ("jax", "jaxlib", *plugins)
        return self._distribution

    def persist_environment(self, start=False):
        """The devices of each started platform and the number of processes: code reads them in
        Python (`len(jax.devices())`, `jax.device_count()`), which a graph bakes; another process
        can have others (jax_num_cpu_devices, XLA_FLAGS, CUDA_VISIBLE_DEVICES). Not known before
        JAX's runtimes start (Unavailable: the graphs wait for the first call)."""
        if not (start or xla_bridge.backends_are_initialized() or _cpu_only("cpu")):
            from ..persist.codec import Unavailable
            raise Unavailable("JAX's runtimes have not started: the devices its key names are not known yet")
        return {"devices": {name: [d.device_kind for d in backend.devices()]
                            for name, backend in sorted(xla_bridge.backends().items())},
                "processes": jax.process_count()}

    def persist_root(self, module):
        """This backend's own module, and JAX's modules already imported (the jitted functions
        and primitives of a graph live in modules `import jax` or the library imported; loading
        a graph imports nothing: a module not imported yet leaves the graph to a later call)."""
        if module in self.persist_roots:
            return True
        if module != "jax" and not module.startswith("jax."):
            return False
        if module in sys.modules:
            return True
        if module.rpartition(".")[0] in sys.modules:      # find_spec then imports nothing
            try:
                if importlib.util.find_spec(module) is None:
                    return False                          # no such module: a made-up name
            except (ImportError, ValueError):
                return False
        from ..persist.codec import Unavailable
        raise Unavailable(f"its calls are in {module}, which is not imported")

    def stored_call(self, func):
        """A jitted function by the name of the function it jits (`jax.numpy:sin`,
        `jax._src.numpy.reductions:_reduce_sum`), loaded as JAX's own jitted object there (the
        same function and jit options: the same compiled programs); a jax.numpy ufunc's call
        through the ufunc; a custom_jvp/custom_vjp function (jax.nn.relu) by its name; a
        primitive by its name with its parameters as literals, rebuilt by primitive_callable.
        A jit of a jaxpr (a closure, a jitted call given tracers in other pytree nodes) has no
        name: its graph is not stored."""
        tp = type(func)
        entry = self._primitives.get(id(func))
        if entry is not None and entry[0] is func:
            ref = self._primitive_ref(entry[1])
            return None if ref is None else (ref, ("primitive", entry[2]))
        if tp is _PJIT_FUNCTION:
            ref = _function_ref(getattr(func, "_fun", None))
            if ref is None:
                return None
            return ref, (("ufunc",) if isinstance(_attribute(ref), jax.numpy.ufunc) else None)
        if tp is _CustomCall:
            ref = _function_ref(getattr(func.fn, "fun", None))
            return None if ref is None else (ref, ("custom",))
        if func is READ_ITEM or func is READ_TOLIST:
            return f"{__name__}:READ_{func.__name__.upper()}", None
        if _readback_builtin(func):
            return f"{'builtins' if isinstance(func, type) else 'operator'}:{func.__name__}", None
        if func in _OPERATOR_TARGETS:       # `x ** y`: jax.numpy.power, a plain function
            return _function_ref(func), None
        return None

    def loaded_call(self, obj, params):
        kind, *rest = params
        if kind == "ufunc" and isinstance(obj, jax.numpy.ufunc) and not rest:
            return obj._ufunc__static_props["call"]
        if kind == "custom" and isinstance(obj, (jax.custom_jvp, jax.custom_vjp)) and not rest:
            call = _CustomCall(obj, None)
            self.name_callable(call, f"{type(obj).__name__}.{_fun_name(obj.fun)}")
            return call
        if kind == "primitive" and isinstance(obj, core.Primitive) and len(rest) == 1 and type(rest[0]) is dict:
            return self.primitive_callable(obj, rest[0])
        raise ValueError(f"not a stored jax call: {params!r:.80}")

    def same_call(self, found, func):
        if type(found) is _PJIT_FUNCTION and type(func) is _PJIT_FUNCTION and hasattr(func, "_fun"):
            return getattr(found, "_fun", None) is func._fun and getattr(found, "_jit_info", None) is func._jit_info
        if type(found) is _CustomCall and type(func) is _CustomCall:
            return found.fn is func.fn
        return found == func

    def allowed_target(self, obj):
        """JAX's jitted functions, ufuncs, custom-derivative functions and primitives (no
        callback primitive: those run Python code; no infeed/outfeed), and the read-back
        builtins of guards."""
        if type(obj) is _PJIT_FUNCTION or isinstance(obj, (jax.numpy.ufunc, jax.custom_jvp, jax.custom_vjp)):
            return True
        if isinstance(obj, core.Primitive):
            return obj is not pjit.jit_p and not any(word in obj.name for word in ("callback", "feed"))
        return obj is READ_ITEM or obj is READ_TOLIST or _readback_builtin(obj) or obj in _OPERATOR_TARGETS

    def _primitive_ref(self, primitive) -> str | None:
        """'module:name_p' of JAX's module that holds a primitive (jax.lax first)."""
        if primitive is pjit.jit_p:
            return None            # its jaxpr has no form as data
        ref = self._primitive_refs.get(primitive)
        if ref is None:
            name = f"{primitive.name}_p"
            homes = ["jax.lax", *sorted(m for m in sys.modules if m.startswith("jax._src."))]
            module = next((m for m in homes if getattr(sys.modules.get(m), name, None) is primitive), None)
            ref = self._primitive_refs[primitive] = f"{module}:{name}" if module else ""
        return ref or None

    def encode_static(self, obj):
        if isinstance(obj, np.dtype) and obj.names is None and obj.subdtype is None:
            return ["dtype", obj.name]
        if type(obj) is _SCALAR_META:
            return ["jnp", obj.dtype.name]
        if isinstance(obj, type) and issubclass(obj, np.generic):
            return ["type", np.dtype(obj).name]
        if isinstance(obj, np.generic) and obj.dtype.kind in "biuf":
            return ["scalar", obj.dtype.name, repr(obj.item())]
        if type(obj) is prng_impls.PRNGImpl and prng_impls.prngs.get(obj.name) is obj:
            return ["prng", obj.name]
        if isinstance(obj, enum.Enum) and type(obj).__module__.startswith("jax."):
            return ["enum", type(obj).__module__, type(obj).__qualname__, obj.name]
        return None

    def decode_static(self, data):
        kind, *rest = data
        if kind == "enum":
            module, qualname, member = rest
            cls = _attribute(f"{module}:{qualname}") if module.startswith("jax.") else None
            if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
                raise ValueError(f"not a stored jax enum: {data!r:.80}")
            return cls[member]
        if kind == "prng":
            return _prng(rest[0])
        dtype = _dtype(rest[0])
        if kind == "dtype":
            return dtype
        if kind == "jnp" and type(getattr(jax.numpy, rest[0], None)) is _SCALAR_META:
            return getattr(jax.numpy, rest[0])
        if kind == "type":
            return dtype.type
        if kind == "scalar":
            text = rest[1]
            return dtype.type(text == "True" if dtype.kind == "b" else int(text) if dtype.kind in "iu" else float(text))
        raise ValueError(f"not a stored jax constant: {data!r:.80}")

    def key_text(self, obj):
        if type(obj) is core.ShapedArray:
            return repr(obj)        # shape, dtype, weak type, abstract sharding, memory space
        if obj is getattr(core, "top_axis_env", None):
            return "top"            # trace_context()'s axis environment outside vmap/pmap (interned)
        return None

    def array_spec(self, a):
        """[shape, kind, dtype or key implementation, weak type, device]: arrays on one device."""
        where = _placement(a)
        if where is None:
            return None
        if type(a) is PRNGKeyArray:
            return [list(a.shape), "key", a.dtype._impl.name, False, where]
        return [list(a.shape), "array", self.encode_static(a.dtype), a.aval.weak_type, where]

    def synthetic_array(self, spec, start_devices=False):
        shape, kind, dtype, weak, where = spec
        if kind not in ("array", "key") or type(shape) is not list or type(weak) is not bool or \
                not all(type(d) is int and d >= 0 for d in shape):
            raise ValueError(f"malformed jax array description {spec!r:.80}")
        if kind == "key":
            return jax.random.wrap_key_data(self._put(np.zeros((*shape, *_prng(dtype).key_shape), np.uint32),
                                                      where, start_devices), impl=dtype)
        dtype = self.decode_static(dtype)
        fill = True if dtype.kind == "b" else 0.5 if dtype.kind in "fc" else 1
        return self._put(np.full(shape, fill, dtype), where, start_devices, weak)

    def _put(self, value, where, start_devices, weak=False):
        """`value` on the device `where` ([platform, id, memory kind, committed]), weak-typed if
        `weak`. Committed to it as the array was (jit compiles committed and uncommitted
        arguments apart: a prewarm on committed copies of uncommitted inputs would warm nothing)."""
        platform, device_id, memory, committed = where
        if not (start_devices or xla_bridge.backends_are_initialized() or _cpu_only(platform)):
            raise RuntimeError(f"an array on {platform} would start JAX's runtimes (prewarm=True allows it)")
        device = next((d for d in jax.devices(platform) if d.id == device_id), None)
        if device is None:
            raise ValueError(f"no {platform} device {device_id} in this process")
        sharding = jax.sharding.SingleDeviceSharding(device, memory_kind=memory)
        out = jax.device_put(value)
        if committed is not False or out.sharding != sharding:
            out = jax.device_put(value, sharding)
        return lax_internal._convert_element_type(out, out.dtype, weak_type=True) if weak else out

    def save_arrays(self, arrays, metadata):
        """Each array as NumPy data (a key as its key data), with its dtype, weak type and device
        (or key implementation) in the metadata ('jax.arrays')."""
        described, data = {}, {}
        for name, a in arrays.items():
            spec = self.array_spec(a)
            if spec is None:
                from ..persist.codec import NotStorable
                raise NotStorable(f"a constant of {a.sharding} (only arrays on one device are stored)")
            described[name] = spec
            data[name] = np.asarray(jax.random.key_data(a) if spec[1] == "key" else a)
        return save_numpy_arrays(data, {**metadata, "jax.arrays": json.dumps(described)})

    def load_arrays(self, data, metadata):
        described = json.loads(metadata.get("jax.arrays", "{}"))
        out = {}
        for name, value in load_numpy_arrays(data, metadata, _dtype).items():
            shape, kind, dtype, weak, where = described[name]
            if kind == "key":
                out[name] = jax.random.wrap_key_data(self._put(value, where, True), impl=dtype)
            else:
                if value.dtype != self.decode_static(dtype) or list(value.shape) != shape:
                    raise ValueError(f"array {name} is not of its stored description")
                out[name] = self._put(value, where, True, weak)
        return out

    # ---- code generation ----------------------------------------------------------
    def call_syntax(self, func):
        entry = self._names.get(id(func))
        if entry is not None and entry[0] is func:
            return ("function", entry[1])
        return ("function", getattr(func, "__name__", "fn"))

    def compile(self, fn, graph, **options):
        """jax.jit of the generated function: static arguments are already baked into each
        signature's graph, so the graph's array leaves are all jit needs. A graph with guards
        reads values back into Python, which jit cannot: it stays plain replay."""
        from ..graph.ir import Kind
        if any(node.kind is Kind.GUARD for node in graph.nodes):
            return fn
        return jax.jit(fn, **options)


def _first_tracer(args, kwargs):
    """The first JaxTracer in call arguments (through tuples, lists and dicts), or None."""
    for a in (*args, *kwargs.values()) if kwargs else args:
        tp = type(a)
        if tp is JaxTracer:
            return a
        if tp is tuple or tp is list or tp is dict:
            found = _first_tracer(a.values() if tp is dict else a, None)
            if found is not None:
                return found
    return None


def _holds_no_tracer(items) -> bool:
    """Whether `items` are all Python scalars, None or strings, or tuples of them (an axis):
    call arguments with nothing in them to unwrap."""
    for x in items:
        tp = type(x)
        if tp not in _SCALARS and (tp is not tuple or not _holds_no_tracer(x)):
            return False
    return True


def _plain(obj) -> bool:
    """Whether every tracer in `obj` is reached through tuples, lists and dicts (what the tracer
    follows in call arguments): an array inside any other pytree node would be baked in."""
    tp = type(obj)
    if tp is tuple or tp is list or tp is dict:
        for x in obj.values() if tp is dict else obj:
            tx = type(x)
            if tx is not JaxTracer and tx not in _SCALARS and not _plain(x):
                return False
        return True
    if tp is JaxTracer or tp in _SCALARS:
        return True
    return not any(isinstance(leaf, core.Tracer) for leaf in tree_util.tree_leaves(obj))


def _plain_call(args, kwargs) -> bool:
    """_plain of a call's arguments and keywords (one pass over both; tracers and Python
    scalars, what most calls take, looked at in place)."""
    for items in (args, kwargs.values()) if kwargs else (args,):
        for x in items:
            tx = type(x)
            if tx is not JaxTracer and tx not in _SCALARS and not _plain(x):
                return False
    return True


_SCALARS = frozenset({int, float, bool, complex, str, type(None)})
_RUN_PYTHON_PJIT = getattr(getattr(pjit, "_run_python_pjit", None), "__code__", None)


def _caller_frame(frame, codes, depth):
    """The first of `depth` frames from `frame` up that runs one of `codes` (JAX's function that
    bound the primitive being processed), or None."""
    for _ in range(depth):
        if frame is None or frame.f_code in codes:
            return frame
        frame = frame.f_back
    return None


def _jitted_call(params, frame, cache: dict):
    """(jitted function, args, kwargs, JAX's frame running it, whether its jaxpr has effects) of
    the `jax.jit` function whose call under the trace bound
    this `jit` primitive, or None. jax.numpy's functions are jitted: eager calls them through
    JAX's C++ dispatch, whose cache (shared by every jit of the same function and options) the
    eager calls before the trace already filled. Recording that call, rather than the primitive
    run by a callable of its own, makes the trace run it at C++ speed instead of compiling and
    dispatching a new callable through Python, and replays exactly the eager call.
    Found on the stack (JAX's `_run_python_pjit`, checked by the identity of its jaxpr); None
    where the call closes over tracers, returns anything but arrays or a flat tuple or list of
    them, or takes tracers inside other pytree nodes: the primitive is recorded then."""
    up = frame.f_back       # (bind_with_trace, bind, then JAX's _run_python_pjit: looked at first)
    up = up.f_back if up is not None else None
    frame = up if up is not None and up.f_code is _RUN_PYTHON_PJIT else _caller_frame(frame, (_RUN_PYTHON_PJIT,), 4)
    if frame is None:
        return None
    local = frame.f_locals
    p = local.get("p")      # JAX's PjitParams of this call: one object per function and input types
    if p is None or p.params.get("jaxpr") is not params["jaxpr"]:
        return None
    entry = cache.get(id(p))
    if entry is None or entry[0] is not p:
        if len(cache) > 4096:     # jitted closures made anew at every call: bounded
            cache.clear()
        entry = cache[id(p)] = (p, _jitted_function(p, local["fun"], frame.f_back), _has_effects(pjit.jit_p, p.params))
    args, kwargs = local["args"], local["kwargs"]
    if entry[1] is None or not _plain_call(args, kwargs):
        return None
    return entry[1], args, kwargs, frame, entry[2]


def _outside_jax(frame):
    """The first frame from `frame` up that runs no code of JAX's: the code that made the call
    JAX bound a primitive for (the user's `jnp.exp(x)`, `jax.nn.sigmoid(x)`), where the tracer
    starts looking at the code making a call (graph.reads, handlers); JAX's own frames below it
    (its wrappers, cache_miss, bind: 5-8 a call) are not watched there, and were walked for
    nothing."""
    while frame is not None and frame.f_globals.get("__name__", "").startswith("jax."):
        frame = frame.f_back
    return frame


def _jitted_function(p, fun, outer):
    """The jitted function JAX's `cache_miss` frame `outer` runs for `fun`, made anew (sharing
    the C++ cache of every jit of `fun` with the same options), or None where its call closes
    over tracers (JAX passes them as extra arguments) or returns other than flat arrays."""
    out = p.out_tree
    if p.consts or outer is None:
        return None
    if out.num_leaves != 1 or not tree_util.treedef_is_leaf(out):
        if out.num_nodes != out.num_leaves + 1 or out.node_data() is None or \
                out.node_data()[0] not in (tuple, list):
            return None
    jit_info = outer.f_locals.get("jit_info")
    return pjit._cpp_pjit(fun, jit_info) if isinstance(jit_info, pjit.PjitInfo) else None


_CUSTOM_CALLS = tuple(getattr(inspect.unwrap(c.__call__), "__code__", None)
                      for c in (jax.custom_jvp, jax.custom_vjp))


def _custom_call(flat_fun, frame):
    """(caller, args) for the custom_jvp / custom_vjp function whose call under the trace bound
    this primitive (found on the stack, checked by the identity of the function it bound), or
    None. The caller calls that very function (the trace: the flattened function JAX bound, as
    eager JAX runs it): no jaxpr staged and compiled at every trace (~45 ms for jax.nn.relu),
    and a replay under jax.grad uses its rule. None where it has non-differentiable arguments
    or takes tracers inside other pytree nodes. (One closing over an array of the trace meets
    that tracer outside its trace when run: JAX raises UnexpectedTracerError, the call runs
    eagerly.)"""
    frame = _caller_frame(frame, _CUSTOM_CALLS, 6)
    if frame is None:
        return None
    local = frame.f_locals
    obj, args = local.get("self"), local.get("args")
    if local.get("flat_fun") is not flat_fun or not isinstance(obj, (jax.custom_jvp, jax.custom_vjp)) \
            or obj.nondiff_argnums or type(args) is not tuple or not _plain(args):
        return None
    return _CustomCall(obj, flat_fun), args


class _CustomCall:
    """Calls a custom_jvp / custom_vjp function and returns its outputs flat. Its first call
    (the trace's) runs the flattened function JAX bound, which records the output structure
    JAX reads back after the call."""

    __slots__ = ("fn", "first")

    def __init__(self, fn, first):
        self.fn = fn
        self.first = first

    def __call__(self, *args):
        first, self.first = self.first, None
        if first is not None:
            return first.call_wrapped(*tree_util.tree_leaves(args))
        return tree_util.tree_leaves(self.fn(*args))


_CALLBACKS = frozenset(p for p in (getattr(debugging, "debug_callback_p", None),
                                   getattr(debugging, "debug_print_p", None),
                                   getattr(callback, "io_callback_p", None)) if p is not None)


def _has_effects(primitive, params) -> bool:
    """Whether binding `primitive` has effects: a callback primitive, or one running a jaxpr
    (jit, cond, while, scan ...) that has effects."""
    if primitive is pjit.jit_p:
        return bool(params["jaxpr"].effects)
    if primitive in _CALLBACKS:
        return True
    for value in params.values():
        for jaxpr in value if type(value) is tuple else (value,):
            if isinstance(jaxpr, (core.Jaxpr, core.ClosedJaxpr)) and jaxpr.effects:
                return True
    return False


def _fun_name(fun) -> str:
    info = getattr(fun, "debug_info", None)
    return getattr(info, "func_name", None) or "fn"


def _generic_impl(primitive) -> bool:
    """Whether eager JAX runs `primitive` by compiling it alone (`dispatch.apply_primitive`)."""
    impl = primitive.impl
    return isinstance(impl, partial) and impl.func is dispatch.apply_primitive and impl.args == (primitive,)


def _eager_rule_callable(primitive, params):
    if primitive is slicing.slice_p and params["strides"] is None:
        return _slice_callable(params)
    return _impl_callable(primitive, params)


def _slice_callable(params):
    """`slice` as its eager rule runs it (a `dynamic_slice` over the same start indices, which
    JAX makes into arrays at every call: here once, as eager makes them, so that eager's
    compiled dynamic_slice is the one reused): ~10 us a call instead of ~38 us."""
    start = params["start_indices"]
    sizes = tuple(hi - lo for lo, hi in zip(start, params["limit_indices"]))
    dynamic = dispatch.xla_primitive_callable(slicing.dynamic_slice_p, slice_sizes=sizes)
    indices = [jax.device_put(i) for i in start]     # weak-typed like the Python ints eager passes

    def call(x):
        if isinstance(x, core.Tracer):
            return slicing.slice_p.bind(x, **params)
        return dynamic(x, *indices)
    return call


def _impl_callable(primitive, params):
    """A primitive with an eager rule of its own, called as eager calls it: `slice` runs as a
    `dynamic_slice` compiled once per shape (not once per index), `stop_gradient` returns its
    argument. Replayed under an outer transformation (grad, vmap, jit of the graph), the
    primitive is bound, so that the transformation sees it (stop_gradient stops gradients)."""
    impl = primitive.impl

    def call(*args):
        if any(isinstance(a, core.Tracer) for a in args):
            return primitive.bind(*args, **params)
        return impl(*args, **params)
    return call


def _jit_callable(params):
    """JAX's C++ dispatcher for a `jit` primitive, as `jit_p.impl` builds it on every call
    (jax/_src/pjit.py `_pjit_call_impl`), made once."""
    try:
        f = pjit._get_jaxpr_as_fun(
            params["jaxpr"], params["in_shardings"], params["out_shardings"], params["in_layouts"],
            params["out_layouts"], params["donated_invars"], params["ctx_mesh"], params["name"],
            params["keep_unused"], params["inline"], params["compiler_options_kvs"])

        def cache_miss(*args, **kwargs):
            if any(isinstance(a, core.Tracer) for a in args):     # under an outer transformation
                return pjit.jit_p.bind(*args, **params), None, False
            out_flat, compiled, profiler, const_args = pjit._pjit_call_impl_python(*args, **params)
            fastpath = pjit._get_fastpath_data(compiled, tree_util.tree_structure(out_flat), args,
                                               out_flat, params["jaxpr"].effects, params["jaxpr"].consts,
                                               profiler, const_args)
            return out_flat, fastpath, pjit._need_to_rebuild_with_fdo(profiler)

        donated = tuple(i for i, d in enumerate(params["donated_invars"]) if d)
        key = pxla.JitGlobalCppCacheKeys(
            donate_argnums=donated, donate_argnames=None, device=None, backend=None,
            in_shardings_treedef=None, in_shardings_leaves=params["in_shardings"],
            out_shardings_treedef=None, out_shardings_leaves=params["out_shardings"],
            in_layouts_treedef=None, in_layouts_leaves=params["in_layouts"],
            out_layouts_treedef=None, out_layouts_leaves=params["out_layouts"])
        return _jax.pjit(params["name"], f, cache_miss, [], [], key, tree_util.dispatch_registry,
                         pxla.cc_shard_arg, pjit._get_cpp_global_cache(key.contains_explicit_attributes))
    except (AttributeError, TypeError, KeyError):     # another jax version: the generic path
        impl = pjit.jit_p.impl

        def call(*args):
            return impl(*args, **params)
        return call


_PJIT_FUNCTION = type(jax.numpy.sin) if type(jax.numpy.sin).__name__ == "PjitFunction" else type(jax.jit(abs))
_SCALAR_META = type(jax.numpy.float32)
_DTYPE_NAME = re.compile(r"^[a-z][a-z0-9_]{1,24}$")


def _function_ref(fun) -> str | None:
    """'module:qualname' of a function defined at module level in JAX's own modules, or None."""
    module, qualname = getattr(fun, "__module__", None), getattr(fun, "__qualname__", None)
    if type(module) is not str or type(qualname) is not str or "<" in qualname or qualname.count(".") > 2:
        return None
    return f"{module}:{qualname}" if module == "jax" or module.startswith("jax.") else None


def _attribute(ref):
    """The object a 'module:attr.path' names in an imported module, or None."""
    module, _, path = ref.partition(":")
    obj = sys.modules.get(module)
    for name in path.split("."):
        obj = getattr(obj, name, None)
    return obj


def _readback_builtin(obj) -> bool:
    try:
        return obj in READBACK_BUILTINS
    except TypeError:       # unhashable
        return False


def _dtype(name) -> np.dtype:
    """A stored dtype name's dtype (bfloat16 and the other ml_dtypes too); ValueError otherwise."""
    if type(name) is not str or not _DTYPE_NAME.match(name):
        raise ValueError(f"not a stored jax dtype: {name!r:.40}")
    dtype = jax.numpy.dtype(name)
    if dtype.names is not None or dtype.subdtype is not None or dtype.name != name:
        raise ValueError(f"not a stored jax dtype: {name!r:.40}")
    return dtype


def _prng(name):
    impl = prng_impls.prngs.get(name) if type(name) is str else None
    if impl is None:
        raise ValueError(f"unknown PRNG implementation {name!r:.40}")
    return impl


def _placement(a):
    """[platform, device id, memory kind, committed] of a concrete array on one device, else None."""
    if not isinstance(a, _ARRAYS) or type(a.sharding) is not jax.sharding.SingleDeviceSharding:
        return None
    device = next(iter(a.sharding.device_set))
    return [device.platform, device.id, a.sharding.memory_kind, bool(getattr(a, "_committed", True))]


def _cpu_only(platform) -> bool:
    """Whether making a CPU array starts no accelerator's runtime (JAX starts every installed
    platform at once): no PJRT plugin and no libtpu installed, or JAX told to use the CPU only."""
    if platform != "cpu":
        return False
    if (jax.config.jax_platforms or "").strip() == "cpu":
        return True
    return not _accelerators_installed()


@lru_cache(maxsize=1)
def _accelerators_installed() -> bool:
    return importlib.util.find_spec("jax_plugins") is not None or importlib.util.find_spec("libtpu") is not None


BACKEND_CLASS = JaxBackend

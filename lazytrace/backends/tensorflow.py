"""TensorFlow backend.

Interception: TensorFlow's op dispatch. Input tensors and `tf.Variable`s are
handed to the function as `TfTracer` objects, which TensorFlow cannot convert
to tensors; every public op (tf.*, tf.math, tf.image, tf.nn, tf.random ...) is
decorated with `add_dispatch_support`, and when an op's arguments fail to
convert it asks the registered global dispatchers (`GlobalOpDispatcher`) to
handle the call. Ours records it (for tracers only: other calls are declined
at once) and runs the op on the real tensors. An API of the array namespaces
handled so once, with a tracer as a top-level argument, is then registered
with TensorFlow's type-based dispatch (TfTracer is a dispatchable type) for
those argument positions: its later calls with a tracer there reach us at
once, without trying the op first (see below). Operators, indexing and tensor
methods go through the tracer itself, like the NumPy backend. A composite op
such as `tf.image.adjust_contrast` is one recorded call.

What dispatch cannot see is watched by an eager op callback, which TensorFlow
keeps per thread: a stateful random op run outside a recorded call (e.g.
`tf.random.normal([3])`, whose arguments hold no tracer), or a read of a
`tf.Variable` the function reached by itself in such a call (`w * 2`), makes
the signature eager instead of being baked as a constant. A variable used
together with a tracer (`tf.matmul(x, w)`) is referenced by the graph and read
at every call. Tensors made by calls with no
tracer argument (`tf.zeros`, `tf.constant`) are constants, as for NumPy.

`tf.Variable` inputs are read live: the graph receives the variable, and the
ops reading it run at every call, so a `tf.GradientTape` around the call
records the same reads and ops as eager. A call TensorFlow cannot dispatch
(a raw op given a tracer) fails conversion with a TypeError naming the
tracer; that call then runs eagerly (`Backend.caused_by_tracing`).

Alternative measured: tracing into a `tf.function` FuncGraph replays as one
graph call, but a cached `tf.function` call costs 300-400 us on the CI
machine kind, more than eager for small functions (benchmarks/
bench_frameworks.py, results/frameworks_cpu.txt: swish 177 us eager, 369 us
tf.function; softmax 159 / 331 us), and it cannot read values back into
Python, which the tracer guards. It is what `return_backend_traced_fn=True`
does (`jit_compile` optional). The LazyGraph in two later runs: 1.10x to 20x
eager, geomean 2.5x-2.6x (before operators replayed as raw ops: 0.87x to 27x);
replay calls the same public API functions as eager, so a function that is
one composite call (`tf.math.reduce_std`) gains little.
Replaying the raw ops instead (the op callback above sees each one with its
attributes in `execute` form) would be faster, but would bake in any Python
decision TensorFlow's own API code makes on tensor values in eager mode
(`bool(t)` on a real tensor inside tf.* has no hook to guard it): not done in
general. Only the four arithmetic operators on two tensors of one float dtype,
whose Python code is known (see `replay_call`), replay as their one raw op
(`Mul`: ~17 us against ~45 us for `x * y` on this machine kind). The trace runs them so too
(`_raw_call`, under TensorFlow's default type promotion only: the first call returns eager's
result): ~30 us against ~115 us per operator at load 4-5, ~350 Python bytecodes fewer.

First call (trace), benchmarks/bench_frameworks.py: 2.3x to 15x an eager call
(one-shot wall clock on a shared machine; 2.3x-12x a second trace). Per
tf.* call given a tracer (thread CPU, a chain of 30 `tf.exp`): the op itself
~70 us (27 us in a tight eager loop), TensorFlow's own path to our
dispatcher ~90 us (its API code tries the op, the conversion of the tracer
fails, the TypeError unwinds, the fallback dispatchers are asked), the
tracer's bookkeeping ~35 us, this backend ~20 us. Two cuts of TensorFlow's
part: our dispatcher is asked first (Keras' flattens every call's arguments
before declining, ~7 us), and a conversion function registered for TfTracer
refuses it at once instead of tf.constant trying it as a NumPy array (~14 us
per call, measured on `tf.exp`/`tf.sigmoid` of 3x32x32). Session 9: TensorFlow's
type-based dispatch skips the failed attempt altogether. It needs a registration per API and
argument position, which TensorFlow then checks (in C++) at every call of that API in the
process, traced or not: registered only for the APIs and positions a trace met (`_Dispatcher._type`,
~0.1 ms once per API), an eager call of one costs ~0.5 us more (tf.exp 24.0 -> 24.3 us,
tf.reduce_mean 115.5 -> 117.1, tf.clip_by_value 78.3 -> 79.0, medians of 3000, within noise).
Wall clock from the API call to our recording, a chain of `tf.exp` in a trace: 45 us through the
failed conversion, 10 us by type (load ~4 on 2 cores). What is left per tf.* call then: the
tracer's bookkeeping (~30 us), this backend (~10 us), and the op itself, which inside a trace
takes 50-65 us against 25-27 us in a tight eager loop (the same op on the same tensor, timed in
the traced function's own body: 50 us; not the op callback below: without it, 47 us), so
TensorFlow's softmax (eager ~120 us, one API call and one operator) cannot trace in 600 us while
the trace of an identity function alone costs ~700-800 us (the framework-free tracer's fixed cost).
Session 11: that fixed cost is ~200 us of thread CPU with warm CPU caches, 550-650 us right after
gc.collect() (as the benchmark times a first call); an EagerTensor's key is made from its shape
tuple, and the explanation's texts are memoized per global state and per (shape, dtype)
(results/first_call_jaxtf_s11.txt).
Session 12 (results/first_call_jaxtf_s12.txt): a dispatched API call names the first frame
outside TensorFlow's and this backend's code to the tracer (`_outside_tensorflow`: graph.reads and
handlers walked up through the API's dispatch wrappers at every call), the tracer's operators
call the session themselves, `run` takes flat arguments in one pass, and an operator run as a raw
op keeps that decision for its recording (`_raw_run`). Python bytecodes per call: tf.sigmoid
2153 -> 1905, `x * 1.001` 1951 -> 1707; a first call of swish 14335 -> 13220, softmax 12857 ->
11912, chain16 40445 -> 36351; thread CPU of a first call, interleaved A/B: 3-13% less (swish
after a collection 827 -> 760 us, softmax 734 -> 703, min of 4 processes). Softmax (one API call,
one operator) is now ~4900 bytecodes over an identity trace's ~7000.
Session 13 (results/first_call_jaxtf_s13.txt): classify's answer kept per API, output_facts in one
call, binary-operator work skipped for other calls, intercept without a generator: a first call of
swish 12656 -> 12248 bytecodes, normalize 24063 -> 23373, chain16 36220 -> 35062. A TensorFlow op
costs the same after a gap of Python work as back to back (~34 us, run on the calling thread),
unlike JAX's (see backends/jax.py).
Session 15 (results/first_call_jaxtf_s15.txt): where the thread CPU of a first call of the benchmark's
softmax (`tf.nn.softmax(x * 2.0)`: ~450 us warm against ~105 us eager) goes: the identity trace's fixed
cost ~165 us; lazytrace's Python per call ~150 us for the two calls (8980 - 4822 bytecodes, ~650 of
them this backend's); the two ops ~130 us against ~65 us in eager's loop (the raw Mul 57 us against
15-22, Softmax 72 against 49). perf (cpu-clock) of repeated first calls: 77% of the CPU in libpython,
18% in TensorFlow's libraries (~92 us a first call against ~66 us an eager call). An op runs slower
inside a trace for three reasons: TensorFlow captures the Python stack at every eager op
(StackTrace::Capture, up to 30 frames) with each frame's line number (PyFrame_GetLineNumber: a scan of
the code's line table up to the frame's instruction), and the frames of lazytrace under a recorded op
are big functions stopped far in (TraceSession.on_call ~2 us, LazyGraph._call ~1.8, _miss ~1.3,
tracer._run ~0.9: ~5 us an op; a Mul in the traced function 20-21 us against 15 eager, no callback);
the op callback, ~3-4 us an op (C++ builds its arguments): taken out of TensorFlow's list while a
recorded call runs (_RandomWatch.pause); and the CPU caches: the first op after lazytrace's Python work
costs 40-55 us (a Mul right after an identity trace: 40 us; back to back: 15).

Session 6: a TensorFlow function held in a closure (`sig = tf.sigmoid`) was
walked into by graph.reads, which put ten guards on TensorFlow's own dispatch
state (closure cells api_dispatcher, signature ...) into the graph: no longer
(Python bytecodes of a first call of the benchmark's swish 29680 -> 13690,
blur 48892 -> 32605, gray 45985 -> 30616; a replay checks ten guards fewer).
What is left is mostly the framework-free tracer (a fixed ~6600 bytecodes,
~1000-2000 per call).
"""
from __future__ import annotations

import functools
import importlib
import json
import operator
import re
import sys

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context, record
from tensorflow.python.framework import ops as tf_ops, tensor_conversion_registry
from tensorflow.python.framework.ops import EagerTensor
from tensorflow.python.ops import gen_math_ops, resource_variable_ops
from tensorflow.python.util import dispatch, tf_decorator, tf_export, tf_inspect

from ..graph.stateful import CallRecordingProxy

from .base import (OPERATORS, READBACK_BUILTINS, ROPERATORS, UNARY, ArrayTracer, Backend, CallKind, flat_unwrap,
                   kept_per_argument, load_numpy_arrays, operator_syntax, save_numpy_arrays, unwrap_tree)

_METHOD_OPS = {getattr(tf.Tensor, name): name for name in
               list(OPERATORS) + list(ROPERATORS) + list(UNARY) + ["__getitem__"]
               if hasattr(tf.Tensor, name)}
_VARIABLE_GETITEM = tf.Variable.__getitem__          # a variable's own slicing (its result offers .assign)
_ARITHMETIC = set(OPERATORS) | set(ROPERATORS)        # operators whose number operand may be cached
_METADATA_ATTRIBUTES = {"shape", "dtype", "ndim", "device", "name", "trainable"}
_ATTRGETTERS = {name: operator.attrgetter(name) for name in _METADATA_ATTRIBUTES}
_METADATA = {len} | set(_ATTRGETTERS.values())
#: the variable methods that write it (assign*, scatter_*, batch_scatter_update), read from the classes: a
#: list written by hand missed scatter_mul/div, scatter_nd_max/min and batch_scatter_update, whose
#: calls were dropped from graphs as dead code
_MUTATING_METHODS = {name for cls in (tf.Variable, resource_variable_ops.BaseResourceVariable)
                     for name in dir(cls)
                     if name.startswith(("assign", "scatter_", "batch_scatter_"))}
#: stateful random ops of the runtime (their draws advance hidden state)
_RANDOM_OPS = {"RandomStandardNormal", "RandomUniform", "RandomUniformInt", "TruncatedNormal",
               "Multinomial", "RandomShuffle", "RandomGamma", "RandomPoisson", "RandomPoissonV2",
               "RandomCrop", "StatefulUniform", "StatefulUniformInt", "StatefulUniformFullInt",
               "StatefulStandardNormalV2", "StatefulTruncatedNormal", "RngReadAndSkip",
               "RngSkip", "ParameterizedTruncatedNormal"}


#: runtime ops that write a resource variable (assign*, scatter*, optimizers' apply ops)
_VARIABLE_WRITES = {"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "ResourceStridedSliceAssign"}
_VARIABLE_WRITE_PREFIXES = ("ResourceScatter", "ResourceApply", "ResourceSparseApply")


#: Tensor operators whose whole work, on two tensors of one float dtype, is one raw op
_RAW_BINARY = {"__add__": gen_math_ops.add_v2, "__sub__": gen_math_ops.sub, "__mul__": gen_math_ops.mul,
               "__truediv__": gen_math_ops.real_div}
#: the same for the reflected operators too (`__rmul__`: the same op, operands swapped by the caller)
_RAW_BINARY_OPS = {**_RAW_BINARY, **{name.replace("__", "__r", 1): op for name, op in _RAW_BINARY.items()}}
_RAW_NAMES = {gen_math_ops.add_v2: "raw_ops.AddV2", gen_math_ops.sub: "raw_ops.Sub", gen_math_ops.mul: "raw_ops.Mul",
              gen_math_ops.real_div: "raw_ops.RealDiv"}
_FLOATS = {tf.float16, tf.bfloat16, tf.float32, tf.float64}
_FLOAT_ENUMS = frozenset(d.as_datatype_enum for d in _FLOATS)
#: the TensorFlow versions whose operator code was read to justify the raw-op replay; others keep
#: the operators (correct, ~20-30 us slower each) until someone reads theirs
RAW_OPERATORS_CHECKED = ("2.21.",)
_RAW_OK = tf.__version__.startswith(RAW_OPERATORS_CHECKED)


_KINDS = {np.asarray: CallKind.ESCAPE, **dict.fromkeys(READBACK_BUILTINS, CallKind.READBACK),
          **dict.fromkeys(_METADATA, CallKind.METADATA), **dict.fromkeys(_METHOD_OPS, CallKind.OP)}


class TfTracer(ArrayTracer):
    """Stands in for a tf.Tensor or tf.Variable during a trace; every operation is reported."""

    def __len__(self):
        return self._lt_call(len, (self,))

    def __iter__(self):
        if not self._lt_array.shape.rank:
            iter(self._lt_array)       # eager's TypeError ('Cannot iterate over a scalar tensor.')
        return (self[i] for i in range(len(self)))

    def __array__(self, dtype=None, copy=None):
        # TensorFlow's own conversion tries this first: refusing it makes TensorFlow dispatch
        # the op to us; np.asarray(x) in user code fails too, and the call runs eagerly
        raise TypeError("a TfTracer cannot become a NumPy array inside a trace")

    def numpy(self):
        return self._lt_call(np.asarray, (self,))

    # tf.print formats what it takes for no tensor with pprint (a tracer is no tensor to
    # TensorFlow's own code): its text is then what tf.print prints for the tensor, for display
    def __repr__(self):
        summarize = _tf_print_summarize(sys._getframe(1))
        return super().__repr__() if summarize is None else \
            self._lt_session.on_display(_print_text(self._lt_session, self._lt_array, summarize))

    def __str__(self):
        summarize = _tf_print_summarize(sys._getframe(1))
        return super().__str__() if summarize is None else \
            self._lt_session.on_display(_print_text(self._lt_session, self._lt_array, summarize))

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name in _ATTRGETTERS:
            if sys._getframe(1).f_globals.get("__name__", "").startswith("tensorflow."):
                # TensorFlow's own API code looking at an argument before it dispatches the
                # call to us: the whole call is recorded and replayed, reads included
                return getattr(self._lt_array, name)
            return self._lt_call(_ATTRGETTERS[name], (self,))
        method = getattr(type(self._lt_array), name, None)
        if callable(method):
            return functools.partial(_call_method, self, method)
        value = getattr(self._lt_array, name)      # none (a probe such as is_tensor_like): as eager
        self._lt_session.fail(f"tensor attribute {name!r} is not something lazytrace can follow")
        return value


_PRINT_MODULE = "tensorflow.python.ops.logging_ops"


_KERAS_SETTINGS = ("keras.config.floatx()", "keras.config.epsilon()", "keras.config.image_data_format()",
                   "keras.config.dtype_policy()")


def _keras_settings():
    """Keras's global settings, read in Python inside keras.ops and layers where no op shows them
    (`keras.ops.ones(3)` is of floatx; a layer computes in its dtype policy's dtype), as
    `torch.get_default_dtype()` is read by torch: None while Keras is not imported (it is not
    imported here). The dtype policy is read where keras keeps it (`keras.config.dtype_policy()`
    sets one when there is none)."""
    config = sys.modules.get("keras.src.backend.config")
    if config is None:
        return None
    state = sys.modules.get("keras.src.backend.common.global_state")
    policy = state.get_global_attribute("dtype_policy", None) if state is not None else None
    return config.floatx(), config.epsilon(), config.image_data_format(), getattr(policy, "name", None)


def _tf_print_summarize(frame):
    """`summarize` of the tf.print call whose formatting (pprint) asks for this text, else None."""
    for _ in range(64):             # (pprint recurses through nested containers)
        if frame is None:
            return None
        module = frame.f_globals.get("__name__")
        if module == _PRINT_MODULE and frame.f_code.co_name == "print_v2":
            return frame.f_locals.get("summarize", 3)
        if module != "pprint" and module != _PRINT_MODULE:     # (its generator expressions too)
            return None
        frame = frame.f_back
    return None


def _print_text(session, tensor, summarize) -> str:
    """The text tf.print shows for `tensor` (its StringFormat op), made outside the trace's watch."""
    watch = session.backend_state
    if watch is not None:
        watch.depth += 1            # (a variable read here is the print's, not the function's)
    try:
        return tf.strings.format("{}", (tensor,), summarize=summarize).numpy().decode()
    finally:
        if watch is not None:
            watch.depth -= 1


def _operator(name):
    method = getattr(tf.Tensor, name)

    def op(self, *args):
        # (the session called from here: the frame above is the code using the operator)
        return self._lt_session.on_call(method, (self,) + args, {})
    op.__name__ = name
    return op


for _name in _METHOD_OPS.values():
    setattr(TfTracer, _name, _operator(_name))


def _getitem(self, index):
    """`x[i]`; a variable's own slicing for a tf.Variable, as eager slices it: its result offers
    `.assign` (`v[0].assign(y)`, which then runs eagerly: the slice's assign is not dispatched)."""
    array = self._lt_array
    method = _VARIABLE_GETITEM if isinstance(array, tf.Variable) else tf.Tensor.__getitem__
    return self._lt_call(method, (self, index))


TfTracer.__getitem__ = _getitem


def _call_method(tracer, method, *args, **kwargs):
    return tracer._lt_call(method, (tracer,) + args, kwargs)


def _raw_binary(name, operands):
    """The raw op (Mul ...) an arithmetic operator `name` on these two tensors comes down to,
    where they are eager tensors of one float dtype and the operator's code was read for this
    TensorFlow version (RAW_OPERATORS_CHECKED), else None."""
    op = _RAW_BINARY_OPS.get(name)
    if op is None or not _RAW_OK:
        return None
    a, b = operands
    if type(a) is not EagerTensor or type(b) is not EagerTensor:
        return None
    dtype = a._datatype_enum()      # (C; the `dtype` property is Python code)
    return op if dtype == b._datatype_enum() and dtype in _FLOAT_ENUMS else None


_NOTHING: dict = {}     # (read only)


def _raw_run(func, args):
    """_raw_call's (op, operands, number constant or None, reflected) for the operator call of
    `func` with these very arguments that `run` just ran as a raw op, else None."""
    if type(args[0]) is not TfTracer:
        return None
    watch = args[0]._lt_session.backend_state
    last = watch.raw if type(watch) is _RandomWatch else None
    return last[2] if last is not None and last[1] is args and last[0] is func else None


def _first_tracer(obj, kwargs=None):
    """The first tracer in (nested lists/tuples/dicts of) call arguments, or None."""
    if kwargs:
        found = _first_tracer(obj)
        return found if found is not None else _first_tracer(list(kwargs.values()))
    tp = type(obj)
    if tp is TfTracer:
        return obj
    if tp is tuple or tp is list:
        for x in obj:
            tx = type(x)
            if tx is TfTracer:
                return x
            if tx is tuple or tx is list or tx is dict:
                found = _first_tracer(x)
                if found is not None:
                    return found
    elif tp is dict:
        return _first_tracer(list(obj.values()))
    return None


def _takes_code(args, kwargs) -> bool:
    """Whether call arguments (one level of lists/tuples/dicts deep) hold a Python function."""
    for a in (*args, *kwargs.values()) if kwargs else args:
        tp = type(a)
        if tp is TfTracer or tp is EagerTensor or tp in _NUMBERS:
            continue
        for x in a.values() if tp is dict else a if tp is list or tp is tuple else (a,):
            if callable(x) and not isinstance(x, (type, TfTracer, tf.Tensor, tf.Variable)):
                return True
    return False


_NUMBERS = frozenset({int, float, bool, complex, str, type(None)})


def _refuse_conversion(value, dtype=None, name=None, as_ref=False):
    raise TypeError("a TfTracer cannot become a tensor inside a trace")


class _Dispatcher(dispatch.GlobalOpDispatcher):
    """Handles TensorFlow API calls given tracers: TensorFlow asks it after conversion failed
    (the fallback dispatch), and, for an API it handled so once with a tracer as a top-level
    argument, TensorFlow's type-based dispatch hands it that API's later calls with a tracer there
    at once (`typed`), before the API tries the op and fails (~35-45 us a call)."""

    def __init__(self, typed_ok):
        self._typed_ok = typed_ok       # whether an API may be handed to us before it runs (see _type)
        self._typed: dict = {}          # id(API) -> (API, argument positions registered)

    def handle(self, op, args, kwargs):
        tracer = _first_tracer(args, kwargs)
        if tracer is None:
            return self.NOT_SUPPORTED
        self._type(op, args, kwargs)
        return self._record(op, tracer, args, kwargs)

    def _record(self, op, tracer, args, kwargs):
        if _takes_code(args, kwargs):
            # tf.cond, tf.map_fn, tf.case ...: eagerly they run a Python function, chosen by a value
            # TensorFlow reads itself; a recorded call would replay the branch taken with the
            # tracers the function closed over
            tracer._lt_session.fail(f"{getattr(op, '__name__', 'a TensorFlow call')} runs Python "
                                    f"functions it was given: a graph could not replay them")
        return tracer._lt_session.on_call(op, args, kwargs or {}, _outside_tensorflow(sys._getframe(2)))

    def _type(self, op, args, kwargs):
        """Registers with TensorFlow's type-based dispatcher of `op` the argument positions that
        hold a tracer in this call (TfTracer is a dispatchable type: see TensorflowBackend), for
        an API of the array namespaces (`allowed_target`: never tf.print, whose own code formats
        a tracer, or tf.py_function). Checked by TensorFlow at every later call of that API
        (C++: ~0.5 us on an eager call, measured on tf.exp, tf.reduce_mean); once per API and
        position, which stay registered (the handler only looks at the tracer it is given)."""
        entry = self._typed.get(id(op))
        if entry is None or entry[0] is not op:
            typed_ok = _TYPED_CHECKER is not None and self._typed_ok(op) and \
                getattr(op, dispatch.TYPE_BASED_DISPATCH_ATTR, None) is not None
            entry = self._typed[id(op)] = (op, set() if typed_ok else None)
        known = entry[1]
        if known is None:
            return
        positions = [i for i, a in enumerate(args) if type(a) is TfTracer and i not in known]
        if kwargs and any(type(a) is TfTracer for a in kwargs.values()):
            names = _argument_names(op)
            positions += [names.index(k) for k, a in kwargs.items()
                          if type(a) is TfTracer and k in names and names.index(k) not in known]
        if not positions:
            return
        dispatcher = getattr(op, dispatch.TYPE_BASED_DISPATCH_ATTR)

        def typed(*args, **kwargs):
            return self._record(op, _first_tracer(args, kwargs), args, kwargs)
        for i in positions:
            try:
                dispatcher.Register(_api_dispatcher.PySignatureChecker([(i, _TYPED_CHECKER)]), typed)
            except (TypeError, ValueError):     # another TensorFlow's dispatcher: the fallback only
                self._typed[id(op)] = (op, None)
                return
            known.add(i)


def _outside_tensorflow(frame):
    """The first frame from `frame` up that runs no code of TensorFlow's or lazytrace's: the code
    that made an API call TensorFlow dispatched to us (the user's `tf.sigmoid(x)`), where the
    tracer starts looking at the code making a call (graph.reads, handlers); the frames below it
    (the API's dispatch wrappers, this dispatcher's: 4-6 a call) are not watched there, and
    were walked for nothing."""
    while frame is not None and frame.f_globals.get("__name__", "").startswith(_DISPATCH_MODULES):
        frame = frame.f_back
    return frame


_DISPATCH_MODULES = ("tensorflow.", __name__)


def _argument_names(op) -> list:
    """The parameter names of a dispatchable API, as its type-based dispatcher numbers them."""
    return list(tf_inspect.getargspec(tf_decorator.unwrap(op)[1]).args)


try:        # TensorFlow's type-based dispatch (dispatch v2), as dispatch.dispatch_for_api registers
    from tensorflow.python.framework import _pywrap_python_api_dispatcher as _api_dispatcher
    dispatch.register_dispatchable_type(TfTracer)
    _TYPED_CHECKER = dispatch.make_type_checker(TfTracer)
except (ImportError, AttributeError):      # another TensorFlow: the fallback dispatch only
    _api_dispatcher, _TYPED_CHECKER = None, None


class _RandomWatch:
    """Eager op callback: a stateful random op, a variable read or a variable write, run by a call
    the trace did not record (its result would otherwise become a constant, its write be lost)."""

    def __init__(self, session):
        self.session = session
        self.depth = 0          # > 0 while a recorded call runs
        self.raw = None         # (func, args, _raw_call's answer) of the last call run as a raw op (see run)
        self.callbacks = ()     # the thread's list of op callbacks that TensorFlow reads (see __enter__)
        self.count = 0          # its length when the trace began, this callback in

    def __enter__(self):
        ctx = context.context()
        ctx.add_op_callback(self)
        # the very list TensorFlow's C++ reads at every op: `run` takes this callback out of it while a
        # recorded call runs, where it is the last one (an eager op with a callback to call costs ~4 us
        # more: a Mul 14 -> 18 us, C++ building its arguments); a callback added after it keeps it in
        # (its depth then says the ops are the call's own)
        callbacks = ctx.op_callbacks
        self.callbacks = callbacks if type(callbacks) is list else ()
        self.count = len(self.callbacks)
        return self

    def __exit__(self, exc_type, exc, tb):
        context.context().remove_op_callback(self)

    def __call__(self, op_type, inputs, attrs, outputs, op_name=None, graph=None):
        if self.depth == 0:
            if op_type in _RANDOM_OPS:
                self.session.fail("random numbers were drawn by calls lazytrace did not see")
            elif op_type == "ReadVariableOp":
                self.session.fail("a tf.Variable was read by a call lazytrace did not see (its value "
                                  "would be baked in)")
            elif op_type in _VARIABLE_WRITES or op_type.startswith(_VARIABLE_WRITE_PREFIXES):
                self.session.fail("a tf.Variable was written by a call lazytrace did not see "
                                  "(COUNTER.assign_add(1): a graph would not write it again)")
        return None


#: TensorFlow settings that Python code reads with no op a tracer sees (Backend.state_reads), by
#: the modules tf.config's public names live in
_STATE_READS = {(f"tensorflow._api.v2.config.{module}", name): None for module, name in (
    ("experimental", "tensor_float_32_execution_enabled"), ("threading", "get_inter_op_parallelism_threads"),
    ("threading", "get_intra_op_parallelism_threads"))}
_STATE_READS.update({("tensorflow._api.v2.config", name): None for name in (
    "get_soft_device_placement", "functions_run_eagerly")})


class TensorflowBackend(Backend):
    name = "tensorflow"
    array_types = (tf.Tensor, tf.Variable)
    attribute_types = (EagerTensor,)        # (a tf.Variable holds attributes of its own)
    tracer_class = TfTracer
    internal_modules = ("lazytrace.", "tensorflow.")
    tracked_types = (TfTracer, tf.Tensor, tf.Variable)
    static_types = (tf.dtypes.DType, tf.TensorShape)
    live_types = (tf.random.Generator,)
    sees_creation = False          # tf.zeros(3): no tracer argument, not dispatched
    knows_dynamic_shapes = False   # tf.where(c), tf.boolean_mask, tf.unique: no tags to tell
    writable_arrays = False        # the tf.Tensor a conversion makes

    def state_reads(self):
        return _STATE_READS

    def trace_refused(self):
        # a LazyGraph called inside tf.function (a Keras model's compiled step): its arguments are
        # symbolic tensors, and TensorFlow's own trace records the calls the function makes
        if not context.executing_eagerly():
            return ("called while TensorFlow builds a graph (inside tf.function): TensorFlow's own trace "
                    "records the function's calls")
        return None

    def refused_call(self, fn):
        # AutoGraph converts what a converted function calls, but not lazytrace's own code
        # (tf_autograph.py), which calls `fn`: converted here as tf.function would (its Python
        # `if` on a tensor becomes tf.cond), where AutoGraph is on in the calling context
        autograph = tf.__internal__.autograph
        return autograph.tf_convert(fn, autograph.control_status_ctx())

    def __init__(self):
        self._names: dict = {id(op): (op, name) for op, name in _RAW_NAMES.items()}
        self._kinds: dict = {}          # id(API) -> (API, CallKind): classify's answer for it
        self._scalars: dict = {}
        self._distribution = None
        # asked first (it declines every call that holds no tracer at once): a dispatcher asked
        # before it (Keras' KerasOpDispatcher flattens every call's arguments) costs each traced call
        dispatcher = _Dispatcher(self.allowed_target)
        if isinstance(getattr(dispatch, "_GLOBAL_DISPATCHERS", None), list):
            dispatch._GLOBAL_DISPATCHERS.insert(0, dispatcher)
        else:
            dispatcher.register()
        # a tracer reaching a TensorFlow conversion is refused at once, rather than after
        # tf.constant tried it as a NumPy array: TensorFlow then dispatches the call to us sooner
        tensor_conversion_registry.register_tensor_conversion_function(TfTracer, _refuse_conversion)

    # ---- signature ------------------------------------------------------------
    def describe(self, t):
        if type(t) is EagerTensor:      # (its shape tuple: no TensorShape built, no Variable check)
            return (EagerTensor, t._shape_tuple(), t.dtype, t.device)
        if isinstance(t, tf.Variable):
            return (type(t), tuple(t.shape), t.dtype, t.trainable)
        return (type(t), tuple(t.shape), t.dtype, t.device)

    def metadata_fixed(self, t):
        return not isinstance(t, tf.Variable)      # (a tensor is immutable; a variable of no fixed shape takes any)

    def guard_conditions(self, expr, t, const):
        return [f"tuple({expr}.shape) == {const(tuple(t.shape))}", f"{expr}.dtype == {const(t.dtype)}"]

    def global_state(self):
        """TF-NumPy behaviour (`tf.experimental.numpy.experimental_enable_numpy_behavior`):
        its dtype conversion mode changes how Python numbers and mixed dtypes combine (a graph
        caches a number operand as a tensor of the other operand's dtype), and its slicing mode
        changes indexing; Keras's global settings, once Keras is imported (see _keras_settings)."""
        return (tf_ops.get_dtype_conversion_mode(), tf_ops._numpy_style_slicing, _keras_settings())

    @kept_per_argument(64)
    def describe_global_state(self, state):
        mode, slicing, keras_settings = state
        return {"tf dtype conversion mode": str(mode), "tf numpy-style slicing": str(slicing)} | \
            ({} if keras_settings is None else dict(zip(_KERAS_SETTINGS, map(repr, keras_settings))))

    # ---- tracing ----------------------------------------------------------------
    def wrap_live(self, obj, session):
        return CallRecordingProxy(obj, session)

    def intercept(self, session):
        watch = session.backend_state = _RandomWatch(session)
        return watch            # (its own context manager: the op callback from __enter__ to __exit__)

    def caused_by_tracing(self, exc):
        """Also: TensorFlow code that takes no dispatch (`GradientTape.gradient` inside the
        function, a `tf.function` called with a tracer) failing on a tracer it holds, where it
        held a tensor in eager code. An error raised by an op run on the real tensors (its frames
        pass through `run`) is the function's own."""
        if super().caused_by_tracing(exc):
            return True
        held = False
        tb = exc.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            if frame.f_code is _RUN_CODE:
                return False
            if not held and frame.f_globals.get("__name__", "").startswith("tensorflow."):
                held = any(type(v) is TfTracer for v in frame.f_locals.values())
            tb = tb.tb_next
        return held and ("TensorFlow code that takes no dispatch (GradientTape.gradient, a tf.function ...) "
                         "was given a tracer")

    def classify(self, func, args, kwargs) -> CallKind:
        try:
            kind = _KINDS.get(func)
        except TypeError:            # unhashable callable
            return CallKind.UNKNOWN
        if kind is not None:
            return kind
        entry = self._kinds.get(id(func))       # (decided by the function's public name: once per function)
        if entry is None or entry[0] is not func:
            name = self._public_name(func)
            kind = CallKind.GENERATOR if name.startswith(("random.", "image.random_", "nn.dropout", "Generator.")) \
                and "stateless" not in name else CallKind.UNKNOWN
            entry = self._kinds[id(func)] = (func, kind)
        return entry[1]

    def run(self, func, args, kwargs):
        tracer, raw_args = flat_unwrap(args, TfTracer)
        if raw_args is None:            # arrays inside containers
            tracer, raw_args = _first_tracer(args, kwargs), unwrap_tree(args, TfTracer)
        elif tracer is None and kwargs:
            tracer = _first_tracer((), kwargs)
        live = args[0] if args and type(args[0]) is CallRecordingProxy else None   # generator.normal(...)
        session = tracer._lt_session if tracer is not None else live._self_session if live is not None else None
        watch = session.backend_state if session is not None else None
        if live is not None:
            raw_args = (live.__wrapped__,) + tuple(raw_args[1:])
        mutated = []
        if getattr(func, "__name__", "") in _MUTATING_METHODS and args:
            mutated.append(args[0])
        out = None              # the thread's op callbacks, where this call took the trace's out (see _RandomWatch)
        if watch is not None:
            watch.depth += 1
            callbacks = watch.callbacks
            if callbacks and callbacks[-1] is watch and len(callbacks) == watch.count:
                callbacks.pop()
                out = callbacks
            elif callbacks and watch.depth == 1:
                # the function added or removed one (tf.debugging.enable_check_numerics() raises at a
                # NaN its ops make): a graph would run them without that change
                session.fail("TensorFlow's op callbacks changed during the trace (e.g. "
                             "tf.debugging.enable_check_numerics): a graph's ops would not run under them")
        try:
            if session is not None and (mutated or live is not None):
                session.before_write(mutated[0] if mutated else live.__wrapped__)
            raw = self._raw_call(func, raw_args) if len(raw_args) == 2 and not kwargs else None
            result = raw[0](*raw[1]) if raw is not None else \
                func(*raw_args, **unwrap_tree(kwargs, TfTracer)) if kwargs else func(*raw_args)
        finally:
            if watch is not None:
                watch.depth -= 1
                if out is not None:
                    out.append(watch)
        if raw is not None and watch is not None:   # (its recording asks the same: specialize_args, replay_call)
            watch.raw = (func, args, raw)
        if session is None:
            return result, mutated
        by_array = {id(self.unwrap(m)): m for m in mutated} if mutated else _NOTHING
        return self._wrap(result, session, by_array), mutated

    def _wrap(self, result, session, by_array):
        if type(result) is EagerTensor or isinstance(result, (tf.Tensor, tf.Variable)):
            known = by_array.get(id(result))
            return known if known is not None else TfTracer(result, session)
        if type(result) in (tuple, list):
            return type(result)(self._wrap(x, session, by_array) for x in result)
        if isinstance(result, tuple) and hasattr(result, "_fields"):     # tf.unique, tf.math.top_k
            return type(result)(*(self._wrap(x, session, by_array) for x in result))
        return result

    def specialize_args(self, func, args, kwargs, recorded):
        """`x * 0.9` replays with a cached tf.constant(0.9, x.dtype): the operator converts the
        number to exactly that tensor at every call otherwise (the same Mul op either way)."""
        raw = _raw_run(func, args) if len(args) == 2 else None
        if raw is not None:         # the trace ran this call as a raw op: that constant
            constant = raw[2]
            return recorded if constant is None else (recorded[0], constant)
        if kwargs or len(args) != 2 or type(args[1]) not in (int, float) or \
                _METHOD_OPS.get(func) not in _ARITHMETIC:
            return recorded
        constant = self._number_tensor(self.unwrap(args[0]), args[1])
        return recorded if constant is None else (recorded[0], constant)

    def _number_tensor(self, x, number):
        """The tensor an arithmetic operator of `x` converts a Python number into (cached per
        number, dtype and device), or None where it is not one of x's number dtypes."""
        if type(x) is EagerTensor:      # (its dtype's number, C: the `dtype` property is Python code)
            key = (type(number), repr(number), x._datatype_enum(), x.device)
            constant = self._scalars.get(key)
            if constant is not None:
                return constant
        elif isinstance(x, tf.Tensor):
            key = (type(number), repr(number), x.dtype.as_datatype_enum, x.device)
        else:
            return None
        if not (x.dtype.is_floating or x.dtype.is_integer):
            return None
        constant = self._scalars.get(key)
        if constant is None:
            try:
                constant = self._scalars[key] = tf.constant(number, dtype=x.dtype)
            except (TypeError, ValueError):
                return None
        return constant

    def replay_call(self, func, args, kwargs, recorded, recorded_kwargs):
        """`x * y` on two tensors of one float dtype replays as the one raw op (Mul) that
        `Tensor.__mul__` runs for them after its Python-level work (name scope, dtype promotion,
        which is a no-op for one dtype, and the bool, sparse and string cases, which do not
        apply): ~20-30 us less per operator. The key fixes input types and dtypes, so the
        condition checked here holds at every replay."""
        if len(args) != 2 or kwargs:
            return func, recorded, recorded_kwargs
        raw = _raw_run(func, args)
        if raw is not None and (raw[2] is None or recorded[1] is raw[2]):
            # the trace ran this call as that raw op, on these operands: what is decided below
            return raw[0], (recorded[::-1] if raw[3] else recorded), recorded_kwargs
        try:
            name = _METHOD_OPS.get(func)
        except TypeError:           # unhashable callable
            return func, recorded, recorded_kwargs
        if name is None:
            return func, recorded, recorded_kwargs
        operands = [r if isinstance(r, tf.Tensor) else self.unwrap(a) for a, r in zip(args, recorded)]
        op = _raw_binary(name, operands)
        if op is None:
            return func, recorded, recorded_kwargs
        return op, (recorded[::-1] if name.startswith("__r") else recorded), recorded_kwargs

    def _raw_call(self, func, raw_args):
        """For the trace: (raw op, operands, the tensor a number operand became or None, reflected)
        of an operator call on real tensors that its graph
        replays as the raw op (specialize_args, replay_call), else None. Running that op now
        spares the trace TensorFlow's Python operator path, and runs what every replay runs.
        Only under TensorFlow's default type promotion (the first call must return what eager
        returns: the NumPy-style and automatic modes promote in Python first)."""
        try:
            name = _METHOD_OPS.get(func)
        except TypeError:           # unhashable callable
            return None
        if name not in _ARITHMETIC or tf_ops.is_auto_dtype_conversion_enabled() or \
                tf_ops.is_numpy_style_type_promotion():
            return None
        x, other = raw_args
        constant = None
        if type(other) in (int, float):
            other = constant = self._number_tensor(x, other)
        operands = [x, other]
        op = _raw_binary(name, operands)
        if op is None:
            return None
        reflected = name.startswith("__r")
        return op, (operands[::-1] if reflected else operands), constant, reflected

    def storage_key(self, t):
        return id(self.unwrap(t))

    def clone(self, t):
        return t            # tensors are immutable

    def snapshot(self, t):
        if isinstance(t, tf.random.Generator):      # a generator passed in: its state variable
            t = t.state
        if not isinstance(t, tf.Variable):
            return None
        with record.stop_recording():        # not a read a GradientTape around the call sees
            saved = tf.identity(t)
        return lambda: t.assign(saved)

    def to_numpy(self, t):
        return t.numpy()

    def from_numpy(self, data):
        return tf.convert_to_tensor(data)

    def rng_sources(self, func, args, kwargs) -> list:
        """The eager context's global seed (`tf.random.set_seed`) for a draw without a
        `tf.random.Generator`: it decides the op seeds of stateful random ops."""
        if func is not None and args and type(args[0]) is CallRecordingProxy:
            return []
        return [context.context()]

    def rng_token(self, source=None):
        """`tf.random.set_seed` (inside the function: a graph would not reseed) replaces the
        context's seed and its op-seed generator object, and clears the kernel cache: compared
        by identity, so reseeding with the same seed is seen too. Draws themselves are caught by
        the op callback when no call shows them."""
        if source is None:
            source = context.context()
        if not isinstance(source, context.Context):
            return None          # a tf.random.Generator argument: its draws are recorded calls
        return (source._seed, getattr(source, "_rng", None))

    def brief(self, t) -> tuple:
        # an EagerTensor's shape tuple, not its TensorShape (built on first use of .shape)
        return (t._shape_tuple() if type(t) is EagerTensor else tuple(t.shape), t.dtype)

    def output_facts(self, obj) -> tuple:
        # (brief, storage_key, requires_grad, write_count) in one call, for every output a trace records
        t = obj._lt_array if type(obj) is TfTracer else obj
        if type(t) is EagerTensor:
            return (t._shape_tuple(), t.dtype), id(t), False, None
        return self.brief(t), self.storage_key(t), self.requires_grad(t), self.write_count(t)

    @kept_per_argument(1024)
    def format_brief(self, brief) -> str:
        shape, dtype = brief
        return f"{'x'.join(str(d) for d in shape) or 'scalar'} {dtype.name}"

    # ---- persistent cache ----------------------------------------------------------
    persist_roots = ("builtins", "operator")

    @property
    def distribution(self) -> tuple:
        """The installed distributions that provide the `tensorflow` package (tensorflow-cpu,
        tensorflow, tf-nightly ...), found with importlib-metadata once per process."""
        if self._distribution is None:
            from ..persist.identity import distribution_versions
            self._distribution = tuple(name for name, _ in distribution_versions("tensorflow")) or ("tensorflow",)
        return self._distribution

    def persist_environment(self, start=False):
        """The logical devices and the thread pools' sizes, fixed when TensorFlow's context starts:
        code reads them in Python (len(tf.config.list_logical_devices()), get_*_parallelism_threads),
        which a graph bakes; another process can configure others. Not read before the context
        starts (that would start it, and forbid the user's own configuration): Unavailable, unless
        `start` (prewarm: its graphs run now, which starts the context anyway)."""
        if not start and not getattr(context.context(), "_initialized", True):   # (private: assumed started if gone)
            from ..persist.codec import Unavailable
            raise Unavailable("TensorFlow's context has not started: the devices its key names are not known yet")
        threading = tf.config.threading
        return {"devices": [device.name for device in tf.config.list_logical_devices()],
                "threads": [threading.get_inter_op_parallelism_threads(), threading.get_intra_op_parallelism_threads()]}

    def persist_root(self, module):
        """tensorflow and its API modules (tensorflow.math ...: imported on first use, as
        `tf.math` imports it), and TensorFlow's implementation modules that `import tensorflow`
        imported (the classes of tensors and variables, the raw arithmetic ops)."""
        if module in self.persist_roots or module == "tensorflow":
            return True
        if module.startswith("tensorflow.python."):
            return module in sys.modules
        return module.startswith("tensorflow.")

    def target_ref(self, func):
        """An operator or method by its class ('tensorflow:Tensor.__mul__'), a raw arithmetic op
        by its generated function, a read-back builtin, else a public TensorFlow op by its API
        name ('tensorflow.math:sin', 'tensorflow:cast')."""
        try:
            name = _METHOD_OPS.get(func)
            raw = func in _RAW_NAMES
        except TypeError:       # unhashable callable
            return None
        if name is not None:
            return f"tensorflow:Tensor.{name}"
        if func is _VARIABLE_GETITEM:
            return "tensorflow:Variable.__getitem__"
        if raw:
            return f"{gen_math_ops.__name__}:{func.__name__}"
        if func in READBACK_BUILTINS:
            return f"{'builtins' if isinstance(func, type) else 'operator'}:{func.__name__}"
        if _stored_method(func):
            return f"{func.__module__}:{func.__qualname__}"
        api = _api_name(func)
        if api is None:
            return None
        namespace, _, short = api.rpartition(".")
        return f"tensorflow{'.' if namespace else ''}{namespace}:{short}"

    def stored_call(self, func):
        """As target_ref; an op under decorators of its API function (tf.reduce_sum's deprecation
        wrapper) as the API name and how many `__wrapped__` steps lead to it."""
        ref = self.target_ref(func)
        if ref is None:
            return None
        module, _, name = ref.partition(":")
        try:
            found = getattr(importlib.import_module(module), name, None) if "." not in name else func
        except ImportError:
            return None
        for depth in range(_MAX_UNWRAP + 1):
            if found is func:
                return ref, (("unwrap", depth) if depth else None)
            found = getattr(found, "__wrapped__", None)
        return ref, None

    def loaded_call(self, obj, params):
        kind, depth = params
        if kind != "unwrap" or type(depth) is not int or not 0 < depth <= _MAX_UNWRAP:
            raise ValueError(f"not a stored tensorflow call: {params!r:.80}")
        for _ in range(depth):
            obj = getattr(obj, "__wrapped__", None)
        if not self.allowed_target(obj):
            raise ValueError(f"not a stored tensorflow call: {params!r:.80}")
        return obj

    def allowed_target(self, obj):
        """Operators and methods of tensors and variables, the raw arithmetic ops, read-back
        builtins, and TensorFlow's dispatchable ops (what the tracer can record) of the array
        namespaces only: never tf.io, tf.print, tf.py_function and the like."""
        try:
            if obj in _METHOD_OPS or obj in _RAW_NAMES or obj in READBACK_BUILTINS or obj is _VARIABLE_GETITEM:
                return True
        except TypeError:
            return False
        if _stored_method(obj):
            return True
        api = _api_name(obj)
        if api is None or not hasattr(obj, dispatch.FALLBACK_DISPATCH_ATTR):
            return False
        namespace, _, short = api.rpartition(".")
        return namespace in _STORED_NAMESPACES and short not in _NEVER_STORED

    def encode_static(self, obj):
        if isinstance(obj, tf.dtypes.DType):
            return ["dtype", obj.name]
        if type(obj) is tf.TensorShape:
            return ["shape", None if obj.rank is None else list(obj.as_list())]
        if isinstance(obj, np.dtype) and obj.names is None and obj.subdtype is None:
            return ["numpy", obj.name]
        if isinstance(obj, np.generic) and obj.dtype.kind in "biuf":
            return ["scalar", obj.dtype.name, repr(obj.item())]
        return None

    def decode_static(self, data):
        kind, value, *rest = data
        if kind == "shape" and (value is None or type(value) is list and
                                all(d is None or type(d) is int and d >= 0 for d in value)):
            return tf.TensorShape(value)
        dtype = _tf_dtype(value)
        if kind == "dtype":
            return dtype
        if kind == "numpy":
            return np.dtype(dtype.as_numpy_dtype)
        if kind == "scalar" and len(rest) == 1 and type(rest[0]) is str:
            text, number = rest[0], np.dtype(dtype.as_numpy_dtype)
            return number.type(text == "True" if number.kind == "b" else int(text) if number.kind in "iu"
                               else float(text))
        raise ValueError(f"not a stored tensorflow constant: {data!r:.80}")

    def array_spec(self, t):
        """[shape, 'tensor' or 'variable', dtype, trainable, device] of an eager tensor or a
        resource variable of a number or bool dtype."""
        if not (t.dtype.is_floating or t.dtype.is_integer or t.dtype.is_bool or t.dtype.is_complex):
            return None
        if type(t) is EagerTensor:
            return [list(t.shape), "tensor", t.dtype.name, False, t.device]
        if isinstance(t, tf.Variable) and type(t).__name__ == "ResourceVariable":
            return [list(t.shape), "variable", t.dtype.name, t.trainable, t.device]
        return None

    def synthetic_array(self, spec, start_devices=False):
        shape, kind, dtype, trainable, device = spec
        if kind not in ("tensor", "variable") or type(shape) is not list or type(trainable) is not bool or \
                type(device) is not str or not all(type(d) is int and d >= 0 for d in shape):
            raise ValueError(f"malformed tensor description {spec!r:.80}")
        dtype = _tf_dtype(dtype)
        if not start_devices and ":CPU:" not in device:
            raise RuntimeError(f"a tensor on {device} would start its runtime (prewarm=True allows it)")
        fill = True if dtype.is_bool else 0.5 if dtype.is_floating or dtype.is_complex else 1
        with tf.device(device):
            value = tf.fill(shape, tf.constant(fill, dtype=dtype))
            return tf.Variable(value, trainable=trainable) if kind == "variable" else value

    def save_arrays(self, arrays, metadata):
        """Each tensor as NumPy data, with its dtype and device in the metadata ('tf.arrays')."""
        described = {name: [t.dtype.name, t.device] for name, t in arrays.items()}
        return save_numpy_arrays({name: t.numpy() for name, t in arrays.items()},
                                 {**metadata, "tf.arrays": json.dumps(described)})

    def load_arrays(self, data, metadata):
        described = json.loads(metadata.get("tf.arrays", "{}"))
        out = {}
        for name, value in load_numpy_arrays(data, metadata, lambda n: np.dtype(_tf_dtype(n).as_numpy_dtype)).items():
            dtype, device = described[name]
            with tf.device(device):
                out[name] = tf.constant(value, dtype=_tf_dtype(dtype))
        return out

    # ---- code generation ----------------------------------------------------------
    def call_syntax(self, func):
        name = _METHOD_OPS.get(func) if type(func) is not functools.partial else None
        if name is not None:
            return operator_syntax(name)
        if func in _ATTRGETTERS.values():
            return ("attribute", next(k for k, v in _ATTRGETTERS.items() if v is func))
        qualname = getattr(func, "__qualname__", "")
        if qualname.startswith(("Variable.", "ResourceVariable.", "BaseResourceVariable.", "Tensor.",
                                "_EagerTensorBase.", "Generator.")):
            return ("method", func.__name__)
        return ("function", "tf." + self._public_name(func))

    def _public_name(self, func) -> str:
        entry = self._names.get(id(func))
        if entry is None or entry[0] is not func:
            # (the canonical name is looked up once per function, shared with _api_name: ~25 us)
            entry = self._names[id(func)] = (func, _api_name(func) or getattr(func, "__qualname__", "fn"))
        return entry[1]

    def literal(self, obj):
        if isinstance(obj, tf.dtypes.DType):
            return f"tf.{obj.name}"
        return None

    def namespace(self):
        return {"tf": tf}

    def compile(self, fn, graph, **options):
        """tf.function of the generated function (options such as jit_compile=True are passed
        on). A graph with guards reads values back into Python: it is kept as is."""
        from ..graph.ir import Kind
        if any(node.kind is Kind.GUARD for node in graph.nodes):
            return fn
        return tf.function(fn, autograph=False, **options)


#: the API namespaces (tf.NAMESPACE.op) whose ops a stored graph may call: array computation only
_STORED_NAMESPACES = frozenset({"", "math", "nn", "image", "linalg", "signal", "random", "bitwise", "dtypes",
                                "experimental.numpy"})
#: dispatchable top-level ops that run Python code or write output: never called by a stored graph
_NEVER_STORED = frozenset({"print", "py_function", "numpy_function", "load_op_library", "load_library",
                           "ensure_shape_py_function"})
_METHOD_CLASSES = ("Tensor.", "_EagerTensorBase.", "Variable.", "BaseResourceVariable.", "ResourceVariable.")
_DTYPE_NAME = re.compile(r"^[a-z][a-z0-9_]{1,24}$")
_MAX_UNWRAP = 4             # decorators between an API function and the op TensorFlow dispatches
_API_NAMES: dict = {}       # id(function) -> (function, its canonical TensorFlow API name or None)


def _api_name(func) -> str | None:
    """TensorFlow's canonical API name of a function ('math.sin'), or None."""
    entry = _API_NAMES.get(id(func))
    if entry is None or entry[0] is not func:
        try:
            name = tf_export.get_canonical_name_for_symbol(func)
        except Exception:       # noqa: BLE001 - not every object is a TensorFlow symbol
            name = None
        entry = _API_NAMES[id(func)] = (func, name)
    return entry[1]


def _stored_method(func) -> bool:
    """A public method of TensorFlow's tensor and variable classes (`v.assign`, `x.set_shape`)."""
    qualname, module = getattr(func, "__qualname__", ""), getattr(func, "__module__", "")
    name = qualname.rpartition(".")[2]
    return type(qualname) is str and qualname.startswith(_METHOD_CLASSES) and qualname.count(".") == 1 and \
        type(module) is str and module.startswith("tensorflow.") and not name.startswith("_") and \
        name not in ("numpy", "experimental_ref", "ref")


def _tf_dtype(name):
    if type(name) is not str or not _DTYPE_NAME.match(name):
        raise ValueError(f"not a stored tensorflow dtype: {name!r:.40}")
    dtype = tf.as_dtype(name)
    if dtype.name != name:
        raise ValueError(f"not a stored tensorflow dtype: {name!r:.40}")
    return dtype


_RUN_CODE = TensorflowBackend.run.__code__

BACKEND_CLASS = TensorflowBackend

"""NumPy backend.

Interception: NumPy has no mode stack, so input arrays are handed to the
function as `NumpyTracer` objects, which implement `__array_ufunc__`,
`__array_function__` (NEP 13/18), operators (`NDArrayOperatorsMixin`),
indexing and ndarray methods, and report each call to the session. Only
the traced function's own arguments are wrapped, so nothing leaks into other
threads.

What a tracer cannot follow is refused, never guessed: `np.asarray(x)` (the
`__array__` protocol), buffers and `.ctypes` hand raw memory to code that
does not dispatch, so the signature runs eagerly with that reason. Calls
that never touch a tracer (`np.zeros(3)`, `np.random.rand()`) are not seen:
their results are constants, and a global RNG draw is caught by comparing
NumPy's global RNG state before and after the trace.
"""
from __future__ import annotations

import datetime
import functools
import numbers
import pickle
import operator
import re
import struct
import warnings

import numpy as np

from ..graph.stateful import CallRecordingProxy

from . import mtstate
from .base import ArrayTracer, Backend, CallKind, call_as_caller


def asarray(array):
    """Stands for the `__array__` protocol (np.asarray and friends) in the call log: an escape."""
    return array


_READBACK = {float, int, bool, complex, operator.index, operator.truth, operator.contains,
             np.ndarray.item, np.ndarray.tolist, np.ndarray.tobytes}
#: the array's memory handed to code lazytrace cannot see (np.save into a buffer the function
#: reads back: a graph would write into the traced buffer and replay what it read then)
_ESCAPE = {asarray, np.save, np.savez, np.savez_compressed, np.savetxt, np.ndarray.tofile, np.ndarray.dump,
           np.ndarray.dumps}
_METADATA = {np.shape, np.ndim, np.size, len}  # plus the attrgetters of _METADATA_ATTRIBUTES
_DISPLAY = {np.array_repr, np.array_str, np.array2string, repr, str, format}
_DYNAMIC = {np.nonzero, np.argwhere, np.flatnonzero, np.unique, np.extract, np.compress,
            np.ndarray.nonzero, np.trim_zeros}
_MUTATING_METHODS = {"sort", "fill", "put", "partition", "resize", "itemset", "setfield", "byteswap"}
_MUTATING_FUNCTIONS = {np.copyto, np.put, np.place, np.putmask, np.fill_diagonal, np.put_along_axis,
                       operator.setitem}
#: calls a stored graph never makes: files, pickles, raw memory
_NOT_STORED = {"save", "savez", "savez_compressed", "savetxt", "load", "loadtxt", "genfromtxt", "fromfile",
               "tofile", "memmap", "dump", "dumps", "fromregex", "frombuffer", "__reduce__", "__reduce_ex__",
               "__setstate__", "ctypes"}
_DTYPE_CODE = re.compile(r"^[<>|=][bBiufc]\d{1,2}$")
_PYTHON_TYPES_BY_NAME = {"float": float, "int": int, "bool": bool, "complex": complex}
_PYTHON_TYPES = frozenset(_PYTHON_TYPES_BY_NAME.values())
_RNG_CLASSES = ("Generator.", "RandomState.")
_ARRAY_ATTRIBUTES = {"T", "mT", "real", "imag"}
_MEMORY_PROTOCOLS = frozenset({"__array_interface__", "__array_struct__", "__dlpack__", "__dlpack_device__"})
_METADATA_ATTRIBUTES = {"shape", "dtype", "ndim", "size", "itemsize", "nbytes"}
_ATTRGETTERS = {name: operator.attrgetter(name) for name in _ARRAY_ATTRIBUTES | _METADATA_ATTRIBUTES}
_ATTRIBUTE_OF = {getter: name for name, getter in _ATTRGETTERS.items()}
_METADATA_GETTERS = {_ATTRGETTERS[name] for name in _METADATA_ATTRIBUTES}


_SEQUENCES = (list, tuple, str, bytes, bytearray)
_MIXIN_MUL, _MIXIN_RMUL = np.lib.mixins.NDArrayOperatorsMixin.__mul__, np.lib.mixins.NDArrayOperatorsMixin.__rmul__


class NumpyTracer(ArrayTracer, np.lib.mixins.NDArrayOperatorsMixin):
    """Stands in for an ndarray during a trace; every operation is reported."""

    __slots__ = ()
    __array_priority__ = 1000

    def _lt_sees_tracer(self):
        """A NumPy scalar answers with its class to NumPy's own code too: np.isscalar(x.sum())
        is what it is in eager (NumPy dispatches on the type, which stays the tracer's; no
        NumPy code takes a scalar apart in Python)."""
        return Backend.internal_modules if isinstance(self._lt_array, np.generic) else NumpyBackend.internal_modules

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        func = ufunc if method == "__call__" else getattr(ufunc, method)
        return self._lt_call(func, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return self._lt_call(func, args, kwargs)

    def __array_namespace__(self, api_version=None):
        return np          # the array API standard's way to find a namespace: calls come back here

    def __mul__(self, other):
        # a NumPy scalar leaves a list, tuple, str or bytes to Python, which repeats it by the
        # scalar's __index__ (`[0] * x.argmax()` is a list; read back, guarded); an array multiplies
        if isinstance(other, _SEQUENCES) and isinstance(self._lt_array, np.generic):
            return NotImplemented
        return _MIXIN_MUL(self, other)

    def __rmul__(self, other):
        if isinstance(other, _SEQUENCES) and isinstance(self._lt_array, np.generic):
            return NotImplemented
        return _MIXIN_RMUL(self, other)

    def __array__(self, dtype=None, copy=None):
        array = np.asarray(_unwrap(self._lt_call(asarray, (self,))), dtype=dtype)    # a NumPy scalar too
        return array.copy() if copy else array

    def __getitem__(self, index):
        return self._lt_call(operator.getitem, (self, index))

    def __setitem__(self, index, value):
        self._lt_call(operator.setitem, (self, index, value))

    def __contains__(self, item):
        return self._lt_call(operator.contains, (self, item))

    def __bytes__(self):        # bytes(x): the array's buffer, read back (not bytes of its items)
        return self._lt_call(bytes, (self,))

    def __len__(self):
        return self._lt_call(len, (self,))

    def __iter__(self):
        if not self._lt_array.ndim:
            iter(self._lt_array)       # eager's TypeError ('iteration over a 0-d array')
        # the length through the session: guarded where it depends on the data (np.unique's result)
        return (self[i] for i in range(len(self)))

    def __getattr__(self, name):
        if name.startswith("__"):
            if name in _MEMORY_PROTOCOLS:
                # x.__array_interface__, PIL's Image.fromarray, np.ctypeslib: the array's memory,
                # handed out as eager code hands it, and the call runs eagerly (NumPy's own
                # conversion, np.asarray, reads it too: an escape either way)
                self._lt_session.fail(f"{name} (np.asarray, or other code reading the array's memory) hands "
                                      f"array memory to code lazytrace cannot see")
                return getattr(self._lt_array, name)
            raise AttributeError(name)     # other protocol probes: not offered
        if name in _ATTRGETTERS:     # metadata goes through the session too: guarded if data-dependent
            return self._lt_call(_ATTRGETTERS[name], (self,))
        method = getattr(np.ndarray, name, None)
        if callable(method) and not name.startswith("__"):
            return functools.partial(_call_method, self, method)
        value = getattr(self._lt_array, name)      # none: AttributeError, as eager
        self._lt_session.fail(f"ndarray attribute {name!r} exposes memory lazytrace cannot follow")
        return value


def _call_method(tracer, method, *args, **kwargs):
    # `x.view(type(x))`: type() of a tracer is NumpyTracer, which NumPy would take for a dtype
    args = tuple(np.ndarray if a is NumpyTracer else a for a in args) if args else args
    return tracer._lt_call(method, (tracer,) + args, kwargs)


def _invoke(func, args, kwargs):
    """func(*args, **kwargs), from the frame of the code that called NumPy (its warnings are
    that code's: base.call_as_caller); an ndarray method (recorded as `np.ndarray.any`) of a NumPy
    scalar, which a 0-d array's operators give (`(r < 0).any()`), is the scalar's own, as in
    eager code and in a graph (`v.any()`, codegen's method syntax)."""
    if args and isinstance(args[0], np.generic) and getattr(func, "__objclass__", None) is np.ndarray:
        func, args = getattr(args[0], func.__name__), args[1:]
    return call_as_caller(func, args, kwargs, NumpyBackend.internal_modules)


def _unwrap(obj):
    tp = type(obj)
    if tp is NumpyTracer:
        return obj._lt_array
    if tp is CallRecordingProxy:
        return obj.__wrapped__
    if tp is tuple or tp is list:
        return tp([_unwrap(x) for x in obj])
    if tp is dict:
        return {k: _unwrap(v) for k, v in obj.items()}
    return obj


#: numpy 2's ContextVar of the error state object np.errstate sets (None elsewhere: compared by value)
_ERRSTATE = getattr(getattr(getattr(np, "_core", None), "_ufunc_config", None), "_extobj_contextvar", None)


def _leaves(obj) -> list:
    """The items of nested tuples, lists and dicts (a call's arguments), in order."""
    found, stack = [], [obj]
    while stack:
        item = stack.pop()
        tp = type(item)
        if tp is tuple or tp is list:
            stack.extend(reversed(item))
        elif tp is dict:
            stack.extend(reversed(item.values()))
        else:
            found.append(item)
    return found


class _ErrorModes:
    """The floating-point error modes in effect (np.geterr, np.geterrcall): whether they hold
    now is answered by the identity of NumPy's error state object (~20 ns), else by value."""

    __slots__ = ("token", "modes", "call")

    def __init__(self):
        self.token = _ERRSTATE.get() if _ERRSTATE is not None else None
        self.modes, self.call = np.geterr(), np.geterrcall()

    def hold(self) -> bool:
        return (_ERRSTATE is not None and _ERRSTATE.get() is self.token) or \
            (np.geterr() == self.modes and np.geterrcall() is self.call)


class _LegacyLayout:
    """Fingerprints of legacy `RandomState`s (np.random's global one) read from memory (see
    mtstate): the MT19937 key and position where the bit generator keeps them, and the cached
    second Gaussian (`has_gauss`, `gauss`, in the RandomState itself: `np.random.randn()` may
    use it without changing the key). The RandomState holds a struct pointing to the state,
    then a struct {pointer to that struct, int has_gauss, double gauss}: found by those
    pointers on a probe, checked against get_state() after draws."""

    _GAUSS = struct.Struct("@id")       # has_gauss, then gauss (aligned as in the C struct)

    def __init__(self):
        self._gauss = self._locate()
        self._views = None      # (RandomState, its bit generator, views of their state and gauss: mtstate.view)

    def _locate(self) -> int | None:
        probe = np.random.RandomState(20261123)
        try:
            size = type(probe).__basicsize__
            held = mtstate.find_pointer(probe, size, probe._bit_generator.ctypes.state_address)
            pointer = None if held is None else mtstate.find_pointer(probe, size, id(probe) + held)
            if pointer is None or pointer + mtstate.POINTER_SIZE + self._GAUSS.size > size:
                return None
            self._gauss = pointer + mtstate.POINTER_SIZE
            for draw in (probe.standard_normal, probe.standard_normal, probe.random_sample):
                draw()          # a pair drawn (has_gauss set), its second used (unset), a uniform
                if self._read(probe) != self._public(probe, exact=True):
                    return None
            return self._gauss
        except Exception:       # noqa: BLE001 - any surprise: the public getter
            return None

    def _fast(self, rs) -> bool:
        return self._gauss is not None and type(rs) is np.random.RandomState and \
            type(rs._bit_generator) is np.random.MT19937

    def _read(self, rs) -> tuple:
        """(key and position as they lie in memory, has_gauss, gauss)."""
        has_gauss, gauss = self._GAUSS.unpack(mtstate.read(rs, self._gauss, self._GAUSS.size))
        return mtstate.read_address(rs._bit_generator.ctypes.state_address, mtstate.STATE_BYTES), has_gauss, gauss

    def token(self, rs):
        """Equal for states that draw the same numbers (the cached Gaussian counts only if set)."""
        views = self._views
        if views is None or views[0] is not rs or views[1] is not rs._bit_generator or self._gauss is None:
            if not self._fast(rs):
                return self._public(rs)
            views = self._views = (rs, rs._bit_generator,       # (held: their memory stays theirs)
                                   mtstate.view(rs._bit_generator.ctypes.state_address, mtstate.STATE_BYTES),
                                   mtstate.view(id(rs) + self._gauss, self._GAUSS.size))
        has_gauss, gauss = self._GAUSS.unpack(views[3].raw)
        return views[2].raw, has_gauss, gauss if has_gauss else 0.0

    def snapshot(self, rs):
        """A function putting `rs`'s state back as it is now (read from memory: set_state builds
        the key array only if it runs)."""
        if not self._fast(rs):
            state = rs.get_state(legacy=False)
            return lambda: rs.set_state(state)
        raw, has_gauss, gauss = self._read(rs)

        def restore():
            key = np.frombuffer(raw, dtype=np.uint32, count=624).copy()
            position = struct.unpack_from("@i", raw, key.nbytes)[0]
            rs.set_state(("MT19937", key, position, has_gauss, gauss))
        return restore

    @staticmethod
    def _public(rs, exact=False):
        """token (or with `exact`, _read) through get_state()."""
        if type(rs._bit_generator) is not np.random.MT19937:
            return pickle.dumps(rs.get_state(legacy=False))
        state = rs.get_state()
        return (mtstate.key_bytes(state[1]) + struct.pack("@i", state[2]), state[3],
                state[4] if state[3] or exact else 0.0)


def _global_rng_state():
    return pickle.dumps(np.random.get_state(legacy=False))


#: NumPy state that Python code reads with no call a tracer sees (Backend.state_reads)
_STATE_READS = {
    ("numpy", "get_printoptions"): None,
    ("numpy", "geterr"): None,
    ("numpy", "geterrcall"): None,
    ("numpy", "getbufsize"): None,
    ("numpy.random", "get_state"): _global_rng_state,
}


class NumpyBackend(Backend):
    name = "numpy"
    sees_creation = False
    knows_dynamic_shapes = False    # np.bincount, np.where(c), np.repeat(x, counts)... no tags to tell
    array_types = (np.ndarray,)
    tracer_class = NumpyTracer
    internal_modules = ("lazytrace.", "numpy.")
    tracked_types = (NumpyTracer, np.ndarray)
    static_types = (np.dtype, np.generic)
    live_types = (np.random.Generator, np.random.RandomState)
    live_unseen_methods = frozenset({"bit_generator"})    # rng.bit_generator.state: no call shows it

    def wrap_live(self, obj, session):
        return CallRecordingProxy(obj, session)

    def __init__(self):
        self._names: dict = {}
        self._kinds: dict = {}      # callable -> its kind, as far as the callable alone decides
        self._writes_first: dict = {}   # callable -> whether it writes into its first argument
        self._legacy = None         # _LegacyLayout, found at the first rng_token

    def unkeyable_reason(self, tp):
        """A tracer stands in for an ndarray: it would multiply np.matrix objects elementwise and
        sum a masked array's masked values. Subclasses run eagerly."""
        if tp is not np.ndarray:
            return (f"{tp.__module__}.{tp.__qualname__} is a subclass of ndarray, whose operators and "
                    f"methods a tracer would not follow (np.matrix, masked arrays)")
        return None

    def describe(self, a):
        return (type(a), a.shape, a.dtype)

    def guard_conditions(self, expr, a, const):
        return [f"{expr}.shape == {const(a.shape)}", f"{expr}.dtype == {const(a.dtype)}"]


    def intercept(self, session):
        from contextlib import nullcontext
        return nullcontext()      # tracers report by themselves

    def classify(self, func, args, kwargs) -> CallKind:
        if func is operator.getitem and _has_mask_index(args[1]):
            return CallKind.DYNAMIC_SHAPE
        try:
            kind = self._kinds.get(func)
        except TypeError:        # unhashable callable
            return CallKind.UNKNOWN
        if kind is None:
            kind = _kind_of(func)
            if len(self._kinds) < _REMEMBERED:
                self._kinds[func] = kind
        return kind

    def run(self, func, args, kwargs):
        session = next((x._lt_session if type(x) is NumpyTracer else x._self_session
                        for x in _tracers(args, kwargs)), None)
        raw_args, raw_kwargs = _unwrap(args), _unwrap(kwargs)
        mutated = []
        out = kwargs.get("out")
        if out is not None:
            mutated.extend(out if isinstance(out, tuple) else (out,))
        writes = self._writes_first.get(func)
        if writes is None:
            writes = _writes_first(func)
            if len(self._writes_first) < _REMEMBERED:
                self._writes_first[func] = writes
        if writes:
            mutated.append(args[0])
        if session is None:
            return _invoke(func, raw_args, raw_kwargs), mutated
        mutated = [m for m in mutated if isinstance(m, self.tracked_types)]
        for m in mutated:
            session.before_write(m)
        drawn = bool(args) and type(args[0]) is CallRecordingProxy
        if drawn:       # a generator passed in draws
            session.before_write(args[0].__wrapped__)
        result = _invoke(func, raw_args, raw_kwargs)
        if drawn and not isinstance(result, (np.ndarray, np.generic, type(None))):
            # `rng.random()` is a Python float, `rs.get_state()` a tuple: no tracer carries them, so a
            # graph would draw again and use the trace's value
            session.fail(f"{getattr(func, '__name__', 'a method')}() of a random generator passed in gave a "
                         f"{type(result).__name__}, which a graph would bake")
        if _holds_objects(result) or not isinstance(result, _VALUES) and _object_arrays(raw_args):
            # an item of an object array (a list, a user's object): what the function reads from it
            # or changes in it is no call lazytrace sees (the trace handed it a copy of a list before)
            session.fail(f"{type(result).__name__} object from an array handed to Python code: what is "
                         f"read from it or changed in it is not seen")
            return result, mutated
        by_array = {id(self.unwrap(m)): m for m in mutated}
        return self._wrap(result, session, by_array), mutated

    def constant_state(self, plan):
        """np.errstate decides what a division by zero, an overflow or an invalid value does:
        eager warns, raises or calls a handler at every call, while a graph computed such a
        constant once. A graph whose constants hold inf or nan (what those errors leave) checks
        that the error modes are the trace's (np.errstate(all="raise") around it: traced again,
        so it raises as eager does). The same for a NumPy scalar a call was given as a literal
        (`x + np.float64(1e308) * 10`: Python code computed it, no call shows it). Integers
        leave no mark (`np.int8(100) * np.int8(2)` wraps, `np.arange(3) // 0` is 0): a graph
        with integer constants or literals checks the error modes too (~20 ns). Underflow
        leaves no such mark: not checked."""
        literals = [a for node in plan.nodes for a in _leaves((node.args, node.kwargs)) if isinstance(a, np.generic)]
        for array in [*(self.unwrap(value.obj) for value in plan.constants), *literals]:
            if isinstance(array, (np.ndarray, np.generic)) and (array.dtype.kind in "iu" or array.dtype.kind in "fc"
                                                                and not np.isfinite(array).all()):
                return _ErrorModes()
        return None

    def constant_checks(self, state, const):
        return [(f"{const(state)}.hold()", "the floating-point error modes (np.errstate) differ from the "
                 "trace's, where a constant met a division by zero, an overflow or an invalid value")]

    def run_detached(self, func, args, kwargs):
        return _invoke(func, _unwrap(args), _unwrap(kwargs))

    def _wrap(self, result, session, by_array):
        if isinstance(result, (np.ndarray, np.generic)):
            known = by_array.get(id(result))
            return known if known is not None else NumpyTracer(result, session)
        if type(result) in (tuple, list) and _holds_arrays(result):     # not a list from an object array
            return type(result)(self._wrap(x, session, by_array) for x in result)
        if isinstance(result, tuple) and hasattr(type(result), "_fields"):
            return type(result)(*(self._wrap(x, session, by_array) for x in result))
        return result

    def state_reads(self):
        return _STATE_READS

    def unseen_state(self):
        """`np.errstate` / `np.seterr` inside a function decide whether a division by zero raises,
        warns or passes, and no call shows them: a change makes the signature run eagerly."""
        return tuple(np.geterr().items())

    def storage_key(self, a):
        """The object at the end of the `.base` chain, through holders that are not arrays too
        (sliding_window_view / as_strided views hang off a DummyArray whose base is the array)."""
        a = self.unwrap(a)
        base = getattr(a, "base", None)
        while base is not None:
            a, base = base, getattr(base, "base", None)
        return id(a)

    def clone(self, a):
        return a if isinstance(a, np.generic) else np.copy(a)     # (np.copy of a scalar is a 0-d array)

    def snapshot(self, a):
        if isinstance(a, np.random.Generator):
            state = a.bit_generator.state
            return lambda: setattr(a.bit_generator, "state", state)
        if isinstance(a, np.random.RandomState):
            state = a.get_state(legacy=False)
            return lambda: a.set_state(state)
        saved = np.copy(a)
        return lambda: np.copyto(a, saved)

    def snapshot_rng(self):
        if self._legacy is None:
            self._legacy = _LegacyLayout()
        return self._legacy.snapshot(np.random.mtrand._rand)

    def from_numpy(self, data):
        return data

    def write_back(self, a, data):
        if not a.flags.writeable:
            return "it is a read-only array"
        np.copyto(a, data)
        return None

    def rng_sources(self, func, args, kwargs) -> list:
        return [None]       # the global state; Generator draws go through CallRecordingProxy nodes

    def generator_state(self, obj, tracing):
        # never recorded unless passed in (CallRecordingProxy): draws from a global one were baked
        if isinstance(obj, np.random.Generator):
            return pickle.dumps(obj.bit_generator.state)
        if isinstance(obj, np.random.RandomState):
            return pickle.dumps(obj.get_state())
        return None

    def rng_token(self, source=None):
        if self._legacy is None:
            self._legacy = _LegacyLayout()
        return self._legacy.token(np.random.mtrand._rand)

    def brief(self, a) -> tuple:
        a = self.unwrap(a)
        return (np.shape(a), a.dtype if hasattr(a, "dtype") else np.asarray(a).dtype)

    def format_brief(self, brief) -> str:
        return f"{'x'.join(str(d) for d in brief[0]) or 'scalar'} {brief[1]}"

    def example_array(self, shape, dtype, seed):
        try:
            dt = np.dtype(dtype)
        except TypeError:
            raise ValueError(f"unknown numpy dtype {dtype!r} (e.g. float32, float64, int64, uint8, bool)") from None
        rng = np.random.default_rng(seed)
        if dt.kind == "b":
            return rng.random(shape) > 0.5
        if dt.kind in "fc":
            return rng.random(shape).astype(dt)
        return rng.integers(0, 10, shape).astype(dt)

    def call_syntax(self, func):
        if func is operator.getitem:
            return ("getitem", "")
        if func is operator.setitem:
            return ("setitem", "")
        if func in _ATTRIBUTE_OF:
            return ("attribute", _ATTRIBUTE_OF[func])
        if getattr(func, "__objclass__", None) is np.ndarray or \
                getattr(func, "__qualname__", "").startswith(_RNG_CLASSES):
            return ("method", func.__name__)
        owner = getattr(func, "__self__", None)
        if isinstance(owner, np.ufunc):
            return ("function", f"numpy.{owner.__name__}.{func.__name__}")
        return ("function", self._qualified_name(func))

    def _qualified_name(self, func) -> str:
        name = self._names.get(id(func))
        if name is None:
            short = getattr(func, "__name__", type(func).__name__)
            if vars(np).get(short) is func:     # not getattr: np.str and the like warn
                name = f"numpy.{short}"
            elif getattr(func, "__module__", None) in (None, "builtins", "_operator"):
                name = short
            else:
                name = f"{func.__module__}.{short}"
            self._names[id(func)] = name
        return name

    # ---- persistent cache ----------------------------------------------------------
    distribution = "numpy"
    persist_roots = ("numpy", "numpy.linalg", "numpy.fft", "operator", "builtins")

    def target_ref(self, func):
        owner = getattr(func, "__self__", None)
        if isinstance(owner, np.ufunc):
            return f"numpy:{owner.__name__}.{func.__name__}"
        if isinstance(func, np.ufunc):
            return f"numpy:{func.__name__}"
        if getattr(func, "__objclass__", None) is np.ndarray:
            return f"numpy:ndarray.{func.__name__}"
        if func in _READBACK or func in (operator.getitem, operator.setitem):
            return f"{'builtins' if isinstance(func, type) else 'operator'}:{func.__name__}"
        module, _, short = self._qualified_name(func).rpartition(".")
        return f"{module}:{short}" if module in self.persist_roots else None

    def allowed_target(self, obj) -> bool:
        name = getattr(obj, "__name__", "")
        if name in _NOT_STORED:
            return False
        owner = getattr(obj, "__self__", None)
        return (isinstance(obj, np.ufunc) or isinstance(owner, np.ufunc) or obj in _READBACK
                or obj in (operator.getitem, operator.setitem)
                or getattr(obj, "__objclass__", None) is np.ndarray
                or hasattr(obj, "_implementation"))            # dispatched through __array_function__

    def encode_static(self, obj):
        if isinstance(obj, np.dtype) and obj.names is None and obj.subdtype is None:
            return ["dtype", obj.str]
        if isinstance(obj, (np.bool_, np.integer, np.floating)):
            return ["scalar", obj.dtype.str, repr(obj.item())]
        if isinstance(obj, type) and obj in _PYTHON_TYPES:
            return ["type", obj.__name__]
        if isinstance(obj, type) and issubclass(obj, (np.bool_, np.integer, np.floating, np.complexfloating)):
            return ["type", np.dtype(obj).str]
        return None

    def decode_static(self, data):
        kind, code, *value = data
        if kind == "type" and code in _PYTHON_TYPES_BY_NAME:
            return _PYTHON_TYPES_BY_NAME[code]
        if not isinstance(code, str) or not _DTYPE_CODE.match(code) or kind not in ("dtype", "scalar", "type"):
            raise ValueError(f"not a stored numpy dtype or scalar: {data!r}")
        dtype = np.dtype(code)
        if kind == "dtype":
            return dtype
        if kind == "type":
            return dtype.type
        text = value[0]
        number = text == "True" if dtype.kind == "b" else int(text) if dtype.kind in "iu" else float(text)
        return dtype.type(number)

    def array_spec(self, a):
        encoded = self.encode_static(a.dtype)
        return None if type(a) is not np.ndarray or encoded is None else [list(a.shape), encoded]

    def synthetic_array(self, spec, start_devices=False):
        shape, dtype = spec
        if not all(type(d) is int and d >= 0 for d in shape):
            raise ValueError(f"malformed array description {spec!r:.80}")
        dtype = self.decode_static(dtype)
        if not isinstance(dtype, np.dtype):
            raise ValueError(f"malformed array description {spec!r:.80}")
        return np.full(shape, True if dtype.kind == "b" else 0.5 if dtype.kind in "fc" else 1, dtype=dtype)

    def quiet(self):
        return np.errstate(all="ignore")      # no warning, raise, or the user's seterrcall handler

    def save_arrays(self, arrays, metadata):
        from safetensors.numpy import save
        return save({name: np.ascontiguousarray(a) for name, a in arrays.items()}, metadata=metadata)

    def load_arrays(self, data, metadata):
        from safetensors.numpy import load
        return load(data)

    def namespace(self):
        return {"numpy": np}

    def compile(self, fn, graph):
        warnings.warn("return_backend_traced_fn=True: NumPy has no compiler of its own; the graph is "
                      "returned as generated Python", stacklevel=3)
        return fn


_REMEMBERED = 4096      # callables whose kind is kept (NumPy's API, ufunc methods ...)


def _kind_of(func) -> CallKind:
    """What a callable is, by itself (classify adds what depends on the arguments)."""
    if func in _ESCAPE:
        return CallKind.ESCAPE
    if func in _READBACK:
        return CallKind.READBACK
    if func in _METADATA or func in _METADATA_GETTERS:
        return CallKind.METADATA
    if func in _DISPLAY:
        return CallKind.DISPLAY
    if func in _DYNAMIC:
        return CallKind.DYNAMIC_SHAPE
    if getattr(func, "__qualname__", "").startswith(_RNG_CLASSES):
        return CallKind.GENERATOR
    return CallKind.UNKNOWN


def _writes_first(func) -> bool:
    """Whether a call writes into its first argument (np.copyto, ndarray.sort, ufunc.at ...)."""
    return func in _MUTATING_FUNCTIONS or getattr(func, "__name__", "") in _MUTATING_METHODS \
        and getattr(func, "__objclass__", None) is np.ndarray or getattr(func, "__name__", "") == "at"


_VALUES = (np.ndarray, np.generic, numbers.Number, str, bytes, type(None), np.dtype, slice,
           datetime.date, datetime.time, datetime.timedelta)      # (datetime64's .item(), .tolist())


def _holds_objects(result) -> bool:
    """Whether a call's result is or holds (in tuples and lists) an object other than arrays and
    immutable values: an item of an object array."""
    if isinstance(result, _VALUES):
        return False
    if type(result) in (tuple, list) or isinstance(result, tuple) and hasattr(type(result), "_fields"):
        return any(_holds_objects(x) for x in result)
    return True


def _holds_arrays(result) -> bool:
    return any(isinstance(x, (np.ndarray, np.generic)) or type(x) in (tuple, list) and _holds_arrays(x)
               for x in result)


def _object_arrays(args) -> bool:
    return any(type(a) is np.ndarray and a.dtype.hasobject for a in args)


def _tracers(args, kwargs):
    for a in list(args) + list(kwargs.values()):
        if type(a) is NumpyTracer or type(a) is CallRecordingProxy:
            yield a
        elif type(a) in (tuple, list):
            yield from (x for x in a if type(x) is NumpyTracer)


def _has_mask_index(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    for i in items:
        arr = i._lt_array if type(i) is NumpyTracer else i
        if isinstance(arr, np.ndarray) and arr.dtype == bool:
            return True
    return False


BACKEND_CLASS = NumpyBackend

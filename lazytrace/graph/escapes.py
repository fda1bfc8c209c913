"""Tracer objects that escape a trace.

Backends that trace by handing the function wrapper objects (NumPy, JAX and TensorFlow tracers,
see Backend.tracer_class) must not leave those wrappers in what the function hands back or
leaves behind: eager code would have put arrays there. The result of a first call is rebuilt
through tuples, lists and dicts by the tracer; what it cannot rebuild (an object holding
arrays, a closure over an input, a global the function filled) is released here, in place: each
tracer found is replaced by its array.
"""
from __future__ import annotations

import collections
import collections.abc
import dataclasses
import functools
import gc
import types

from .stateful import SessionProxy

_DEPTH = 8


def release(obj, tracer_type: type | None, depth: int = 0, seen: set | None = None):
    """`obj` with each `tracer_type` object inside it replaced by its array, and each proxy the
    trace handed for an object passed in (stateful.SessionProxy) by that object: in place in
    lists, dicts, sets, closure cells and object attributes; tuples are rebuilt (returned)."""
    tp = type(obj)
    if tp is tracer_type:
        return obj._lt_array
    if issubclass(tp, SessionProxy):
        return obj.__wrapped__
    if depth > _DEPTH or tp in _ATOMS or isinstance(obj, (type, types.ModuleType)):
        return obj
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return obj
    seen.add(id(obj))

    def inner(x):
        return release(x, tracer_type, depth + 1, seen)

    if isinstance(obj, tuple):
        items = [inner(x) for x in obj]
        if all(a is b for a, b in zip(items, obj)):
            return obj
        try:
            return tp(*items) if hasattr(tp, "_fields") else tp(items)
        except TypeError:               # a tuple subclass built otherwise (its own __new__)
            try:
                new = tuple.__new__(tp, items)
            except TypeError:           # a C subclass: left as it is
                return obj
            if hasattr(new, "__dict__"):
                vars(new).update(vars(obj))
            return new
    if isinstance(obj, (list, collections.deque)):
        for i, x in enumerate(obj):
            new = inner(x)
            if new is not x:
                obj[i] = new
    elif isinstance(obj, dict):
        for k, v in list(obj.items()):
            new = inner(v)
            if new is not v:
                obj[k] = new
    elif isinstance(obj, set):
        items = [inner(x) for x in obj]
        if any(a is not b for a, b in zip(items, obj)):
            obj.clear()
            obj.update(items)
    elif isinstance(obj, types.FunctionType):        # a closure over an input or an intermediate
        for cell in obj.__closure__ or ():
            _release_cell(cell, inner)
        return obj
    elif isinstance(obj, (types.MethodType, types.BuiltinMethodType)):
        inner(getattr(obj, "__self__", None))
        return obj
    elif type(obj) is functools.partial and not _ours(obj.func):     # read-only arguments: a new partial
        func, args, keywords = inner(obj.func), inner(obj.args), inner(obj.keywords)
        if func is obj.func and args is obj.args:   # (its keywords dict was released in place)
            return obj
        return functools.partial(func, *args, **keywords)
    elif isinstance(obj, BaseException):            # ValueError(x): its args
        args = inner(obj.args)
        if args is not obj.args:
            obj.args = args
    elif isinstance(obj, types.CellType):
        _release_cell(obj, inner)
        return obj
    elif isinstance(obj, _SUSPENDED) or type(obj).__module__ in ("builtins", "itertools") and \
            isinstance(obj, collections.abc.Iterator):
        # a generator's frame (its closure cells, the lists it walks), an iterator over a list:
        # released where they can be (a plain local of a generator's frame cannot: such a tracer
        # computes as its array once the trace has ended, TraceSession.closed)
        for held in gc.get_referents(obj):
            inner(held)
        return obj
    namespace = getattr(obj, "__dict__", None)
    if type(namespace) is dict and not callable(getattr(tp, "__get__", None)):
        for k, v in list(namespace.items()):
            new = inner(v)
            if new is not v:
                namespace[k] = new          # not setattr: no property or __setattr__ of the class runs
    for name in _slots(tp):
        value = getattr(obj, name, _ABSENT)
        if value is not _ABSENT:
            new = inner(value)
            if new is not value:
                object.__setattr__(obj, name, new)      # frozen dataclasses too
    return obj


def release_exception(exc: BaseException, tracer_type: type | None) -> None:
    """Release, in place, an exception the function raised and the exceptions it was raised
    from or while handling (`raise Error(x) from KeyError(y)`): their args and attributes."""
    pending, seen = [exc], set()
    while pending:
        exc = pending.pop()
        if exc is not None and id(exc) not in seen:
            seen.add(id(exc))
            release(exc, tracer_type)
            pending += (exc.__cause__, exc.__context__)


def release_held(holders, tracer_type: type | None) -> None:
    """Release what the function left in the places it can reach by itself: (namespace, name) of
    a global, (cell, None) of a closure variable, (object, None) of an object whose attributes
    it reads (graph.reads.PythonReads.holders)."""
    for holder, key in holders:
        if key is not None:
            value = holder.get(key)
            new = release(value, tracer_type)
            if new is not value:
                holder[key] = new
        elif isinstance(holder, types.CellType):
            _release_cell(holder, lambda x: release(x, tracer_type))
        else:
            release(holder, tracer_type)


def _release_cell(cell, inner) -> None:
    try:
        value = cell.cell_contents
    except ValueError:                              # an empty cell
        return
    new = inner(value)
    if new is not value:
        cell.cell_contents = new


def _ours(func) -> bool:
    """A method of a tracer (`x.sum` is partial(lazytrace's method call, x, ndarray.sum)): it
    still runs after the trace, as that array's method."""
    return str(getattr(func, "__module__", "")).startswith("lazytrace.")


def _slots(tp) -> list:
    names = [s for c in tp.__mro__ for s in getattr(c, "__slots__", ()) if isinstance(s, str)]
    if dataclasses.is_dataclass(tp):
        names += [f.name for f in dataclasses.fields(tp)]
    return [n for n in dict.fromkeys(names) if n not in ("__dict__", "__weakref__")]


_SUSPENDED = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)
_ATOMS = frozenset({int, float, bool, str, bytes, complex, type(None), range, slice})
_ABSENT = object()

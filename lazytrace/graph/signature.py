"""The cache key of one call: pytree structure plus a description of each leaf.

Arrays are described by their backend (type, shape, dtype, device,
requires_grad...) and become graph inputs; Python scalars, strings, None,
framework dtypes/devices and enums are keyed by value (a graph bakes them in);
static arguments are keyed by hash and equality. Anything else cannot be keyed
safely, so the call runs eagerly (`Unkeyable` says which argument and why).

`Signature.key` is on the replay path of every call and is written for speed;
`walk` is the general traversal used when tracing and for diagnostics, and
visits leaves in the same order.
"""
from __future__ import annotations

import enum
import math
import numbers
from itertools import compress, repeat
from typing import Any, Callable

from ..backends import backend_for_type, get_backend

#: leaves keyed by value: immutable Python objects a graph may bake in
_VALUE_TYPES = frozenset({int, float, bool, complex, str, bytes, type(None), type(Ellipsis), range, type})
_STATIC = "static"
_STATEFUL = "stateful"
_LIVE = "live"


#: array type -> (its backend's describe_argument, the backend), for the array types a key has met: a
#: fact of the type alone (as backend_for_type is), taken once per process, not once per LazyGraph
_DESCRIBERS: dict[type, tuple] = {}
_DESCRIBERS_MAX = 1024


class Unkeyable(TypeError):
    """An argument the signature cannot describe: the call runs eagerly."""


def _value_key(obj):
    if type(obj) is complex and _signed_parts(obj):
        return (complex, repr(obj))          # complex(-0.0, 0.0) == 0j, yet x * it differs; nan parts
    if type(obj) is float and (obj != obj or obj == 0.0):
        if obj != obj:                      # nan != nan would miss the cache forever
            return (float, "nan")
        return (float, obj, math.copysign(1.0, obj))   # 0.0 == -0.0, but 1/x tells them apart
    return (type(obj), obj)


def _signed_parts(c: complex) -> bool:
    """Whether equality cannot check a complex number: a zero (signed) or NaN part."""
    return any(part == 0.0 or part != part for part in (c.real, c.imag))


class Signature:
    """Builds cache keys and input leaves for one function's calls."""

    def __init__(self, static_argnums=(), static_argnames=(), stateful_argnums=(), stateful_argnames=(), to=None):
        self.static_argnums = frozenset(static_argnums)
        self.static_argnames = frozenset(static_argnames)
        self.stateful_argnums = frozenset(stateful_argnums)
        self.stateful_argnames = frozenset(stateful_argnames)
        self._special = bool(self.static_argnums or self.static_argnames
                             or self.stateful_argnums or self.stateful_argnames)
        self._describers = _DESCRIBERS     # array type -> (describe, backend), shared by all signatures
        self._object_kinds: dict[type, str | None] = {}   # "static" / "live" / None, per type
        # the framework of to=: a call without arrays is traced in it, under its global state
        self.to = to
        self._target = get_backend(to) if to is not None else None

    # ---- hot path ----------------------------------------------------------
    def key(self, args: tuple, kwargs: dict) -> tuple[tuple, list, list]:
        """(key, array leaves, backends seen) for a call."""
        try:
            leaves: list = []
            backends: list = []
            if self._special:
                parts = tuple([self._top(i, a, leaves, backends, self.static_argnums, self.stateful_argnums)
                               for i, a in enumerate(args)])
            else:
                known = self._describers
                parts = []
                for a in args:                      # inlined _leaf for the common case: arrays, scalars
                    entry = known.get(type(a))
                    if entry is not None:
                        leaves.append(a)
                        parts.append(entry[0](a))
                        if entry[1] not in backends:
                            backends.append(entry[1])
                    else:
                        parts.append(self._leaf(a, leaves, backends))
                parts = tuple(parts)
            if kwargs:
                if self._special:
                    kparts = tuple([(k, self._top(k, v, leaves, backends, self.static_argnames,
                                                  self.stateful_argnames)) for k, v in kwargs.items()])
                else:
                    kparts = tuple([(k, self._leaf(v, leaves, backends)) for k, v in kwargs.items()])
                parts = (parts, kparts)
            if len(leaves) > 1 and len({id(x) for x in leaves}) != len(leaves):
                parts = (parts, _ALIASED, alias_pattern(leaves))
            if backends:
                if len(backends) == 1:
                    return (parts, backends[0].global_state()), leaves, backends
                return (parts, tuple([b.global_state() for b in backends])), leaves, backends
            if self._target is not None:       # (`jnp.arange(n)` is of another dtype under x64)
                return (parts, self._target.global_state()), leaves, backends
            return parts, leaves, backends
        except (RuntimeError, NotImplementedError) as exc:     # a sparse CSR tensor has no strides ...
            raise Unkeyable(f"an argument cannot be described for the cache key ({exc})") from None

    @staticmethod
    def key_state(key, backends):
        """The global state `key` holds (made by `key` for a call of one backend's arrays, without
        an extra part): what a trace of the call and its description would read again, else None."""
        return key[1] if len(backends) == 1 else None

    def _top(self, where, obj, leaves, backends, static, stateful):
        if where in static:
            try:
                hash(obj)
            except TypeError:
                raise TypeError(f"static argument {where!r} must be hashable, got "
                                f"{type(obj).__name__}: it is part of the cache key by value") from None
            return (_STATIC, _static_value(obj))
        if where in stateful:
            leaves.append(obj)
            return (_STATEFUL, type(obj))
        return self._leaf(obj, leaves, backends)

    def _leaf(self, obj, leaves, backends):
        tp = type(obj)
        entry = self._describers.get(tp)
        if entry is not None:
            leaves.append(obj)
            if entry[1] not in backends:
                backends.append(entry[1])
            return entry[0](obj)
        if tp in _VALUE_TYPES:
            return _value_key(obj)
        if tp is tuple or tp is list:
            return (tp, tuple([self._leaf(x, leaves, backends) for x in obj]))
        if tp is dict:
            return (dict, tuple([(k, self._leaf(v, leaves, backends)) for k, v in obj.items()]))
        return self._slow_leaf(obj, leaves, backends)

    # ---- first sight of a type ---------------------------------------------
    def _slow_leaf(self, obj, leaves, backends):
        tp = type(obj)
        backend = backend_for_type(tp)
        if backend is not None:
            if isinstance(obj, backend.array_types):
                reason = backend.unkeyable_reason(tp)
                if reason is not None:
                    raise Unkeyable(reason)
                if len(_DESCRIBERS) >= _DESCRIBERS_MAX:
                    _DESCRIBERS.clear()
                _DESCRIBERS[tp] = (backend.describe_argument, backend)
                return self._leaf(obj, leaves, backends)
        if isinstance(obj, enum.Enum):
            return (tp, obj)
        if isinstance(obj, tuple) and hasattr(tp, "_fields"):     # namedtuple
            return (tp, tuple([self._leaf(x, leaves, backends) for x in obj]))
        if isinstance(obj, (tuple, list)):
            return (tp, tuple([self._leaf(x, leaves, backends) for x in obj]))
        if isinstance(obj, dict):
            return (tp, tuple([(k, self._leaf(v, leaves, backends)) for k, v in obj.items()]))
        if isinstance(obj, slice):
            return (slice, self._leaf((obj.start, obj.stop, obj.step), leaves, backends))
        kind = self._object_kinds.get(tp, "")
        if kind == "":
            kind = self._object_kinds[tp] = _object_kind(obj)
        if kind == "static":
            return _static_key(obj)
        if kind == "live":
            leaves.append(obj)
            return (_LIVE, tp)
        if tp in (int, float) or isinstance(obj, (int, float, str)) and not isinstance(obj, bool):
            return _static_key(obj)   # subclasses of int/float/str
        raise Unkeyable(f"argument of type {tp.__module__}.{tp.__qualname__} cannot be part of "
                        f"a cache key (pass it in static_argnums/static_argnames if it is "
                        f"hashable and immutable)")


def _static_value(obj):
    """A static argument keyed by value with the types and signs equality ignores inside it:
    (1,) == (True,) and 0.0 == -0.0, yet a function may tell them apart."""
    tp = type(obj)
    if tp is tuple or tp is frozenset or isinstance(obj, tuple) and hasattr(tp, "_fields"):
        items = [_static_value(x) for x in obj]
        return (tp, frozenset(items) if tp is frozenset else tuple(items))
    if tp is float or tp is complex:
        return _value_key(obj)
    if tp not in _VALUE_TYPES and isinstance(obj, numbers.Number):
        return _static_key(obj)     # a NumPy scalar: np.float32(-0.0) == np.float32(0.0), a NaN unequal to itself
    return (tp, obj)


_ALIASED = "the same object passed as several arguments"


def alias_pattern(leaves: list) -> tuple:
    """For each leaf, the index of the first leaf that is the same object: a graph traced with
    `f(x, x)` knows one array where `f(x, y)` has two (a write to x is seen through y)."""
    first: dict = {}
    return tuple([first.setdefault(id(x), i) for i, x in enumerate(leaves)])


def _static_key(obj):
    """An object keyed by value (a NumPy scalar, a dtype): its text tells apart what equality
    does not (`np.float32(-0.0) == np.float32(0.0)`, yet `1 / x` differs), and a NaN, unequal to
    itself, is keyed by its text alone."""
    try:
        same = bool(obj == obj)
    except Exception:           # noqa: BLE001 - an object whose == is not a plain comparison
        same = False
    return (type(obj), obj, repr(obj)) if same else (type(obj), repr(obj))


def _object_kind(obj) -> str | None:
    """"static" for framework objects keyed by value (dtype, device), "live" for objects the
    graph takes as inputs (RNG generators), else None."""
    for b in _loaded_backends():
        if isinstance(obj, b.static_types):
            return "static"
        if isinstance(obj, b.live_types):
            return "live"
    return None


def _loaded_backends():
    from ..backends import available, get_backend
    return [get_backend(n) for n in available()]


# ---- cold path: traversal with paths, in the same leaf order as Signature.key ----

def walk(args: tuple, kwargs: dict, signature: Signature, visit: Callable[[str, Any, str], Any],
         reuse: bool = False):
    """Rebuild (args, kwargs) with every leaf that `Signature.key` would collect
    replaced by `visit(path, leaf, kind)`, kind being "array", "live" or
    "stateful"; other values are kept. `reuse`: a list, tuple or dict whose items all come back
    as themselves is passed on as itself, not rebuilt."""
    known = signature._describers       # (a call of arrays alone, most calls: no walk below)
    if not signature._special and None not in map(known.get, map(type, args)) and \
            (not kwargs or None not in map(known.get, map(type, kwargs.values()))):
        return (tuple([visit(f"args[{i}]", a, "array") for i, a in enumerate(args)]),
                {k: visit(f"kwargs[{k!r}]", v, "array") for k, v in kwargs.items()})

    def same(obj, items):
        return len(items) == len(obj) and all(a is b for a, b in zip(items, obj))

    def rec(obj, path, top=None):
        if top is not None:
            where, static, stateful = top
            if where in static:
                return obj
            if where in stateful:
                return visit(path, obj, "stateful")
        tp = type(obj)
        if tp in _VALUE_TYPES or isinstance(obj, enum.Enum):
            return obj
        backend = backend_for_type(tp)
        if backend is not None and isinstance(obj, backend.array_types):
            return visit(path, obj, "array")
        if isinstance(obj, (tuple, list)):
            items = [rec(x, f"{path}[{i}]") for i, x in enumerate(obj)]
            if reuse and same(obj, items):
                return obj
            return tp(*items) if isinstance(obj, tuple) and hasattr(tp, "_fields") else tp(items)
        if isinstance(obj, dict):
            items = [rec(v, f"{path}[{k!r}]") for k, v in obj.items()]
            if reuse and same(list(obj.values()), items):
                return obj
            return tp(zip(obj, items))
        if isinstance(obj, slice):
            return slice(*rec((obj.start, obj.stop, obj.step), path))
        for b in _loaded_backends():
            if isinstance(obj, b.live_types):
                return visit(path, obj, "live")
        return obj

    new_args = tuple(rec(a, f"args[{i}]", (i, signature.static_argnums, signature.stateful_argnums))
                     for i, a in enumerate(args))
    new_kwargs = {k: rec(v, f"kwargs[{k!r}]", (k, signature.static_argnames, signature.stateful_argnames))
                  for k, v in kwargs.items()}
    del rec     # (a recursive closure is a reference cycle, holding `visit` until a collection)
    return new_args, new_kwargs


def container_snapshot(args: tuple, kwargs: dict) -> list:
    """(container, its items) for every list and dict inside positional `args` and the values of
    keyword `kwargs`: what a function could change in its arguments that a graph cannot replay
    (see `containers_changed`)."""
    values = kwargs.values()
    if not any(map(isinstance, args, _ARE_CONTAINERS)) and not any(map(isinstance, values, _ARE_CONTAINERS)):
        return []       # (no container among the arguments, most calls: seen in C)
    out: list = []
    stack = [*args, *values]
    for obj in stack:       # (the stack grows while it is walked: a loop, not a call per container)
        if isinstance(obj, dict):
            out.append((obj, _items(obj)))
            obj = obj.values()
        elif isinstance(obj, list):
            out.append((obj, _items(obj)))
        elif not isinstance(obj, tuple):
            continue
        stack.extend(compress(obj, map(isinstance, obj, _ARE_CONTAINERS)))     # (in C: most items are
    return out                                                                 # arrays and scalars)


_CONTAINERS = (list, tuple, dict)
_ARE_CONTAINERS = repeat(_CONTAINERS)


def containers_changed(snapshot: list) -> bool:
    for container, items in snapshot:
        now = _items(container)
        if len(now) != len(items) or any(a is not b for a, b in zip(now, items)):
            return True
    return False


def _items(container) -> list:
    return [*container.keys(), *container.values()] if isinstance(container, dict) else list(container)


def describe_paths(args: tuple, kwargs: dict, signature: Signature) -> dict[str, str]:
    """{argument path: description} for explaining why a call traced again."""
    out: dict[str, str] = {}
    first: dict = {}            # id(leaf) -> the path it was first seen at (alias_pattern is keyed)

    def visit(path, leaf, kind):
        backend = backend_for_type(type(leaf))
        out[path] = backend.meta(leaf) if kind == "array" else type(leaf).__name__
        if first.setdefault(id(leaf), path) != path:
            out[path] += f" (the same object as {first[id(leaf)]})"
        return leaf

    def scalars(obj, path):
        if type(obj) in _VALUE_TYPES or isinstance(obj, enum.Enum):
            out[path] = "nan" if isinstance(obj, float) and math.isnan(obj) else repr(obj)
        elif isinstance(obj, (tuple, list)):
            for i, x in enumerate(obj):
                scalars(x, f"{path}[{i}]")
        elif isinstance(obj, dict):
            for k, v in obj.items():
                scalars(v, f"{path}[{k!r}]")
    walk(args, kwargs, signature, visit)
    for i, a in enumerate(args):
        scalars(a, f"args[{i}]")
    for k, v in kwargs.items():
        scalars(v, f"kwargs[{k!r}]")
    del scalars     # (a recursive closure: a reference cycle else)
    return out

"""Compiled signature checks: the fast path of a LazyGraph call.

For each graph, generate a function `check_and_call(args, kwargs)` that tests,
in straight-line Python, that a call has exactly the signature the graph was
traced for (structure, exact types, array metadata, Python values, global
state) and then calls the graph with the array leaves pulled straight out of
the arguments. It returns MISS when anything differs; the caller then takes
the general path (Signature.key + dict lookup), which is the reference.

The checks are at least as strict as key equality: every leaf is compared
with its exact type, so a call accepted here has the key the graph was
stored under (tests/test_guards.py checks this property).
"""
from __future__ import annotations

import enum
import functools
import itertools
import linecache
import math
import numbers
from types import CodeType, FunctionType

from .signature import _VALUE_TYPES, _signed_parts, _static_value, alias_pattern

MISS = object()
_counter = itertools.count()


class _CannotCompile(Exception):
    pass


class _Builder:
    def __init__(self, signature):
        self.signature = signature
        self.conditions: list[str] = []
        self.leaves: list[str] = []
        self.leaf_objects: list = []      # the objects of this call the leaf expressions name
        self.namespace: dict = {"MISS": MISS}
        self.arrays: list = []            # (expression, example, backend) of array leaves

    def const(self, obj) -> str:
        name = f"_k{len(self.namespace)}"     # (a graph names its constants k<n>: inlined, both are seen)
        self.namespace[name] = obj
        return name

    def top(self, where, expr, obj, static, stateful):
        if where in static:
            if isinstance(obj, (numbers.Number, tuple, frozenset)):   # equality ignores signs, 1 vs True
                self.conditions.append(f"{self.const(_static_value)}({expr}) == {self.const(_static_value(obj))}")
            else:
                self.conditions.append(f"type({expr}) is {self.const(type(obj))} and {expr} == {self.const(obj)}")
        elif where in stateful:
            self.conditions.append(f"type({expr}) is {self.const(type(obj))}")
            self.leaves.append(expr)
            self.leaf_objects.append(obj)
        else:
            self.leaf(expr, obj)

    def leaf(self, expr, obj):
        tp = type(obj)
        entry = self.signature._describers.get(tp)
        if entry is not None:                # its type is checked with its metadata (compile_dispatch)
            self.arrays.append((expr, obj, entry[1]))
            self.leaves.append(expr)
            self.leaf_objects.append(obj)
            return
        t = self.const(tp)
        if tp in _VALUE_TYPES:
            if tp is float and math.isnan(obj):
                self.conditions.append(f"type({expr}) is {t} and {expr} != {expr}")
            elif tp is complex and _signed_parts(obj):
                raise _CannotCompile(tp)        # a signed zero or NaN part: the general path keys its text
            elif tp is float and obj == 0.0:
                sign = self.const(math.copysign)
                self.conditions.append(f"type({expr}) is {t} and {expr} == 0.0 and "
                                       f"{sign}(1.0, {expr}) == {math.copysign(1.0, obj)}")
            else:
                self.conditions.append(f"type({expr}) is {t} and {expr} == {self.const(obj)}")
        elif isinstance(obj, enum.Enum):
            self.conditions.append(f"{expr} is {self.const(obj)}")
        elif isinstance(obj, (tuple, list)):
            self.conditions.append(f"type({expr}) is {t} and len({expr}) == {len(obj)}")
            for i, x in enumerate(obj):
                self.leaf(f"{expr}[{i}]", x)
        elif isinstance(obj, dict):
            self.conditions.append(f"type({expr}) is {t} and tuple({expr}) == {self.const(tuple(obj))}")
            for k, v in obj.items():
                self.leaf(f"{expr}[{self.const(k)}]", v)
        else:
            raise _CannotCompile(tp)     # slices, static types, live objects: general path only


def compile_dispatch(graph, args: tuple, kwargs: dict, signature, backends: list, extra_key=None, *,
                     conditions=()):
    """A fast `check_and_call(args, kwargs)` for `graph`, or None if this signature has none.
    A graph with extra live inputs (a module's parameters: `graph._extra()` gives their key and
    arrays) checks that their key is still `extra_key`, the one its signature was cached under.
    `conditions`: the caller's own, tested first, each a format string and the objects its `{}`
    stand for (LazyGraph: no trace is running, the function's code is the traced one)."""
    if graph._extra is not None and extra_key is None or len(backends) != 1:
        return None
    b = _Builder(signature)
    names = [f"p{i}" for i in range(len(args))]
    try:
        for i, a in enumerate(args):
            b.top(i, names[i], a, signature.static_argnums, signature.stateful_argnums)
        for k, v in kwargs.items():
            b.top(k, f"kwargs[{k!r}]", v, signature.static_argnames, signature.stateful_argnames)
    except _CannotCompile:
        return None
    b.conditions[:0] = [text.format(*map(b.const, objects)) for text, *objects in conditions]
    backend = backends[0]
    pattern = alias_pattern(b.leaf_objects)
    # each array once (the native check fails on an array given twice): the alias test below relates the others
    distinct = [(expr, obj, array_backend) for expr, obj, array_backend in b.arrays
                if pattern[b.leaves.index(expr)] == b.leaves.index(expr)]
    native = backend.array_check([obj for _, obj, _ in distinct]) if distinct else None
    if native is not None:          # it compares each array's exact type first: nothing else to test before it
        b.conditions.append(f"{b.const(native)}({', '.join(expr for expr, _, _ in distinct)})")
        for expr, obj, array_backend in distinct:
            b.conditions.extend(array_backend.array_check_extra(expr, obj, b.const))
            b.conditions.extend(array_backend.attribute_conditions(expr, obj, b.const))
        covered = backend.state_covered([obj for _, obj, _ in distinct], graph._plan)
    else:
        for expr, obj, array_backend in distinct:
            b.conditions.append(f"type({expr}) is {b.const(type(obj))}")
            b.conditions.extend(array_backend.guard_conditions(expr, obj, b.const))
            b.conditions.extend(array_backend.attribute_conditions(expr, obj, b.const))
        covered = frozenset()
    b.conditions.extend(backend.state_conditions(graph._state, b.const, covered))
    # which leaves are the same object is part of the key (signature.alias_pattern); a native check
    # that fails on an array given twice has told it already when every leaf is an array it checked
    told = native is not None and len(distinct) == len(b.leaves) and backend.array_check_distinct()
    if len(b.leaves) > 1 and not told:
        b.conditions.append(f"{b.const(alias_pattern)}([{', '.join(b.leaves)}]) == {b.const(pattern)}"
                            if len(b.leaves) > 4 else
                            " and ".join(f"{b.leaves[i]} {'is' if pattern[j] == pattern[i] else 'is not'} "
                                         f"{b.leaves[j]}" for j in range(len(b.leaves)) for i in range(j)))
    body = _inlined(graph, b.leaves, b.namespace) if graph._extra is None else None
    if body is not None:            # one frame: the graph's lines follow the checks, over its namespace
        b.namespace = {**graph.fn.__globals__, **b.namespace}
    b.namespace["graph_fn"] = graph.fn
    call = f"graph_fn({', '.join(b.leaves)})"
    extra = ""
    if graph._extra is not None:
        extra = (f"    extra_key, extra_leaves = {b.const(graph._extra)}()\n"
                 f"    if extra_key != {b.const(extra_key)}:\n"
                 f"        return MISS\n")
        call = f"graph_fn({''.join(leaf + ', ' for leaf in b.leaves)}*extra_leaves)"
    shape = f"len(kwargs) != {len(kwargs)} or tuple(kwargs) != {b.const(tuple(kwargs))}" if kwargs else "kwargs"
    if names:       # a wrong count of arguments fails the unpacking (cheaper than a len() call on every hit)
        unpack = (f"    try:\n"
                  f"        {', '.join(names)}{',' if len(names) == 1 else ''} = args\n"
                  f"    except ValueError:\n"
                  f"        return MISS\n")
    else:
        shape, unpack = f"args or {shape}", ""
    test = " and ".join(b.conditions) or "True"
    source = (f"def check_and_call(args, kwargs):\n"
              f"    if {shape}:\n"
              f"        return MISS\n"
              f"{unpack}"
              f"    if not ({test}):\n"
              f"        return MISS\n"
              f"{extra}"
              + (body if body is not None else f"    return {call}\n"))
    exec(_compiled(source), b.namespace)
    fn = b.namespace.pop("check_and_call")      # (not in its own globals: no reference cycle)
    fn.source = source
    return fn


#: source -> code of the checks compiled so far (the checks of one function's LazyGraphs, a module
#: made per call, often have one source), each in linecache once (tracebacks through a graph inlined there)
_COMPILED: dict = {}


def _compiled(source: str) -> CodeType:
    code = _COMPILED.get(source)
    if code is None:
        filename = f"<lazytrace guards #{next(_counter)}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        code = compile(source, filename, "exec")
        if len(_COMPILED) >= 256:
            _COMPILED.clear()
        _COMPILED[source] = code
    return code


#: the names the check's own code binds (its constants are _k<n>)
_CHECK_LOCALS = ("args", "kwargs", "extra_key", "extra_leaves")


def _inlined(graph, leaves: list[str], namespace: dict) -> str | None:
    """The graph's generated function as lines of the check (its parameters bound to the leaf
    expressions, then its body), or None: a graph whose function is not the plain code of its
    `source` (a compiled graph), or whose names would clash with the check's."""
    fn = graph.fn
    if type(fn) is not FunctionType:
        return None
    code = fn.__code__
    if fn.__defaults__ or code.co_argcount != len(leaves) or _body(graph.source, code) is None:
        return None
    own = set(namespace) | {"graph_fn"}
    if own & set(fn.__globals__) or own & set(code.co_varnames) or \
            set(code.co_varnames) & {*_CHECK_LOCALS, *(leaf for leaf in leaves if leaf.isidentifier())}:
        return None
    params = code.co_varnames[:code.co_argcount]
    bind = f"    {', '.join(params)} = {', '.join(leaves)}\n" if params else ""
    return bind + _body(graph.source, code)


@functools.lru_cache(maxsize=256)
def _body(source: str, code: CodeType) -> str | None:
    """The body lines of the function `code` if `source` is its plain source (compiled, it gives
    that code), else None."""
    if code.co_flags & 0x0C or code.co_kwonlyargcount:       # (0x0C: *args, **kwargs)
        return None
    lines = source.splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith(f"def {code.co_name}(")), None)
    if at is None or not all(line.startswith("    ") for line in lines[at + 1:]):
        return None
    compiled = next((c for c in compile(source, "<inlined>", "exec").co_consts
                     if isinstance(c, CodeType) and c.co_name == code.co_name), None)
    if compiled is None or (compiled.co_code, compiled.co_consts, compiled.co_names, compiled.co_varnames) != \
            (code.co_code, code.co_consts, code.co_names, code.co_varnames):
        return None             # the source is not what the function runs
    return "".join(line + "\n" for line in lines[at + 1:])

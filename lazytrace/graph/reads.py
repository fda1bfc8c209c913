"""Python values a traced function reaches by itself: module globals and closure variables.

A graph bakes the Python values its calls were given. Arguments are keyed (signature.py), but
`scale` in `def f(x): return x * scale`, a `CONFIG = {...}` dict, a global tensor that may be
rebound or a closure variable reach the calls without passing through the arguments. While a
trace runs, a `sys.settrace` hook sees each Python function entered (call events only: it turns
line tracing off for every frame) and notes the globals its code loads or stores
(LOAD_GLOBAL / STORE_GLOBAL / DELETE_GLOBAL, read once per code object with `dis`). Those holding
data become guards at the start of the graph:

- numbers, strings, enums, framework dtypes and devices: by type and value;
- tuples, lists, dicts of them: item by item, compared with a copy;
- arrays, and any other object (a model, a sampler): by identity (an array is read live, so
  writes into it are seen; rebinding the name is seen here);
- plain objects holding only data (a config object, `argparse.Namespace`, a dataclass): by
  identity, and their attributes by value.

A failed check traces the signature again, as a failed guard does. A value the function itself
changes during the trace (a counter, a cache it fills) makes the signature run eagerly: the
graph could not replay the change. The traced function's own closure cells are guarded the same
way. Not watched (the README lists them): globals holding functions, classes or modules
(rebinding a function after the trace is not seen), code of the standard library, lazytrace, the
frameworks and the tools listed in UNWATCHED, and closure cells of inner functions.
"""
from __future__ import annotations

import argparse
import dataclasses
import dis
import functools
import gc
import sys
import types
from contextlib import contextmanager

MISSING = object()      # what a guard reads for a global that no longer exists

_CODE_TYPES = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
               types.MethodDescriptorType, types.WrapperDescriptorType, types.MethodWrapperType,
               types.ClassMethodDescriptorType, types.GetSetDescriptorType, functools.partial,
               staticmethod, classmethod, property)
_NAMESPACES = (types.SimpleNamespace, argparse.Namespace)
_GLOBAL_OPS = frozenset({"LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL"})
#: packages whose code's globals are never guarded: the standard library (logging, typing ...),
#: lazytrace, the frameworks and what they run internally (their own state is theirs: a
#: framework call is recorded as a whole), and tools running around user code (printing,
#: progress bars, test runners, debuggers)
UNWATCHED = frozenset(sys.stdlib_module_names) | {
    "lazytrace", "torch", "numpy", "jax", "jaxlib", "tensorflow", "keras", "tf_keras", "ml_dtypes",
    "scipy", "sympy", "opt_einsum", "google", "absl", "typing_extensions", "packaging", "wrapt",
    "_pytest", "pytest", "pluggy", "hypothesis", "IPython", "ipykernel", "tqdm", "rich", "coverage",
    "debugpy", "_pydevd_bundle", "pydevd"}


class _AnyType:
    """Equal to any type: the type part of an identity check."""
    __slots__ = ()
    __hash__ = None

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __repr__(self):
        return "<any type>"


_ANY = _AnyType()


def read_global(namespace: dict, name: str):
    """What a guard compares for a module global: its type and value."""
    value = namespace.get(name, MISSING)
    return type(value), value


def read_cell(cell):
    """What a guard compares for a closure variable: its type and value."""
    try:
        value = cell.cell_contents
    except ValueError:          # the variable was deleted
        value = MISSING
    return type(value), value


def read_attributes(obj) -> dict:
    """The attributes of a plain object holding data, as a guard compares them."""
    return _attributes(obj)


READERS = (read_global, read_cell, read_attributes)

# how views name each check, and how an explanation of a retrace says what failed
read_global.label = lambda node: f"global {node.args[1]}"
read_global.describe = lambda node: f"the global {node.args[1]!r} changed"
read_cell.label = lambda node: "closure variable"
read_cell.describe = lambda node: "a variable of the function's closure changed"
read_attributes.label = lambda node: "attributes"
read_attributes.describe = lambda node: "an attribute of an object the function reads by itself changed"


@functools.lru_cache(maxsize=8192)
def global_names(code) -> tuple[str, ...]:
    """Names a code object loads, stores or deletes as globals."""
    return tuple({ins.argval for ins in dis.get_instructions(code) if ins.opname in _GLOBAL_OPS})


def _attributes(obj):
    if dataclasses.is_dataclass(obj) and not hasattr(obj, "__dict__"):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    return dict(vars(obj))


class PythonReads:
    """The globals and closure variables one trace reads, with what each guard expects.

    `snapshot(value)` gives the value a guard compares with (a copy for containers, an identity
    marker for arrays and objects) or `nothing` when the value holds something it cannot check.
    """

    def __init__(self, snapshot, nothing, same, known):
        self._snapshot = snapshot
        self._known = known
        self._nothing = nothing
        self._same = same
        self._codes: set = set()
        self.globals: dict = {}     # (id(namespace), name) -> (namespace, name, value, expected)
        self.cells: list = []       # (cell, name, value, expected)
        self.objects: dict = {}     # id(obj) -> (obj, expected attributes)

    # ---- while the trace runs ------------------------------------------------------
    @contextmanager
    def watching(self, fn):
        """Note what `fn`'s closure holds now and what each function entered reads."""
        code = getattr(fn, "__code__", None)
        for name, cell in zip(code.co_freevars if code else (), getattr(fn, "__closure__", None) or ()):
            value = read_cell(cell)[1]
            expected = self._expect(value)
            if expected is not self._nothing:
                self.cells.append((cell, name, value, expected))
        previous = sys.gettrace()
        self._codes.update(getattr(cb, "__code__", None) for cb in gc.callbacks)   # run by the collector

        def hook(frame, event, arg):
            if event == "call" and frame.f_code not in self._codes:
                self._enter(frame)
            return previous(frame, event, arg) if previous is not None else None

        sys.settrace(hook)
        try:
            yield self
        finally:
            sys.settrace(previous)

    def _enter(self, frame):
        code = frame.f_code
        self._codes.add(code)
        namespace = frame.f_globals
        if (str(namespace.get("__name__", "")).partition(".")[0] in UNWATCHED
                or code.co_filename.startswith("<lazytrace")):     # a graph inlined into this trace
            return
        for name in global_names(code):
            key = (id(namespace), name)
            if key in self.globals:
                continue
            value = namespace.get(name, MISSING)
            if value is MISSING:
                continue        # a builtin, or a name the function stores later
            expected = self._expect(value)
            if expected is not self._nothing:
                self.globals[key] = (namespace, name, value, expected)

    def _expect(self, value):
        """(type, snapshot) a guard compares, or `nothing` for code (functions, classes, modules)."""
        if isinstance(value, _CODE_TYPES):
            return self._nothing
        expected = self._snapshot(value)
        if expected is self._nothing or isinstance(expected, self._same):
            self._note_object(value)
            return _ANY, self._same(value)     # identity (a stateful object's class is swapped meanwhile)
        return type(value), expected

    def _note_object(self, obj):
        """A plain object holding only data (a config object): its attributes are guarded too.
        Not objects of the standard library (a threading.Event ...) besides namespaces, nor
        objects the trace records itself (stateful ones)."""
        tp = type(obj)
        if (id(obj) in self.objects or self._known(obj) or callable(obj)
                or not (hasattr(obj, "__dict__") or dataclasses.is_dataclass(obj))
                or tp.__module__.partition(".")[0] in UNWATCHED and tp not in _NAMESPACES):
            return
        try:
            attributes = _attributes(obj)
        except TypeError:
            return
        if any(isinstance(v, _CODE_TYPES) for v in attributes.values()):
            return              # it holds code (a helper object, a model): its identity is checked
        snapshot = self._snapshot(attributes)
        if snapshot is not self._nothing:
            self.objects[id(obj)] = (obj, snapshot)

    # ---- after the trace ---------------------------------------------------------------
    def changed(self) -> str | None:
        """What the function itself changed among the values read, if anything."""
        for namespace, name, value, expected in self.globals.values():
            if expected != read_global(namespace, name):
                return f"global {name!r} of {namespace.get('__name__', '?')}"
        for cell, name, value, expected in self.cells:
            if expected != read_cell(cell):
                return f"closure variable {name!r}"
        for obj, expected in self.objects.values():
            if not self._known(obj) and expected != read_attributes(obj):
                return f"an attribute of {type(obj).__name__} object"
        return None

    def guards(self):
        """(reader, arguments, expected, what the object read is) for each guard, objects'
        attributes after their identity."""
        for namespace, name, value, expected in self.globals.values():
            yield read_global, (namespace, name), expected, f"globals of {namespace.get('__name__', '?')}"
        for cell, name, value, expected in self.cells:
            yield read_cell, (cell,), expected, f"closure variable {name}"
        for obj, expected in self.objects.values():
            if not self._known(obj):        # recorded by the trace itself meanwhile
                yield read_attributes, (obj,), expected, f"{type(obj).__name__} object"

"""Python values a traced function reaches by itself: module globals and closure variables.

A graph bakes the Python values its calls were given. Arguments are keyed (signature.py), but
`scale` in `def f(x): return x * scale`, a `CONFIG = {...}` dict, a global tensor that may be
rebound or a closure variable reach the calls without passing through the arguments.
`PythonReads` notes the globals a function's code loads or stores (LOAD_GLOBAL / STORE_GLOBAL /
DELETE_GLOBAL, and `config.SCALE` read through a module, found once per code object in its bytecode): before the function runs, for its own code,
its closure and the Python functions its globals hold (_CALLS deep); and at each framework
call, for every function on the stack between the traced one and the call (methods, code reached
through attributes) and the functions its globals hold in turn. A `sys.settrace` hook would see
every function run, but it slows every line of Python while it is set (a trace took twice as
long), so it is not used; one that only sees calls (returning None for each new frame) still
costs 1.8-2.2x per kornia trace on Python 3.11, which turns off its specialized instructions while
any hook is set (measured in session 18). Those holding
data become guards at the start of the graph:

- numbers, strings, enums, framework dtypes and devices: by type and value;
- tuples, lists, dicts of them: item by item, compared with a copy;
- arrays, and any other object (a model, a sampler): by identity (an array is read live, so
  writes into it are seen; rebinding the name is seen here); a model (an `nn.Module`) and its
  submodules also have their attributes recorded, as `stateful=[...]` objects do (`.eval()`);
- other objects with attributes (a config object, `argparse.Namespace`, a dataclass, a callable
  transform): by identity, and their attributes (data by value, objects by identity), and so on
  for the objects they hold, in attributes, dicts and lists, at any depth (_note_object); their
  classes' data attributes, and what their methods read of module globals (_methods);
- a `contextvars.ContextVar` (held by a global, a closure variable, an object's attribute): its
  value in the calling context (read_context; `.get()` is a C call no trace sees);
- framework state the code reads in Python, which no framework call shows
  (`torch.backends.mkldnn.enabled`, `torch.are_deterministic_algorithms_enabled()`: the backend's
  `state_reads`): by value, read again by `read_state`; also where a method of an object the code
  reached reads it (`CONFIG.use_mkldnn()`, which makes no framework call).

A failed check traces the signature again, as a failed guard does. A value the function itself
changes during the trace (a counter, a cache it fills) is traced once more and then makes the
signature run eagerly: the graph could not replay the change. The traced function's own closure cells are guarded the same
way. `mod.NAME` of a module global (an imported config module) and `Cls.NAME` of a class
global (each class of its MRO down to the one defining it) are guarded like globals. Not watched
(docs/limits.md lists them): globals holding functions, classes or modules themselves (rebinding
a function after the trace is not seen, unless it holds a framework function the graph calls:
homes.function_homes; stored graphs name them, persist/identity.py), code of the standard library, lazytrace, the
frameworks and the tools listed in UNWATCHED, closure cells of functions seen only on the stack,
and Python code that makes no framework call and is reached otherwise than by name or as a
method of an object the walk reached (a function held in a list; the functions such a method's
globals hold); a value such code changes before the first framework call
below it is seen at its new value. A read of the process environment (`os.environ`,
`os.getenv`) in the traced code makes the graph compare the whole environment at each call
(read_environment), and such graphs are not stored on disk (another process has other variables).

The walk before the function runs is remembered per function object (_WALKS, held weakly) and
taken again at the function's next trace (a new signature) only where every read it made gives
the same object now: the globals, module and class attributes it looked up (absent ones too),
the function attributes (__code__, __wrapped__) and closure cells, what it decided each value
was, the modules of sys.modules it imported from, the framework's state readers and the process
facts (_Checks). What it found of data (data globals, closure variables, framework state,
objects' attributes, defaults) is read again, in the walk's order: the guards are those a walk
gives (tests/test_walk_memo.py). A global a leaf noted first (a class attribute of an object's
class) is a leaf itself: looked at again when the walk is taken.
"""
from __future__ import annotations

import argparse
import collections
import contextvars
import dataclasses
import dis
import enum
import functools
import importlib.util
import inspect
import io
import itertools
import math
import opcode
import operator
import os
import re
import sys
import threading
import types
import warnings
import weakref

MISSING = object()      # what a guard reads for a global that no longer exists
_CO_NAMES = operator.attrgetter("co_names")
_STORED = "<stored>"    # ends an import read that sets the attribute (`import cfg; cfg.LAST = x`)

_CODE_TYPES = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
               types.MethodDescriptorType, types.WrapperDescriptorType, types.MethodWrapperType,
               types.ClassMethodDescriptorType, types.GetSetDescriptorType, functools.partial,
               staticmethod, classmethod, property)
_NAMESPACES = (types.SimpleNamespace, argparse.Namespace, threading.local)
#: what reads the process environment or a fact of the process and machine, per module (None: all of it):
#: `os.environ[...]`, `os.getenv(...)`, `len(os.sched_getaffinity(0))`, `platform.machine()`,
#: `from multiprocessing import cpu_count` (another process or machine may see other values)
_PROCESS_FACTS = {"os": frozenset({"environ", "environb", "getenv", "getenvb", "cpu_count", "process_cpu_count",
                                   "sched_getaffinity", "uname", "getloadavg", "getpid", "getppid"}),
                  "platform": None, "multiprocessing": frozenset({"cpu_count"}),
                  "socket": frozenset({"gethostname"})}
_ENVIRONMENT_NAMES = frozenset({"environ", "environb", "getenv", "getenvb"})

_CALLS = 24       # how many calls deep the walk follows functions held by globals, from the traced
                  # function and from each function on the stack (the chain of helpers a library
                  # function calls is typically 1 to 5 long; each code object is read once). 24:
                  # the walk recurses ~5 Python frames per call followed
_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE
_LOAD_GLOBAL, _STORE_GLOBAL, _DELETE_GLOBAL, _EXTENDED_ARG, _LOAD_ATTR = (
    dis.opmap[name] for name in ("LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL", "EXTENDED_ARG", "LOAD_ATTR"))
_IMPORT_NAME, _STORE_ATTR = dis.opmap["IMPORT_NAME"], dis.opmap["STORE_ATTR"]
_CACHE = dis.opmap.get("CACHE", -1)                               # 3.11+: inline cache entries
_LOAD_METHOD = dis.opmap.get("LOAD_METHOD", -1)                   # 3.11; folded into LOAD_ATTR in 3.12
_LOAD_GLOBAL_SHIFT = 1                                          # the low bit means "push NULL"
_LOAD_ATTR_SHIFT = 1 if sys.version_info >= (3, 12) else 0       # 3.12: the low bit means "a method"


def _instruction_sizes() -> bytes:
    """Bytes from one instruction to the next, per opcode: 2, and 2 per inline cache entry after it
    (3.11+; LOAD_METHOD has 10): _global_reads steps over them at once."""
    entries = getattr(opcode, "_inline_cache_entries", None)
    if isinstance(entries, dict):       # 3.13+: by name
        counts = [entries.get(dis.opname[op], 0) for op in range(256)]
    elif entries is not None:
        counts = [entries[op] if op < len(entries) else 0 for op in range(256)]
    else:
        counts = [0] * 256
    return bytes(2 + 2 * n for n in counts)


_SIZES = _instruction_sizes()
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



#: [(the last _process_facts, the modules and the values it was made from)]: made again when one changed
_FACTS: list = []


def _process_facts() -> dict:
    """id -> "environment" or "machine", for the objects of _PROCESS_FACTS in the modules imported
    now. The same dict while those modules and their values are the same objects (a remembered
    walk checks that its facts are those of now by identity)."""
    modules = tuple(map(sys.modules.get, _PROCESS_FACTS))
    if _FACTS:
        facts, made_of, contents = _FACTS[0]
        if all(map(operator.is_, modules, made_of)) and all(
                (len(namespace) == len(values) and all(map(operator.is_, namespace.values(), values)))
                if names is None else all(map(operator.is_, map(namespace.get, names), values))
                for namespace, names, values in contents):
            return facts
    found, contents = {}, []
    for module, (module_name, names) in zip(modules, _PROCESS_FACTS.items()):
        if module is None:
            continue
        namespace = vars(module)
        if names is None and module is not os and isinstance(module, types.ModuleType) and \
                _PROCESS_FACTS.get(getattr(module, "__name__", None), ()) is None:
            # a whole module (platform): _process_read gives "machine" for each of its names
            for obj in namespace.values():
                if obj is not None and callable(obj):
                    found[id(obj)] = "machine"
            contents.append((namespace, None, tuple(namespace.values())))
            continue
        read = tuple(namespace if names is None else names)
        contents.append((namespace, read, tuple(map(namespace.get, read))))
        for name in read:
            obj = namespace.get(name)
            if obj is not None and (names is not None or callable(obj)):
                found[id(obj)] = _process_read(module, name)
    _FACTS[:] = [(found, modules, tuple(contents))]     # (holding the objects: their ids stay their own)
    return found


def _process_read(module, attribute) -> str | None:
    """"environment" if `module.attribute` reads the process environment, "machine" if it reads
    another fact of _PROCESS_FACTS, else None."""
    names = _PROCESS_FACTS.get(getattr(module, "__name__", None), ())
    if not isinstance(module, types.ModuleType) or names is not None and attribute not in names:
        return None
    return "environment" if module is os and attribute in _ENVIRONMENT_NAMES else "machine"


def read_global(namespace: dict, name: str):
    """What a guard compares for a module global: its type and value."""
    value = namespace.get(name, MISSING)
    return type(value), value, _zero_sign(value)


def read_cell(cell):
    """What a guard compares for a closure variable: its type and value."""
    try:
        value = cell.cell_contents
    except ValueError:          # the variable was deleted
        value = MISSING
    return type(value), value, _zero_sign(value)


#: (id(code), name) -> (code, whether that closure variable of code's functions may be rebound)
_REBINDABLE: dict = {}


def _rebindable(fn, name: str) -> bool:
    """Whether the closure variable `name` of the function `fn` holding code may hold another
    object later (`nonlocal helper; helper = other`): yes unless it is a method's `__class__`
    (super()) or a parameter of the enclosing function that no code of that function stores or
    deletes (a decorator's `f`, a factory's argument: their graphs stay storable), the enclosing
    function found by `fn`'s qualified name in its module and not resumable (a generator)."""
    code = fn.__code__
    known = _REBINDABLE.get((id(code), name))
    if known is None or known[0] is not code:
        if len(_REBINDABLE) >= _CODE_INFO_SIZE:
            _REBINDABLE.clear()
        known = _REBINDABLE[(id(code), name)] = (code, name != "__class__" and _rebound(fn, code, name))
    return known[1]


def _rebound(fn, code, name: str) -> bool:
    """_rebindable, not memoized."""
    path, _, _ = code.co_qualname.rpartition(".<locals>.")
    top, *attributes = path.partition(".<locals>.")[0].split(".")
    holder = fn.__globals__.get(top) if path else None
    for attribute in attributes:        # `Class.method.<locals>.wrapper`
        holder = vars(holder).get(attribute) if isinstance(holder, type) else None
    holder = getattr(holder, "__func__", holder)
    for _ in range(8):                  # a decorated decorator: its own __wrapped__
        if isinstance(getattr(holder, "__code__", None), types.CodeType) or holder is None:
            break
        holder = inspect.getattr_static(holder, "__wrapped__", None)
    pending = [getattr(holder, "__code__", None)]
    enclosing = None
    for outer in pending:               # the code object holding `code` among its constants
        if not isinstance(outer, types.CodeType):
            continue
        nested = [c for c in outer.co_consts if isinstance(c, types.CodeType)]
        if any(c is code for c in nested):
            enclosing = outer
            break
        pending += nested
    if enclosing is None or enclosing.co_flags & _RESUMABLE or name not in enclosing.co_varnames[
            :enclosing.co_argcount + enclosing.co_kwonlyargcount + bool(enclosing.co_flags & inspect.CO_VARARGS)
            + bool(enclosing.co_flags & inspect.CO_VARKEYWORDS)]:
        return True
    pending = [enclosing]
    for each in pending:        # stored or deleted by it or by any function it defines (`nonlocal`)
        if any(op.opname in ("STORE_DEREF", "DELETE_DEREF") and op.argval == name
               for op in dis.get_instructions(each)):
            return True
        pending += [c for c in each.co_consts if isinstance(c, types.CodeType)]
    return False


def code_held(expected) -> bool:
    """Whether a guard's expected (type, value, sign) is the identity of a function, class or module
    whose type compares by identity (a closure variable holding code: codegen checks it inline)."""
    same = expected[1] if type(expected) is tuple and len(expected) == 3 and expected[0] is _ANY else None
    obj = getattr(same, "obj", MISSING) if type(same).__name__ == "_Same" else MISSING
    return obj is not MISSING and _is_code(obj) and type(obj).__eq__ is object.__eq__ and \
        type(obj).__ne__ is object.__ne__


def _zero_sign(value):
    """The sign of a float zero (0.0 == -0.0, yet `x * value` differs), the signs of a complex
    number's parts where one is zero (complex(-0.0, 0) == 0j, yet cmath.sqrt, atan2 of its
    .real ... differ), else None."""
    if type(value) is float:
        return math.copysign(1.0, value) if value == 0.0 else None
    if type(value) is complex and (value.real == 0.0 or value.imag == 0.0):
        return math.copysign(1.0, value.real), math.copysign(1.0, value.imag)
    return None


class SignedZero:
    """A float zero (or a complex number with a zero part) inside a container or among an
    object's attributes, as a guard compares it:
    0.0 == -0.0, yet `x * value` differs (a guard on the number itself compares _zero_sign).
    Guards put the expected value on the left, so this __eq__ decides."""

    __slots__ = ("value",)
    __hash__ = None

    def __init__(self, value: float):
        self.value = value

    def __eq__(self, other):
        if type(other) is SignedZero:
            other = other.value
        return type(other) is type(self.value) and other == self.value and \
            _zero_sign(other) == _zero_sign(self.value)

    def __ne__(self, other):
        return not self.__eq__(other)

    def __repr__(self):
        return f"<float {self.value!r}>"


def signed(item):
    """An item of a snapshot: a float zero (a complex with a zero part) as a SignedZero, anything
    else as it is."""
    return SignedZero(item) if _zero_sign(item) is not None else item


def read_unbound(namespace, names: frozenset) -> bool:
    """What a guard compares for the globals a function read that did not exist (a builtin's
    name, a global set later): whether they are all still absent (codegen inlines it as
    `'len' in c0 or ...`, ~17 ns a name)."""
    return namespace.keys().isdisjoint(names)


def read_state(reader):
    """What a guard compares for framework state code reads in Python (`torch.get_num_threads()`,
    `torch.backends.mkldnn.enabled`): its type and value, read by `reader()`."""
    value = reader()
    return type(value), value, None


def read_context(var):
    """What a guard compares for a contextvars.ContextVar the code reaches (`SCALE.get()`, a C call
    no trace sees): the type and value it has in the calling context now."""
    value = var.get(MISSING)
    if value is MISSING:            # not set in this context: its default (`.get(d)` passes another)
        try:
            value = var.get()
        except LookupError:
            return MISSING, MISSING, None
        return MISSING, value, _zero_sign(value)
    return type(value), value, _zero_sign(value)


def read_attributes(obj) -> dict:
    """The attributes of a plain object holding data, as a guard compares them."""
    return _attributes(obj)


def read_defaults(fn) -> tuple:
    """What a guard compares for a function's default values (positional, then keyword-only), or
    for a functools.partial, for the arguments it adds to each call (its keywords can change in place)."""
    if isinstance(fn, functools.partial):
        return fn.args, tuple(fn.keywords.items())
    return tuple(fn.__defaults__ or ()), tuple((fn.__kwdefaults__ or {}).items())


def read_mro(cls) -> tuple:
    """What a guard compares for a class whose attribute the code read from a base (`D.k` found in
    A): its MRO, a new tuple once `__bases__` is set (codegen inlines it: `c0.__mro__ is not k1`)."""
    return _TYPE_MRO(cls)


def read_environment(environ) -> dict:
    """What a guard compares for a function whose code reads the process environment (`os.environ`,
    `os.getenv`; which variables is not known): all of it (~2 us for 50 variables)."""
    return dict(environ)


READERS = (read_global, read_cell, read_attributes, read_defaults, read_state, read_unbound, read_environment,
           read_context, read_mro)

# how views name each check, and how an explanation of a retrace says what failed
read_global.label = lambda node: f"global {node.args[1]}"
read_global.describe = lambda node: (f"the class attribute {node.args[1]!r} of {node.args[0].meta.partition(':')[2]} changed"
                                     if str(node.args[0].meta).startswith("class ") else f"the global {node.args[1]!r} changed")
read_cell.label = lambda node: "closure variable"
read_cell.describe = lambda node: "a variable of the function's closure changed"
read_attributes.label = lambda node: "items" if type(node.args[0].obj) is dict else "attributes"
read_attributes.describe = lambda node: "an attribute of an object the function reads by itself changed"
read_unbound.label = lambda node: f"unset globals {', '.join(sorted(node.args[1]))}"
read_unbound.describe = lambda node: ("a global the function read while it did not exist (a builtin's name, "
                                      "a global set later) was set")
read_mro.label = lambda node: f"bases of {node.args[0].meta.partition(':')[2]}"
read_mro.describe = lambda node: f"the bases of {node.args[0].meta.partition(':')[2]} were set (__bases__)"
read_state.label = lambda node: "framework state"
read_state.describe = lambda node: f"the framework state {node.args[0].meta} changed"
read_context.label = lambda node: f"context variable {node.args[0].obj.name}"
read_context.describe = lambda node: f"the context variable {node.args[0].obj.name!r} holds another value"
read_environment.label = lambda node: "environment"
read_environment.describe = lambda node: "the process environment (os.environ) changed"
read_defaults.label = lambda node: "default values"
read_defaults.describe = lambda node: ("a default value of the function changed (a list or dict default, or "
                                       "__defaults__), or an argument of a functools.partial")


def _readers(state_reads: dict) -> dict:
    """{(module, attribute): (the function, what reads the state)} for the entries whose attribute
    is a function (the reader itself, or one with a reader of its own: `np.random.get_state`), in
    the modules imported so far: code may call it by another name (`from numpy.random import
    get_state`)."""
    found = {}
    for (module, attribute), reader in state_reads.items():
        fn = getattr(sys.modules.get(module), attribute, None)
        if callable(fn):
            found[module, attribute] = (fn, reader or fn)
    return found


def _callable_name(fn) -> str:
    if isinstance(fn, functools.partial):
        return f"functools.partial({_callable_name(fn.func)})"
    return getattr(fn, "__qualname__", type(fn).__name__)


def _changeable(value) -> bool:
    """Whether a value holds something that can change in place: a list, dict or set, an array."""
    if type(value) is tuple:
        return any(map(_changeable, value))
    if isinstance(value, (list, dict, set, bytearray)) or hasattr(type(value), "__array__"):
        return True
    return isinstance(value, tuple) and any(_changeable(x) for x in value)


#: id(code) -> code_info(code). By identity, and
#: holding the code object (so its id is not reused): hashing a code object walks its whole
#: bytecode and constants (about 1 us for a kornia function), on every stack walk of every call
_CODE_INFO: dict = {}
_CODE_INFO_SIZE = 8192


def code_info(code) -> tuple:
    """(code, global_reads(code), nested code objects, _import_reads(code), the global reads it
    calls), computed once per code object."""
    entry = _CODE_INFO.get(id(code))
    if entry is None or entry[0] is not code:
        if len(_CODE_INFO) >= _CODE_INFO_SIZE:
            _CODE_INFO.clear()
        reads, called = _global_reads(code)
        entry = _CODE_INFO[id(code)] = (code, reads,
                                        tuple(c for c in code.co_consts if isinstance(c, types.CodeType)),
                                        _import_reads(code), called)
    return entry


def _result_used(code, name: str) -> bool:
    """Whether `code` loads the global `name` other than to call it with an argument list of no
    jumps and drop the result (`hash(x)` as a statement). Read by instructions, for the rare codes
    that name it: each load followed by a stack simulation up to the call that consumes it."""
    if name not in code.co_names:
        return False
    instructions = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    for k, ins in enumerate(instructions):
        if ins.opname != "LOAD_GLOBAL" or ins.argval != name:
            continue
        depth, dropped = 0, False
        for j in range(k + 1, len(instructions)):
            op = instructions[j]
            if op.opname == "CALL" and depth == 0:     # (PRECALL took the arguments off)
                dropped = j + 1 < len(instructions) and instructions[j + 1].opname == "POP_TOP"
                break
            if op.opcode in dis.hasjrel or op.opcode in dis.hasjabs or \
                    op.opname.startswith(("RETURN", "RAISE", "RERAISE")):
                break
            depth += dis.stack_effect(op.opcode, op.arg, jump=False) if op.opcode >= dis.HAVE_ARGUMENT \
                else dis.stack_effect(op.opcode)
            if depth < 0:
                break
        if not dropped:
            return True
    return False


#: values with nothing to read of but themselves (bound by a default, fixed unless it is replaced)
_IMMUTABLE_ATOMS = frozenset({type(None), bool, int, float, complex, str, bytes})


@functools.lru_cache(maxsize=1024)
def attribute_chains(code, name: str) -> tuple[tuple[str, ...], ...]:
    """The attribute chains `code` and the codes nested in it read on the local or closure variable
    `name` (`cfg.SCALE`, `np.get_printoptions` with `cfg`, `np` imported in an enclosing function
    or a default value; `Config.GAIN` with a class made there), by instructions: for the variables
    holding a module or a class (`__class__` of methods calling super(): read once per code)."""
    if name == "__class__":     # (the cell super() reads: no attribute read on it by name)
        return ()
    chains = []
    instructions = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    for k, ins in enumerate(instructions):
        if ins.opname in ("LOAD_DEREF", "LOAD_FAST") and ins.argval == name:
            chain = ()
            for op in instructions[k + 1:]:
                if op.opname not in ("LOAD_ATTR", "LOAD_METHOD"):
                    break
                chain = (*chain, op.argval)
                chains.append(chain)
    for const in code.co_consts:
        if isinstance(const, types.CodeType) and name in const.co_freevars:
            chains += attribute_chains(const, name)
    return tuple(chains)


def global_reads(code) -> tuple[tuple[str, ...], ...]:
    """What a code object reads as globals: (name,) for each global it loads, stores or deletes,
    and (name, attribute, ...) for each chain of attribute reads on a loaded global
    (`config.SCALE`, `pkg.settings.MODE`, `Config.GAIN`), in order of use."""
    return code_info(code)[1]


#: the opcodes that start a global read: the bytecode is scanned for them by a regular expression
_GLOBAL_OPCODES = re.compile(b"[" + b"".join(re.escape(bytes([op])) for op in (_LOAD_GLOBAL, _STORE_GLOBAL,
                                                                                 _DELETE_GLOBAL)) + b"]")


def _global_reads(code) -> tuple[tuple, frozenset]:
    """(global_reads, the chains of them the code calls): read from the bytecode directly:
    `dis.get_instructions` costs ~20x more, and the first trace of a function reads dozens of new
    code objects. Instructions are 2 bytes (opcode, argument): a match at an odd offset is an
    argument. A chain is called where its LOAD_GLOBAL pushes the NULL of a call (`Net(2.0)`; a
    global bound by an import statement pushes it for `models.Net(2.0)` too) or its last attribute
    is read as a method (LOAD_METHOD; 3.12: LOAD_ATTR's low bit): `isinstance(x, models.Net)` is not."""
    raw, names, found, called, end = code.co_code, code.co_names, {}, [], len(code.co_code)
    for match in _GLOBAL_OPCODES.finditer(raw):
        i = match.start()
        if i & 1:
            continue
        arg, k, shift = raw[i + 1], i - 2, 8
        while k >= 0 and raw[k] == _EXTENDED_ARG:
            arg |= raw[k + 1] << shift
            k, shift = k - 2, shift + 8
        if raw[i] != _LOAD_GLOBAL:
            found[(names[arg],)] = None
            continue
        chain, method = (names[arg >> _LOAD_GLOBAL_SHIFT],), arg & 1
        found[chain] = None
        j, extended = i + _SIZES[_LOAD_GLOBAL], 0
        while j < end:          # attribute reads on it, past inline caches and extended arguments
            op, arg = raw[j], raw[j + 1] | extended
            j += _SIZES[op]
            if op == _EXTENDED_ARG:
                extended = arg << 8
                continue
            extended = 0
            if op == _CACHE:
                continue
            if op == _STORE_ATTR:       # `config.LAST = value`: set, and checked, like a global
                found[(*chain, names[arg])] = None
                method = False
                break
            if op != _LOAD_ATTR and op != _LOAD_METHOD:
                break
            chain = (*chain, names[arg >> _LOAD_ATTR_SHIFT if op == _LOAD_ATTR else arg])
            found[chain] = None
            method = method or op == _LOAD_METHOD or _LOAD_ATTR_SHIFT and arg & 1
        if method:
            called.append(chain)
    if "getattr" in names:
        found.update(dict.fromkeys(_getattr_reads(code)))
    return tuple(found), frozenset(called)


def _getattr_reads(code):
    """`getattr(torch.backends.mkldnn, "enabled")`: the chain and the literal name, read like
    `torch.backends.mkldnn.enabled` (a name held in a variable stays unknown)."""
    instructions = [i for i in dis.get_instructions(code) if i.opname not in ("PRECALL", "PUSH_NULL")]
    for k, instruction in enumerate(instructions[:-3]):
        if instruction.opname != "LOAD_GLOBAL" or instruction.argval != "getattr" or \
                instructions[k + 1].opname != "LOAD_GLOBAL":
            continue
        chain, j = [instructions[k + 1].argval], k + 2
        while j < len(instructions) and instructions[j].opname in ("LOAD_ATTR", "LOAD_METHOD"):
            chain.append(instructions[j].argval)
            j += 1
        if j + 1 < len(instructions) and instructions[j].opname == "LOAD_CONST" and \
                isinstance(instructions[j].argval, str) and instructions[j + 1].opname == "CALL" and \
                instructions[j + 1].arg == 2:
            yield (*chain, instructions[j].argval)


def _import_reads(code) -> tuple[tuple, ...]:
    """What a function's own `import` statements make it read: (level, module, attribute, ...)
    for each `from m import NAME` and each chain of attribute reads on a module it imported
    into a local variable (`import config` then `config.SCALE`). Most code imports nothing:
    that is checked on the raw bytecode first."""
    if _IMPORT_NAME not in code.co_code[::2]:
        return ()
    found, modules, last_consts, pending, chain = {}, {}, [None, None], None, None
    for ins in dis.get_instructions(code):
        op = ins.opname
        if chain is not None and op in ("LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR"):
            found[(*chain, ins.argval, _STORED) if op == "STORE_ATTR" else (*chain, ins.argval)] = None
            chain = (*chain, ins.argval) if op != "STORE_ATTR" else None
            continue
        chain = None
        if op == "LOAD_CONST":
            last_consts = [last_consts[1], ins.argval]
        elif op == "IMPORT_NAME":
            level, fromlist = last_consts
            pending = (level if isinstance(level, int) else 0, ins.argval, fromlist, ())
        elif op == "IMPORT_FROM" and pending is not None:
            level, name, fromlist, path = pending
            pending = (level, name, fromlist, (*path, ins.argval))
        elif op in ("STORE_FAST", "STORE_DEREF") and pending is not None:
            level, name, fromlist, path = pending
            if fromlist and not path:               # a store after `from m import a, b` ended
                pending = None
            elif fromlist:                          # from m import NAME: m.NAME read now
                modules[ins.argval] = (level, name, path[-1])
                found[modules[ins.argval]] = None
                pending = (level, name, fromlist, ())
            else:                                   # import a.b.c (as n): the module bound
                modules[ins.argval] = (level, name) if path else (level, name.partition(".")[0])
                pending = None
        elif op in ("LOAD_FAST", "LOAD_DEREF") and ins.argval in modules:
            chain, pending = modules[ins.argval], None
        elif op != "POP_TOP" and op != "SWAP":
            pending = None
    return tuple(c for c in found if len(c) > 2)


def _differs(expected, now) -> bool:
    """expected != now, where `now` may hold what the function left there (an array it appended
    to a list: `None == array` gives an array, whose truth raises): a comparison that raises is
    a change."""
    try:
        return bool(expected != now)
    except Exception:       # noqa: BLE001 - any __eq__ of the function's own objects
        return True


def _flat(values):
    """The items of nested tuples (read_defaults gives (positional, keyword items))."""
    for value in values:
        if type(value) is tuple:
            yield from _flat(value)
        else:
            yield value


def _is_code(value) -> bool:
    """Functions, classes, modules and decorated callables (lru_cache wrappers, LazyGraphs)."""
    return isinstance(value, _CODE_TYPES) or callable(value) and _has_wrapped(value)


def _method_code(code) -> bool:
    """Whether code is a method's, by its qualified name (`Class.name`, not `f.<locals>.g`)."""
    owner, _, name = code.co_qualname.rpartition(".")
    return bool(owner) and not owner.endswith(">") and not name.startswith("<")


def _followable(value) -> bool:
    """Code whose own reads the static walk follows: a Python function, a method of an object bound
    to it (`scale = CONFIG.scale`), or a decorated one."""
    return isinstance(value, types.FunctionType) or type(value) is types.MethodType and \
        type(value.__func__) is types.FunctionType or callable(value) and _has_wrapped(value)


def _has_wrapped(value) -> bool:
    """Whether `value` has a `__wrapped__` (functools.wraps, lru_cache, a LazyGraph, wrapt's
    proxies), found without running code of the user's: hasattr would call a `__getattr__` its
    class (or metaclass, for a class) defines; those are looked up by inspect.getattr_static."""
    tp = type(value)
    plain = _PLAIN_LOOKUP.get(tp)
    if plain is None:
        plain = not any(isinstance(vars(k).get(name), types.FunctionType)
                        for k in tp.__mro__ for name in ("__getattr__", "__getattribute__"))
        if len(_PLAIN_LOOKUP) >= 4096:
            _PLAIN_LOOKUP.clear()
        _PLAIN_LOOKUP[tp] = plain
    if plain:
        return hasattr(value, "__wrapped__")
    return inspect.getattr_static(value, "__wrapped__", _NO_WRAPPED) is not _NO_WRAPPED


_TYPE_MRO = vars(type)["__mro__"].__get__      # (a class's MRO, read without its metaclass's code)
#: type -> whether attribute lookups on its objects run no Python code of a __getattr__/__getattribute__
_PLAIN_LOOKUP: dict = {}
_NO_WRAPPED = object()


def _attributes(obj):
    tp = type(obj)
    if tp in (dict, collections.OrderedDict):    # the structure of a model (its parameters, hooks ...)
        return dict(obj)
    slots = _SLOTS.get(tp)
    if slots is None:
        slots = _slots(tp)
    if not slots:           # (a dataclass without a __dict__ has slots)
        attributes = dict(vars(obj))
        attributes["__class__"] = tp    # (`obj.__class__ = Other` reads Other's attributes)
        return attributes
    attributes = dict(vars(obj)) if hasattr(obj, "__dict__") else {}
    attributes["__class__"] = tp
    for name, member in slots:      # `__slots__ = ("k",)`: read by its member descriptor (in C)
        try:
            attributes[name] = member.__get__(obj, tp)
        except AttributeError:      # (not set: absent, as an unset attribute of a __dict__)
            pass
    return attributes


#: type -> its __slots__ entries (those of its bases too) as (name, member descriptor); () for most
_SLOTS: dict = {}


def _slots(tp) -> tuple:
    found = _SLOTS.get(tp)
    if found is not None:
        return found
    if len(_SLOTS) >= 4096:
        _SLOTS.clear()
    found = _SLOTS[tp] = tuple((name, member) for klass in tp.__mro__ for name, member in vars(klass).items()
                               if type(member) is types.MemberDescriptorType)
    return found


#: id(function) -> what PythonReads.start found for it (see start): [a weak reference to the function,
#: the reads it made, the leaves to do again, the walk's state, the backend's state_reads, the
#: readers imported then, (the root code, the process facts, environment, machine)]. Holding the
#: objects read (their ids stay their own), not the function: its entry goes when it goes.
_WALKS: dict = {}
_WALKS_SIZE = 512
_ROOT = object()        # stands for the walked function itself among the reads (_Checks.hold)
_REMEMBER_FROM = 3      # global reads (chains) in a function's own code from which its walk is remembered
#: a walk notes its reads (35-45% more than a walk) only from the function's second trace on: most
#: functions trace once (bench_kornia's first calls), a function traced for a new shape is then
#: traced again; _WALKED holds (weakly) the functions walked once
_NOTE_FIRST_WALK = False
_WALKED: weakref.WeakSet = weakref.WeakSet()


def _forget(ref):
    for key, entry in list(_WALKS.items()):
        if entry[0] is ref:
            del _WALKS[key]

# what the walk tests a value for (_kind)
_CODE, _FOLLOWABLE, _MODULE, _PARTIAL, _FUNCTION, _CLASS, _ENUM, _CALLABLE = (1 << i for i in range(8))
_KINDS = tuple(range(1 << 8))       # (the same int objects, compared by identity)


# The reads of the static walk, each (obj, name) -> the object found, compared by identity when a
# remembered walk is taken (PythonReads._seen)
def _copy(container):
    return type(container)(container)


def _get(mapping, key):
    return mapping.get(key, MISSING)


def instance_dict(obj):
    """An object's __dict__ or None, read without running its class's code where its class looks
    attributes up as `object` does (getattr falls back to a __getattr__ of the user's for an object
    of slots); others' own lookup is C code (`threading.local`: a __dict__ per thread)."""
    try:
        if type(obj).__getattribute__ is object.__getattribute__:
            return object.__getattribute__(obj, "__dict__")
        return getattr(obj, "__dict__", None)
    except AttributeError:
        return None


def _get_or_none(mapping, key):
    return mapping.get(key)


def _attr(obj, name):
    return getattr(obj, name, MISSING)


def _cell(cell, _):
    return read_cell(cell)[1]


def _vars(obj, _):
    return vars(obj)


def _kind(value, _=None):
    """What the walk decides by about a value (a function it follows, data, a module ...)."""
    kind = _TYPE_KINDS.get(type(value))
    if kind is not None:
        return kind
    kind = (_CODE if _is_code(value) else 0) | (_FOLLOWABLE if _followable(value) else 0)
    if isinstance(value, types.ModuleType):
        kind |= _MODULE
    if isinstance(value, functools.partial):
        kind |= _PARTIAL
    if type(value) is types.FunctionType:
        kind |= _FUNCTION
    if isinstance(value, type):
        kind |= _CLASS | (_ENUM if issubclass(value, enum.Enum) else 0)
    if callable(value):
        kind |= _CALLABLE
    return _KINDS[kind]



def _position(iterator):
    """Where an iterator stands, as a value that changes when next() moves it; None if unknown."""
    frame = getattr(iterator, "gi_frame", MISSING)      # a generator: its frame's last instruction
    if frame is not MISSING:
        return ("frame", None if frame is None else frame.f_lasti)
    if type(iterator).__module__ not in ("builtins", "itertools"):
        return None
    try:
        with warnings.catch_warnings():     # (itertools' pickling is deprecated from 3.12)
            warnings.simplefilter("ignore")
            return iterator.__reduce__()    # list/range/dict iterators, count ...: their index or state
    except Exception:       # noqa: BLE001  (no state to read: unknown)
        return None


#: code held by an object or a container whose own reads _note_one follows (`OPS["s"]()`)
_HELD_CODE = (types.FunctionType, types.MethodType, functools.partial, staticmethod, classmethod)

#: _kind of the objects of types whose objects all have their type's (no __class__ assignment, no
#: __wrapped__ that would change it): not checked again
_TYPE_KINDS: dict = {}
_TYPE_KINDS.update({tp: _kind(obj) for tp, obj in ((types.FunctionType, _kind), (types.BuiltinFunctionType, len),
                                                 (type(None), None), (int, 0), (float, 0.0),
                                                 (str, ""), (tuple, ()), (bool, True), (object, MISSING))})


class _Checks:
    """The reads of a remembered walk, grouped so that most are compared by C loops: hold() tells
    whether each still gives the same object."""

    __slots__ = ("items", "attributes", "others", "own", "consistent")

    def __init__(self, reads, done):
        """reads: (reader, obj, name, what it gave) in the walk's order; done: PythonReads._done,
        whose entries are the reads `namespace.get(name)` of _code."""
        first: dict = {}        # (reader, id(obj), name) -> the read
        self.consistent = True  # each read gave one object (else: another thread changed a global meanwhile)
        reads = itertools.chain(reads, ((_get_or_none, namespace, chain[0], value)
                                        for (_, chain), (value, _, namespace) in done.items()))
        for read in reads:
            if read[0] is _kind and type(read[1]) in _TYPE_KINDS:
                continue
            known = first.setdefault((read[0], id(read[1]), read[2]), read)
            if known[3] is not read[3]:
                self.consistent = False
        items: dict = {}        # (id(mapping), default) -> (mapping, keys, objects found, default)
        attributes, others, self.own = ([], [], []), [], []
        for reader, obj, name, found in first.values():
            if obj is _ROOT:
                self.own.append((reader, name, found))
            elif reader is _get or reader is _get_or_none:
                default = MISSING if reader is _get else None
                entry = items.get((id(obj), default))
                if entry is None:
                    entry = items[id(obj), default] = (obj, [], [], default)
                entry[1].append(name)
                entry[2].append(found)
            elif reader is _attr:
                for column, x in zip(attributes, (obj, name, found)):
                    column.append(x)
            else:
                others.append((reader, obj, name, found))
        self.items = tuple(items.values())
        self.attributes = attributes
        self.others = tuple(others)

    def hold(self, root) -> bool:
        """Whether each read gives the same object now (`root`: the function walked)."""
        if not self.consistent or not all(reader(root, name) is found for reader, name, found in self.own):
            return False
        is_ = operator.is_
        for mapping, keys, found, default in self.items:
            if not all(map(is_, map(mapping.get, keys, itertools.repeat(default)), found)):
                return False
        objs, names, found = self.attributes
        if not all(map(is_, map(getattr, objs, names, itertools.repeat(MISSING)), found)):
            return False
        return all(reader(obj, name) is found for reader, obj, name, found in self.others)


class PythonReads:
    """The globals and closure variables one trace reads, with what each guard expects.

    `snapshot(value)` gives the value a guard compares with (a copy for containers, an identity
    marker for arrays and objects) or `nothing` when the value holds something it cannot check.
    """

    # (immutable values set by some traces: read from the class until then, not set by __init__)
    _readers = None         # id -> (reader, its key) of the state_reads functions imported now (_state_readers)
    environment = False     # its code reads the process environment (a guard compares it; not stored)
    machine = False         # its code reads another fact of the process or machine (not stored on disk)
    _facts = None           # _process_facts(), taken at the first plain global read
    late_write = None       # a global set in a module the function imported for the first time
    remembered = False      # start() took a remembered walk

    def __init__(self, snapshot, nothing, same, known, record, generator_state=lambda obj: None, state_reads=None):
        self._snapshot = snapshot
        self._state_reads = state_reads or {}   # (module, attribute) -> reader: see Backend.state_reads
        self._generator_state = generator_state     # the state of a random generator it does not record
        self._known = known
        self._record = record       # record(obj) -> containers of a model's structure, recorded like `stateful`
        self._nothing = nothing
        self._same = same
        self._codes: dict = {}      # id(code) -> code seen (by identity: see code_info)
        self._walked: dict = {}     # id(frame) -> frame of a plain function, walked down to the root
        self._below: dict = {}      # id(frame) of one in _walked -> whether a frame below it is in a block (on_call)
        self._watched: set = set()  # ids of the codes in _codes whose globals are checked
        self._done: dict = {}       # (id(namespace), read) -> (the object it named, depth, namespace) handled
        self.root = None            # the traced function's code: stack walks stop there
        self.stop = None            # the trace's own frame (set by start): walks of the stack end there at the latest
        self.other_thread = False   # a call was made from a thread other than the trace's (its stack has no `stop`)
        self.packages: set = set()  # top-level packages of the code seen, besides UNWATCHED ones
        #: (id(namespace), name) -> (namespace, name, the code it held, module name): module globals
        #: holding code (code_globals)
        self.code_values: dict = {}
        #: (id(class namespace), name) -> (class, name, the code it held): methods, properties,
        #: class/static methods and nested classes of user classes the walk read or followed
        self.class_code: dict = {}
        #: (module name, attribute) -> function, for framework functions the code reads through a
        #: framework module (`jnp.sin`, `jax.nn.relu`): a graph checks they are still there
        self.framework_functions: dict = {}
        self._method_classes: set = set()  # classes whose methods' reads are noted (_methods)
        self._method_codes: list = []      # code of those methods (no stack shows them: names_used)
        self._held_functions: dict = {}    # id -> function held by what the code reached (_held_function)
        self._held_modules: dict = {}      # id -> module held by what the code reached (settle)
        self.modules: set = set()   # names of the modules of that code
        self._class_namespaces: dict = {}  # class -> vars(class), for checks of class attributes
        self.globals: dict = {}     # (id(namespace), name) -> (namespace, name, value, expected)
        self.cells: list = []       # (cell, name, value, expected)
        self.defaults: list = []    # (function, expected): defaults that can change in place (a list, a dict ...)
        self.objects: dict = {}     # id(obj) -> (obj, expected attributes)
        self._imports: list = []    # (level, module, attributes, namespace, depth): see settle
        self.imported: dict = {}    # names of the user's modules the code imported in its body (keys, in order)
        self._submodules_later: list = []   # (framework module, attributes) through a submodule not imported yet
        self.unbound: dict = {}     # (id(namespace), name) -> (namespace, name): globals unset when first seen
        self.generators: dict = {}  # id(generator) -> (generator, its state when first seen)
        self.iterators: dict = {}   # id -> (an iterator reached, its position then or None: `iterator`)
        self.states: dict = {}      # id(reader) -> (reader, what it reads, expected): framework state read
        self.contexts: dict = {}    # id(ContextVar) -> (the variable, expected read_context)
        self.mros: dict = {}        # id(class) -> (a class whose attribute was read from a base, its MRO)
        self._checks = None         # while start() walks a function to remember: (reader, id, name) -> read
        self._leaves = None         # ... and the leaves it did (_leaf)

    def holders(self):
        """(container, key) of each place the function's code can leave a value in besides its
        result: the globals and closure variables it uses, the objects it reads attributes of."""
        for namespace, name, value, expected in self.globals.values():
            yield namespace, name
        yield from self.unbound.values()
        for cell, *_ in self.cells:
            yield cell, None
        for obj, expected in self.objects.values():
            yield obj, None
        for fn, expected in self.defaults:      # a list default the function appends to
            for value in _flat(read_defaults(fn)):
                if isinstance(value, (list, dict, set)):
                    yield value, None

    def release(self) -> None:
        """Let go of the stack frames the trace walked: their locals hold the function's arrays,
        and they lead up to the trace's own frame, which holds the session (a reference cycle)."""
        self._walked.clear()
        self._below.clear()
        self.stop = None

    def _note_process(self, kind) -> None:
        """A read of _PROCESS_FACTS: "environment" or "machine" (or nothing to note)."""
        if kind == "environment":
            self.environment = True
        elif kind == "machine":
            self.machine = True

    # ---- before and while the trace runs ------------------------------------------------
    def start(self, fn):
        """Note what `fn` can read before it runs: its closure, the globals of its code and of
        the Python functions those globals hold, _CALLS deep (a counter the function
        bumps before its first framework call is then seen as changed).

        The walk of a plain function is remembered (_WALKS): the next trace of the same code,
        globals and closure cells checks every read the walk made (each global, module and
        class attribute, function attribute and closure variable it looked at, each test of
        what a value is) by identity, and where all are the same objects it takes the walk's
        result instead of walking again. What the walk read of data (the values of data
        globals, closure variables, framework state, objects' attributes) is read again then,
        in the walk's order: the guards are those a walk would give."""
        fn = getattr(fn, "__func__", fn)
        self.stop = sys._getframe(1)       # the trace's own frame: stack walks end there at the latest
        # (a partial: walked each time; a function reading fewer globals than _REMEMBER_FROM walks
        # about as fast as a remembered walk is checked)
        key = fn if type(fn) is types.FunctionType and len(code_info(fn.__code__)[1]) >= _REMEMBER_FROM else None
        self.remembered = key is not None and self._replay(key)
        if not self.remembered:
            if key is not None and (_NOTE_FIRST_WALK or key in _WALKED):
                self._checks, self._leaves = [], []
            elif key is not None:
                _WALKED.add(key)
            try:
                fn = self._partial(fn)
                self.root = getattr(fn, "__code__", None)
                self._function(fn, depth=0)
                if self._checks is not None:
                    self._remember(key)
            finally:
                self._checks = self._leaves = None
        # a list, a dict, an array can change in place: checked. Numbers, strings, other objects
        # are the same objects unless __defaults__ is replaced, which is not watched (the
        # persistent cache keys them; a check would keep such graphs out of it)
        if isinstance(fn, types.FunctionType) and (fn.__defaults__ or fn.__kwdefaults__) and \
                _changeable(read_defaults(fn)):
            self._defaults(fn)

    # the state of a walk that a remembered one restores (the rest is filled by its leaves)
    _WALK_STATE = ("_codes", "_watched", "_done", "packages", "code_values", "class_code",
                   "framework_functions", "modules", "_class_namespaces", "_imports", "_submodules_later",
                   "unbound", "imported")   # (copied)

    def _remember(self, fn):
        """Keep this walk (start) of `fn` for its next trace (its own __code__, __wrapped__ ... are
        among the reads checked)."""
        state = tuple(_copy(getattr(self, name)) for name in self._WALK_STATE)
        checks = [self._checks, state[self._WALK_STATE.index("_done")]]    # (made a _Checks at the first replay)
        if len(_WALKS) >= _WALKS_SIZE:
            _WALKS.clear()
        _WALKS[id(fn)] = [weakref.ref(fn, _forget), checks, tuple(self._leaves), state, dict(self._state_reads),
                          self._readers_by_key(), (self.root, self._facts, self.environment, self.machine)]

    def _replay(self, fn) -> bool:
        """Take the walk remembered for `fn` if every read it made gives the same object now
        (returns whether it did)."""
        entry = _WALKS.get(id(fn))
        if entry is None or entry[0]() is not fn:
            return False
        _, checks, leaves, state, state_reads, readers, (root, facts, environment, machine) = entry
        # (a reader reached as a bound method is a new object at each getattr: compared by ==)
        if state_reads != self._state_reads or readers is not None and readers != \
                {key: reader for reader, key in self._state_readers.values()}:
            return False
        if type(checks) is list:
            checks = entry[1] = _Checks(*checks)
        if not checks.hold(fn):
            return False
        if facts is not None and _process_facts() is not facts:
            return False
        for name, value in zip(self._WALK_STATE, state):
            setattr(self, name, _copy(value))
        self.root, self._facts, self.environment, self.machine = root, facts, environment, machine
        for method, args in leaves:
            method(self, *args)
        return True

    @property
    def _state_readers(self) -> dict:
        """id -> (reader, (module, attribute)) for the state_reads entries whose attribute is the
        reader itself, in the modules imported now: made at the first global read."""
        if self._readers is None:
            self._readers = {id(fn): (reader, key) for key, (fn, reader) in _readers(self._state_reads).items()}
        return self._readers

    def _readers_by_key(self) -> dict | None:
        """What a remembered walk found of _state_readers (None: it read none)."""
        if self._readers is None:
            return None
        return {key: reader for reader, key in self._readers.values()}

    def _seen(self, reader, obj, name=None):
        """reader(obj, name) (_get, _attr, _cell, _vars, _kind), noted while a walk is remembered."""
        found = reader(obj, name)
        if self._checks is not None:
            self._checks.append((reader, obj, name, found))
        return found

    def _item(self, mapping, key):
        """mapping.get(key, MISSING), noted (_seen, with one call less: most reads are these)."""
        found = mapping.get(key, MISSING)
        if self._checks is not None:
            self._checks.append((_get, mapping, key, found))
        return found

    def _name(self, obj):
        """obj.__name__ (MISSING if none), noted."""
        found = getattr(obj, "__name__", MISSING)
        if self._checks is not None:
            self._checks.append((_attr, obj, "__name__", found))
        return found

    def _kind_of(self, value):
        """_kind(value), noted unless its type fixes it. (Whether an object is a module, a class or
        a functools.partial is not noted: __class__ assignment cannot change that.)"""
        kind = _TYPE_KINDS.get(type(value))
        return self._seen(_kind, value) if kind is None else kind

    def _leaf(self, method, *args):
        """method(self, *args): what the walk does with a value it found (a data global, a closure
        variable, framework state): done again when a remembered walk is taken."""
        leaves, checks = self._leaves, self._checks
        if leaves is None:
            return method(self, *args)
        leaves.append((method, args))
        self._leaves = self._checks = None      # (what it reads is read again each time: not checked)
        try:
            method(self, *args)
        finally:
            self._leaves, self._checks = leaves, checks

    def _partial(self, fn, depth=None):
        """For a functools.partial, nested ones included: its arguments are checked (`p.keywords["k"]
        = 5.0` changes every later call); returns the function it calls, followed from `depth`."""
        bound = []
        while self._kind_of(fn) & _PARTIAL:
            self._leaf(PythonReads._partial_arguments, fn)
            bound.append(fn)
            func = self._seen(_attr, fn, "func")
            fn = self._seen(_attr, func, "__func__")
            fn = func if fn is MISSING else fn
        code = getattr(fn, "__code__", None) if bound else None
        if isinstance(code, types.CodeType):        # `partial(f, cfg=config_module)`: what f reads of it
            positional = bound[0].args if len(bound) == 1 else ()
            for name, value in (*zip(code.co_varnames[:code.co_argcount], positional),
                                *itertools.chain.from_iterable(p.keywords.items() for p in bound)):
                self._bound(code, name, value, self._kind_of(value), 0 if depth is None else depth)
        if depth is not None and depth < _CALLS and self._kind_of(fn) & _FOLLOWABLE:
            self._function(fn, depth + 1)
        return fn

    def _partial_arguments(self, fn):
        if (fn.keywords or _changeable(fn.args)) and not any(f is fn for f, _ in self.defaults):
            self._defaults(fn)

    def _defaults(self, fn):
        expected = self._snapshot(read_defaults(fn))
        if expected is not self._nothing:
            self._reach_items(expected)
            self.defaults.append((fn, expected))

    def on_call(self, frame, catching=False) -> bool:
        """A framework call is being made from `frame`: note the code of every function on the
        stack down to the traced one (methods and other code the start could not see).
        `catching`: in the same walk, whether a frame from `frame` down to the trace's (to the
        root's where there is no trace frame) is inside a try or with block at its current
        instruction (True: handlers.inside_except says whether one may take an error of this
        call; False: none can)."""
        walked, stop, root = self._walked, self.stop, self.root
        if walked.get(id(frame)) is frame:      # (most calls: the code calling made an earlier call from
            if not catching:                    # this frame; `stop` is never in walked, None comes here:
                return False                    # nothing below it)
            # its own block at this instruction, else what is below it, where both are known (the
            # loop below answers so at its first frame)
            below = self._below.get(id(frame))
            if below is not None:
                table = _handlers._TABLES.get(id(frame.f_code))
                if table is not None:
                    return True if table is not False and table[frame.f_lasti] else below
        else:
            if frame is None or frame is stop:
                return False
            codes, watched, blocks = self._codes, self._watched, False
            while True:     # (the caller's own code, at `stop`, is not the function's)
                code = frame.f_code
                if code is root:
                    break
                if id(code) not in codes:
                    # (the functions its globals hold are followed as from the traced function's:
                    # a model's forward calling a helper that calls a getter making no framework call)
                    self._code(code, frame.f_globals, depth=0)
                    if id(code) in watched and _method_code(code):
                        self._frame_method(frame, code)
                # the function's own frames (a generator's frame is resumed by other callers; the
                # interceptor's and the framework's frames are new at every call), held until the
                # trace ends (the id stays the frame's own); marked before the frames below it are
                # walked: a call made meanwhile (by what _code reads) comes from above this walk
                if id(code) in watched and not code.co_flags & _RESUMABLE:
                    walked[id(frame)] = frame
                if catching:
                    table = _handlers._TABLES.get(id(code))        # (a frame's blocks: handlers.frame_table)
                    if table is None:
                        table = _handlers.frame_table(code, frame.f_globals)
                    if table is not False and table[frame.f_lasti]:
                        blocks = True           # (the rest of the walk: for the code alone)
                        catching = False
                frame = frame.f_back
                if frame is None or frame is stop or walked.get(id(frame)) is frame:
                    break   # (walked from here down by an earlier call, while this frame ran)
            if frame is None and stop is not None:
                self.other_thread = True    # the stack's bottom, not the trace's frame: another thread's call
            if not catching:
                return blocks
        # the frames below, for blocks alone (handlers.inside_except's walk). Below a frame in
        # `walked` (a plain function's, running: the code calling is it or above it), the frames
        # stay at the instructions they called from until it returns, which it does once: what
        # they hold is worked out for the first call from above it, then taken from _below
        tables, pending = _handlers._TABLES, None
        while frame is not None and frame is not stop:
            code = frame.f_code
            table = tables.get(id(code))
            if table is None:
                table = _handlers.frame_table(code, frame.f_globals)
            if table is not False and table[frame.f_lasti]:
                found = True
                break
            if code is root:                # (never in walked)
                if stop is None:
                    found = False
                    break
            elif walked.get(id(frame)) is frame:
                found = self._below.get(id(frame))
                if found is not None:
                    break
                if pending is None:
                    pending = []
                pending.append(id(frame))
            frame = frame.f_back
        else:
            if pending is None:
                return False
            found = False
        if pending is not None:
            below = self._below
            for key in pending:
                below[key] = found
        return found

    def _frame_method(self, frame, code):
        """A method seen only on the stack (`Scaler().scale(x)`, on an object made in the call):
        the class attribute holding it is checked (_class_code), so that replacing it on the class
        later is seen. Its class is its first argument's (a class method's: the argument itself),
        looked up in the MRO for the attribute whose code this is, reading namespaces only; a static
        method's (no such argument) is its qualified name's class in the module's globals."""
        first = frame.f_locals.get(code.co_varnames[0], MISSING) if code.co_argcount else MISSING
        cls = first if isinstance(first, type) else type(first)
        name = code.co_name
        if not self._frame_method_in(cls, code, name):
            owner, _, _ = code.co_qualname.rpartition(".")
            top, *nested = owner.split(".")
            cls = frame.f_globals.get(top)
            for part in nested:         # `Outer.Inner.static`
                cls = vars(cls).get(part) if isinstance(cls, type) else None
            if isinstance(cls, type):
                self._frame_method_in(cls, code, name)

    def _frame_method_in(self, cls, code, name) -> bool:
        """_frame_method in the MRO of `cls`: whether the attribute was found."""
        for klass in _TYPE_MRO(cls):
            if str(vars(klass).get("__module__")).partition(".")[0] in UNWATCHED:
                continue
            namespace = self._class_namespace(klass)
            member = namespace.get(name, MISSING)
            if member is MISSING:
                continue
            func = getattr(member, "__func__", None) or getattr(member, "fget", None) or member
            if getattr(func, "__code__", None) is code:
                self._class_code(klass, namespace, name, member)
                return True
        return False

    def _function(self, fn, depth):
        checks = self._checks
        wrapped = getattr(fn, "__wrapped__", MISSING)      # functools.wraps, a LazyGraph
        code = getattr(fn, "__code__", MISSING)
        if checks is not None:
            obj = _ROOT if depth == 0 and code is self.root else fn     # (not held: see _WALKS)
            checks += ((_attr, obj, "__wrapped__", wrapped), (_attr, obj, "__code__", code))
        if wrapped is not MISSING and wrapped is not None and wrapped is not fn:
            self._function(wrapped, depth)
        if not isinstance(code, types.CodeType):
            return
        method = type(fn) is types.MethodType and code.co_argcount     # `scale = CONFIG.scale`: self.k
        if id(code) in self._codes:
            if method and id(code) in self._watched:
                self._bound_self(fn, code, depth)
            return
        # (a function's __globals__ and __closure__ cannot be set: what it is fixes them)
        function = type(fn) is types.FunctionType
        namespace = fn.__globals__ if function else self._seen(_attr, fn, "__globals__")
        if str(self._item(namespace, "__name__")).partition(".")[0] in UNWATCHED:
            # a framework's own function (tf.sigmoid's dispatch wrappers): its code is not watched
            # (_code), nor its closure, the framework's own state (dispatchers, signatures); a user
            # function it wraps was followed through __wrapped__ above
            self._codes[id(code)] = code
            return
        closure = fn.__closure__ if function else self._seen(_attr, fn, "__closure__")
        for name, cell in zip(code.co_freevars, closure if isinstance(closure, tuple) else ()):
            value = self._seen(_cell, cell)
            kind = self._kind_of(value)
            if not kind & _CODE or not kind & _MODULE and (not function or _rebindable(fn, name)):
                self._leaf(PythonReads._closure_variable, cell, name, value)  # code by identity: `nonlocal` rebinds it
            if kind & _CODE:
                self._bound(code, name, value, kind, depth)
                if depth < _CALLS and kind & _FOLLOWABLE and not kind & _MODULE:
                    self._function(value, depth + 1)
        if function and (fn.__defaults__ or fn.__kwdefaults__):
            self._parameters(code, fn, depth)
        self._code(code, namespace, depth)
        if method and id(code) in self._watched:
            self._bound_self(fn, code, depth)

    def _bound_self(self, method, code, depth):
        owner = self._seen(_attr, method, "__self__")
        self._bound(code, code.co_varnames[0], owner, self._kind_of(owner), depth)

    def _parameters(self, code, fn, depth):
        """Default values of `fn`'s parameters (`cfg=CONFIG`, `m=config_module`): what the code reads
        of them by name. (Defaults replaced: checked as the function's own, LazyGraph._code_replaced.)"""
        defaults = self._seen(_attr, fn, "__defaults__") or ()
        kwdefaults = self._seen(_attr, fn, "__kwdefaults__") or {}
        names = code.co_varnames[code.co_argcount - len(defaults):code.co_argcount] if defaults else ()
        for name, value in (*zip(names, defaults), *kwdefaults.items()):
            self._bound(code, name, value, self._kind_of(value), depth)

    def _bound(self, code, name, value, kind, depth):
        """A value bound to the name `name` of `code` other than by a global (a closure variable
        holding code, a default value, a partial's keyword): a module's globals and state read
        through it (`cfg.SCALE`, `cfg` imported in an enclosing function), a class's attributes
        (`Config.GAIN`), a plain object's attributes (`cfg.k`, a default `cfg=CONFIG`)."""
        if kind & _MODULE:
            module = self._name(value)
            for chain in attribute_chains(code, name) if type(module) is str else ():
                self._module_reads(value, module, chain, depth)
        elif kind & (_CLASS | _ENUM) == _CLASS:
            for chain in attribute_chains(code, name):
                self._class_attribute(value, chain, depth)
        elif kind & _ENUM:
            for chain in attribute_chains(code, name):
                self._enum_value(value, chain)
        elif not kind & _CODE and type(value) not in _IMMUTABLE_ATOMS:   # (most defaults: None, 1.0, "bilinear")
            self._leaf(PythonReads._bound_object, value)

    def _bound_object(self, value):
        self._expect(value)         # (its attributes guarded, where it holds data: _note_object)

    def _closure_variable(self, cell, name, value):
        expected = self._expect(value)
        if expected is self._nothing:       # a function, class or module: the same object (rebound by `nonlocal`)
            expected = (_ANY, self._same(value), None)
        self.cells.append((cell, name, value, expected))

    def _code(self, code, namespace, depth):
        self._codes[id(code)] = code
        module_name = self._item(namespace, "__name__")
        package = str("" if module_name is MISSING else module_name).partition(".")[0]
        if package in UNWATCHED or code.co_filename.startswith("<lazytrace"):   # a graph inlined here
            return
        _, reads, nested, imports, called = code_info(code)
        self._watched.add(id(code))
        self.packages.add(package)
        if type(module_name) is str:
            self.modules.add(module_name)
        if reads:
            self._reads(reads, namespace, depth)
            if depth < _CALLS and type(module_name) is str:
                for chain in called:        # `Net(2.0)`: its __init__ (not `isinstance(x, Net)`)
                    value = namespace.get(chain[0])
                    for attribute in chain[1:]:         # `models.Net(2.0)`, through the user's modules
                        value = vars(value).get(attribute) if isinstance(value, types.ModuleType) and \
                            str(self._name(value)).partition(".")[0] not in UNWATCHED else None
                    if isinstance(value, type) and self._user_class(value) and not issubclass(value, enum.Enum):
                        self._constructor(value, depth)
        for level, module, *attributes in imports:      # `import config` inside the function
            if not self._import(level, module, attributes, namespace, depth):
                self._imports.append((level, module, attributes, namespace, depth))
        for const in nested:                # comprehensions, lambdas and inner functions
            if id(const) not in self._codes:
                self._code(const, namespace, depth)

    def _reads(self, reads, namespace, depth):
        """_code's walk of the globals its code reads (code_info: name chains, `np.random.rand`)."""
        done, where = self._done, id(namespace)
        state_reads, module_type = self._state_reads, types.ModuleType
        readers = self._state_readers if state_reads else {}
        checks = self._checks
        if self._facts is None:
            self._facts = _process_facts()
        facts = self._facts
        framework_state, framework_function = self._framework_state, self._framework_function
        for chain in reads:
            name = chain[0]
            value = namespace.get(name)     # (checked through _done when the walk is remembered)
            # the same read in another code object of this module, with the same object there:
            # already handled, at this depth or a shallower one (which followed at least as far;
            # what it reads of the framework does not depend on the depth)
            key = (where, chain)
            found = done.get(key)
            framework = False       # a module of a package not watched (torch): _chain has nothing to do
            if found is not None and found[0] is value:
                if found[1] <= depth:
                    continue
            elif type(value) is module_type or isinstance(value, module_type):     # (so while it is the same object)
                if len(chain) > 1:      # (a module read alone reads no state nor function of it)
                    # _framework_state reads on from a (module, attribute) of state_reads, or a submodule
                    module = self._name(value)
                    if state_reads and ((module, chain[1]) in state_reads
                                        or isinstance(self._item(vars(value), chain[1]), module_type)):
                        framework_state(value, chain)
                    framework_function(value, chain[1:])
                    framework = str(module).partition(".")[0] in UNWATCHED
            elif state_reads and id(value) in readers:
                framework_state(value, chain)
            done[key] = (value, depth, namespace)     # (holding it: its id stays its own)
            fact = facts.get(id(value))
            if fact is None and len(chain) > 1:
                module = getattr(value, "__name__", MISSING)
                if checks is not None:
                    checks.append((_attr, value, "__name__", module))
                if module is not MISSING and module in _PROCESS_FACTS:
                    fact = _process_read(value, chain[1])   # (None for a module not in _PROCESS_FACTS)
            if fact is not None:
                self._note_process(fact)
            if len(chain) == 1:             # a plain global (most reads)
                self._global(namespace, name, depth)
            elif not framework:
                self._chain(namespace, name, list(chain[1:]), depth, origin=namespace)

    def note_framework_state(self, module, attribute):
        """Framework state the framework's own code reads around a model the function reached
        (Backend.model_state_reads): checked like state the function's code reads."""
        self._framework_state(module, (module.__name__, attribute))

    def _framework_state(self, value, chain):
        """`torch.get_num_threads()`, `torch.backends.mkldnn.enabled`, or a reader imported by name
        (`from torch import are_deterministic_algorithms_enabled`): framework state that no call
        shows, checked like a global."""
        found = self._state_readers.get(id(value))
        if found is not None:           # (module, attribute): its text is made only when it is read
            found = (found[0], f"{found[1][0]}.{found[1][1]}()")
        attributes = iter(chain[1:])
        while found is None and isinstance(value, types.ModuleType):
            attribute = next(attributes, None)
            if attribute is None:
                return
            module = self._name(value)
            key = (module, attribute)
            if key in self._state_reads:
                reader = self._state_reads[key] or self._item(vars(value), attribute)
                call = "()" if self._state_reads[key] is None else ""
                found = (reader, f"{module}.{attribute}{call}") if self._kind_of(reader) & _CALLABLE else None
                break
            value = self._item(vars(value), attribute)
        if found is not None:
            self._leaf(PythonReads._state, *found)

    def _state(self, reader, what):
        if id(reader) not in self.states:
            self.states[id(reader)] = (reader, what, read_state(reader))

    def _framework_function(self, module, attributes):
        """`jnp.sin` / `jax.nn.relu` read in user code: a function of a framework module (UNWATCHED,
        not the standard library), which a backend recording lower-level calls (JAX's primitives)
        does not name; replacing it after the trace must be seen (homes.function_homes)."""
        for i, attribute in enumerate(attributes):
            # (a module's __dict__ cannot be replaced; another object's can)
            space = vars(module) if isinstance(module, types.ModuleType) else self._seen(_vars, module)
            value = self._item(space, attribute)
            value = None if value is MISSING else value
            if value is None and i < len(attributes) - 1 and \
                    self._item(sys.modules, f"{self._name(module)}.{attribute}") is MISSING:
                # a submodule not imported yet (`torch.onnx`: torch imports it at its first use, in this
                # call): its function is recorded once the call has run (settle)
                self._submodules_later.append((module, attributes))
                return
            if not isinstance(value, types.ModuleType):
                break
            module = value
        else:
            return
        name = self._name(module)
        root = name.partition(".")[0]
        if root in UNWATCHED and root not in sys.stdlib_module_names and i == len(attributes) - 1 and \
                self._kind_of(value) & (_CALLABLE | _CLASS) == _CALLABLE:
            self.framework_functions[(name, attribute)] = value

    def _chain(self, space, name, attributes, depth, origin=None):
        """`name.attribute...` read in the namespace `space`: the global it ends at (through
        modules: config.SCALE), or the class attribute (Config.GAIN)."""
        while attributes:    # config.SCALE
            module = self._item(space, name)
            if not isinstance(module, types.ModuleType) or str(self._name(module)).partition(".")[0] in UNWATCHED:
                break
            space, name = vars(module), attributes.pop(0)
        if space is not origin or not attributes:
            self._global(space, name, depth)        # config.SCALE: a global of the module `config`
        holder = self._item(space, name) if attributes else None
        kind = self._kind_of(holder)
        if kind & (_CLASS | _ENUM) == _CLASS:     # Config.GAIN
            self._class_attribute(holder, attributes, depth)
        elif kind & _ENUM:
            self._enum_value(holder, attributes)
        elif kind & _FUNCTION:          # `helper.scale = 2.0` set on a function: a global of its __dict__
            attributes_of = self._seen(_attr, holder, "__dict__")
            value = self._seen(_get, attributes_of, attributes[0]) if isinstance(attributes_of, dict) else MISSING
            if value is not MISSING:
                self._global(attributes_of, attributes[0], depth)
                if self._kind_of(value) & (_FUNCTION | _CODE):     # `helper.impl = other` later: seen
                    self._class_code(holder, attributes_of, attributes[0], value)
        elif holder is not None and not kind & _CODE and depth < _CALLS:
            self._method_of(holder, attributes[0], depth)

    def _method_of(self, obj, name, depth):
        """`CONFIG.scale()`, `CONFIG.prop` on an object a global holds (its data attributes are
        checked as the global's): the method, property or class/static method its class defines
        is walked like a function called by name, its reads of `self` by name checked."""
        seen = self._seen
        cls = seen(_attr, obj, "__class__")
        for klass in seen(_attr, cls, "__mro__"):
            module = seen(_attr, klass, "__module__")
            if str("" if module is MISSING else module).partition(".")[0] in UNWATCHED:
                return
            namespace = self._class_namespace(klass)
            value = seen(_get, namespace, name)
            if value is MISSING:
                self._leaf(PythonReads._class_missing, namespace, name)     # (set on a subclass later)
                continue
            self._class_code(klass, namespace, name, value)     # (replaced on its class later)
            if type(value) is types.FunctionType:
                self._function(value, depth + 1)
                code = value.__code__
                if code.co_argcount and id(code) in self._watched:
                    self._bound(code, code.co_varnames[0], obj, self._kind_of(obj), depth + 1)
            elif type(value) in (property, functools.cached_property, classmethod, staticmethod):
                self.class_method(value, cls, depth + 1)
            return

    def settle(self):
        """After the function ran: the reads of modules it imported itself that were not imported
        before (a global it set in one of those is a change, seen only now)."""
        for level, name, attributes, namespace, depth in self._imports:
            if self._import(level, name, attributes, namespace, depth) and attributes[-1] == _STORED:
                self.late_write = f"global {attributes[-2]!r} of {name}"
        self._imports.clear()
        for module in self._held_modules.values():     # `MODS["cfg"].SCALE`: the names the code uses
            namespace = vars(module)
            for name in self.names_used(frozenset(namespace)):
                value = namespace[name]
                if type(value) is types.FunctionType:
                    self._held_function(value)
                elif not _is_code(value):
                    self._data_global(namespace, name, value)
        later, self._submodules_later = self._submodules_later, []
        for module, attributes in later:
            if f"{module.__name__}.{attributes[0]}" in sys.modules:
                self._framework_function(module, attributes)

    def _import(self, level, name, attributes, namespace, depth) -> bool:
        """`import name` (relative at `level`) then `name.attributes...` in code of `namespace`:
        handled if the module is imported (returns whether it is)."""
        seen = self._seen
        if level:
            package = seen(_get, namespace, "__package__")
            if package is MISSING or not package:
                module_name = seen(_get, namespace, "__name__")
                package = str("" if module_name is MISSING else module_name).rpartition(".")[0]
            try:
                name = importlib.util.resolve_name("." * level + name, package)
            except (ImportError, ValueError):
                return False
        module = seen(_get, sys.modules, name)
        if module is MISSING or module is None:
            return False
        if name.partition(".")[0] not in UNWATCHED:     # which module sys.modules holds is checked
            self.imported[name] = None                   # (homes.function_homes)
        seen(_kind, module), seen(_attr, module, "__name__")     # (what _process_read reads)
        self._module_reads(module, name, attributes[:-1] if attributes[-1] == _STORED else attributes, depth)
        return True

    def _module_reads(self, module, name, attributes, depth):
        """`module.attributes...` read in code, the module found by `import` in its body or in a
        closure variable: framework state and functions, or the global it ends at (cfg.SCALE)."""
        first, *rest = attributes
        self._note_process(_process_read(module, first))
        if self._state_reads:           # `from torch import are_deterministic_algorithms_enabled`
            self._framework_state(module, (name, first, *rest))
        self._framework_function(module, (first, *rest))     # `import jax.numpy as jnp` ... `jnp.sin`
        if name.partition(".")[0] not in UNWATCHED:
            self._chain(self._seen(_vars, module), first, rest, depth)

    def _global(self, namespace, name, depth):
        key = (id(namespace), name)
        if key in self.globals:
            # noted by a leaf (a class attribute _methods found): a remembered walk does this again,
            # its leaves may not note it then
            if self._leaves is not None:
                self._leaves.append((PythonReads._global, (namespace, name, depth)))
            return
        checks = self._checks       # (the reads noted inline: this runs for most globals)
        value = namespace.get(name, MISSING)
        if checks is not None:
            checks.append((_get, namespace, name, value))
        if value is MISSING:
            self.unbound[key] = (namespace, name)
            return              # a builtin, or a name the function stores later
        kind = self._kind_of(value)
        if not kind & (_FUNCTION | _CODE):     # (what _expect gives nothing for)
            self._leaf(PythonReads._data_global, namespace, name, value)
            return
        module = namespace.get("__name__", MISSING)
        if checks is not None:
            checks.append((_get, namespace, "__name__", module))
        if type(module) is str:     # a module's global (not a class attribute)
            self._code_global(module, namespace, name, value)
        if kind & _PARTIAL:
            self._partial(value, depth)     # `SCALED = partial(f, scale=2.0)`: its keywords change in place
        elif depth < _CALLS and kind & (_FUNCTION | _FOLLOWABLE):
            self._function(value, depth + 1)

    def _constructor(self, cls, depth):
        """`Net(2.0)` of a user class a global holds: its __init__, which may make no framework call
        (no stack shows it), is walked like a helper (`self.k = K`: K checked) and checked like a
        method (replaced on its class later). Not an exception class's (kornia's checks name theirs
        on paths the trace did not take: a raised one ends the call, no graph replays that)."""
        mro = self._seen(_attr, cls, "__mro__")
        if BaseException in mro:
            return
        for klass in mro:
            if not self._user_class(klass):
                return
            namespace = self._class_namespace(klass)
            init = self._seen(_get, namespace, "__init__")
            if init is MISSING:     # (one set on it later is not seen: no check per class without one)
                continue
            self._class_code(klass, namespace, "__init__", init)
            if type(init) is types.FunctionType:
                self._function(init, depth + 1)
                self._self_reads(cls, init.__code__, depth + 1)
            return

    def _self_reads(self, cls, code, depth):
        """What a method of `cls` run on an object made in the call (its __init__) reads of `self`
        by name, besides the attributes it sets: class attributes, checked as `cls.name` is, and
        the methods it calls (a dataclass's `__post_init__`), walked in turn."""
        if not code.co_argcount or depth >= _CALLS:
            return
        stored = {op.argval for op in dis.get_instructions(code) if op.opname == "STORE_ATTR"}
        for name in dict.fromkeys(chain[0] for chain in attribute_chains(code, code.co_varnames[0])):
            if name in stored:
                continue
            for klass in self._seen(_attr, cls, "__mro__"):
                if not self._user_class(klass):
                    break       # (an attribute another class's __init__ set: not the class's)
                value = self._seen(_get, self._class_namespace(klass), name)
                if value is MISSING:
                    continue
                self._class_attribute(cls, (name,), depth)
                value = value.fget if type(value) is property else value
                if type(value) is types.FunctionType and id(value.__code__) not in self._codes:
                    self._function(value, depth + 1)
                    self._self_reads(cls, value.__code__, depth + 1)
                break

    def _code_global(self, module, namespace, name, value):
        """A module global holding code the walk read (a helper, a class, `from torch import sin`):
        a graph checks it still holds that object (homes.function_homes; a test's monkeypatch
        after the trace is seen), the persistent cache that it names the same code."""
        self.code_values[(id(namespace), name)] = (namespace, name, value, module)

    @property
    def code_globals(self) -> set:
        """(module name, global name) of the module globals holding code that the walk read."""
        return {(module, name) for _, name, _, module in self.code_values.values()}

    def _class_code(self, klass, namespace, name, value):
        """A user class's attribute holding code the walk read or followed (`Config.get`, a method
        of an object a global holds), or a function's (`helper.impl`, `helper.__wrapped__` read
        by name; `klass` is then that function): checked like a module global holding code
        (_code_global)."""
        self.class_code[(id(namespace), name)] = (klass, name, value)

    def _data_global(self, namespace, name, value):
        key = (id(namespace), name)
        if key not in self.globals:
            self.globals[key] = (namespace, name, value, self._expect(value))

    def class_method(self, descriptor, cls, depth=1):
        """A classmethod, staticmethod or property (its getter) of `cls` reached through an object
        the trace records (`self.factor()`, `self.scale`): it runs as the object's code, but no
        stack shows it where it makes no framework call. Its globals are walked like those of a
        function called by name, and a classmethod's reads of its class (`cls.scale`) are checked
        like `Config.scale`. `depth`: calls below the trace's function."""
        fn = descriptor.fget if isinstance(descriptor, property) else \
            descriptor.func if isinstance(descriptor, functools.cached_property) else getattr(descriptor, "__func__", None)
        if not isinstance(fn, types.FunctionType):
            return
        self._function(fn, depth)
        code = fn.__code__
        if isinstance(descriptor, classmethod) and code.co_argcount:     # `cls.scale`
            self._bound(code, code.co_varnames[0], cls, _CLASS | _CODE, 1)

    def _class_attribute(self, cls, names, depth):
        """`Config.SCALE` (names: the attribute chain read on the class): checked in the namespace
        of each class of the MRO down to the one that defines it (absent from the ones before:
        setting it on a subclass later is seen too); `Config.Inner.SCALE` in the nested class in
        turn. Classes of the standard library, the frameworks and tools are not watched."""
        seen, name = self._seen, names[0]
        meta = seen(_attr, cls, "__class__")
        if meta is not type and self._user_class(meta):     # `Meta.GAIN`, a metaclass property or __getattr__
            self._leaf(PythonReads._methods, meta)
        for klass in seen(_attr, cls, "__mro__"):
            namespace = self._class_namespace(klass)
            value = seen(_get, namespace, name)
            if not self._user_class(klass):
                if value is MISSING:    # (abc.ABC, typing.Generic before a user base: looked past)
                    continue
                return
            if value is not MISSING:
                if klass is not cls:        # inherited: found elsewhere once `cls.__bases__` is set
                    self._leaf(PythonReads._mro, cls)
                kind = seen(_kind, value)
                if not kind & _CODE:
                    self._global(namespace, name, depth)
                    return
                self._class_code(klass, namespace, name, value)     # `Helpers.scale = other` later: seen
                if type(value) in (classmethod, staticmethod) and depth < _CALLS:
                    self.class_method(value, cls, depth + 1)      # `Config.get()`: what it reads (cls.k)
                elif kind & (_CLASS | _ENUM) == _CLASS and len(names) > 1:
                    self._class_attribute(value, names[1:], depth)     # `Config.Inner.SCALE`
                return
            self._leaf(PythonReads._class_missing, namespace, name)

    def _enum_value(self, cls, names):
        """`E.X.value.k` (names: the chain read on the enum class): a member's value is fixed, but a
        class or object held as one has attributes that are not; noted as one held by a container."""
        if len(names) < 3 or names[1] != "value":
            return
        members = self._seen(_attr, cls, "_member_map_")
        member = self._seen(_get, members, names[0]) if type(members) is dict else MISSING
        value = self._seen(_attr, member, "_value_")
        if value is not MISSING and type(value) not in _IMMUTABLE_ATOMS:     # (most: ints, strings)
            self._leaf(PythonReads._note_object, value)

    def _mro(self, cls):
        self.mros.setdefault(id(cls), (cls, _TYPE_MRO(cls)))

    def _user_class(self, klass) -> bool:
        """Whether a class is watched (not of the standard library, the frameworks or tools), noted."""
        module = self._seen(_attr, klass, "__module__")
        return str("" if module is MISSING else module).partition(".")[0] not in UNWATCHED

    def _class_namespace(self, klass):
        namespace = self._class_namespaces.get(klass)
        if namespace is None:       # vars() makes a new (live) mappingproxy each time: one per class
            namespace = self._class_namespaces[klass] = vars(klass)
        return namespace

    def _class_missing(self, namespace, name):
        self.unbound.setdefault((id(namespace), name), (namespace, name))    # (checked as unset globals are)

    def _expect(self, value):
        """(type, snapshot) a guard compares, or `nothing` for code (functions, classes, modules,
        decorated functions such as lru_cache wrappers and LazyGraphs)."""
        if _is_code(value):
            return self._nothing
        expected = self._snapshot(value)
        if expected is self._nothing or type(expected) is self._same:   # not _SameContents
            self._note_object(value)
            return _ANY, self._same(value), None     # identity (a stateful object's class is swapped meanwhile)
        self._reach_items(expected)            # a model held in a dict or list global is recorded too
        return type(value), expected, _zero_sign(value)

    def _reach_items(self, expected):
        for obj in self.held(expected):
            self._note_object(obj)

    def _note_object(self, obj):
        """An object with attributes (a config object, a callable transform): its attributes are
        guarded too, data by value and objects among them by identity, and so in turn the objects
        it holds, by attribute or in its dicts, lists and tuples, at any depth (CONFIG.model.scale,
        CONFIG.layers["a"].k). Not objects of the standard library (a threading.Event ...) besides
        namespaces, nor objects the trace records itself (stateful ones, models). A random
        generator the trace does not record has its state noted (`drawn`). An object's class is
        among its attributes (`obj.__class__ = Other`), `__slots__` entries too; a class held
        has its metaclass's reads noted as well, a partial or static method held its function's
        and arguments', a module held (`MODS["cfg"].SCALE`) the globals of it the code names
        (settle)."""
        pending = [obj]
        for obj in pending:             # (breadth first, no recursion: a linked list may be long)
            pending += self._note_one(obj)

    def _note_one(self, obj):
        """_note_object of one object: the objects it holds, to note in turn."""
        if type(obj) is contextvars.ContextVar:     # `SCALE.get()`: its value, read at each call
            if id(obj) not in self.contexts:
                kind, value, _ = read_context(obj)
                expected = self._expect(value) if value is not MISSING else (kind, value, None)
                if expected is self._nothing:       # a function held: by identity
                    expected = (_ANY, self._same(value), None)
                if kind is MISSING:                 # its default: set to anything later is a change
                    expected = (MISSING, *expected[1:])
                self.contexts[id(obj)] = (obj, expected)
            return ()
        if id(obj) not in self.generators:
            state = self._generator_state(obj)
            if state is not None:
                self.generators[id(obj)] = (obj, state)
                return ()
        self.note_structure(self._record(obj))      # a model: its parameters, submodules, hooks ...
        tp = type(obj)
        if tp is types.FunctionType or tp is types.MethodType:
            return self._held_function(obj)
        # (`__next__` as next() finds it: in the namespaces of the type's MRO, not through a
        # metaclass __getattr__ answering every name)
        if any("__next__" in vars(k) for k in _TYPE_MRO(tp)) and not isinstance(obj, io.IOBase) \
                and not self._known(obj):
            self.iterators[id(obj)] = (obj, _position(obj))     # `next(IT)`, a generator: see `iterator`
            return ()
        if isinstance(obj, type) and not issubclass(obj, enum.Enum):
            self._methods(obj)      # a class held by an object or a container (`cfg.klass.GAIN`)
            if tp is not type and self._user_class(tp):
                self._methods(tp)   # its metaclass: `REGISTRY["a"].GAIN` set there, a metaclass property
            return ()
        if tp is functools.partial:     # `OPS["s"] = partial(f, k=2.0)`: its arguments, what f reads
            self._partial_arguments(obj)
            return [obj.func, *(value for value in (*obj.args, *obj.keywords.values())
                                if type(value) not in _IMMUTABLE_ATOMS)]
        if tp is staticmethod or tp is classmethod:
            return [obj.__func__]
        if tp is frozenset:     # `{A, B}` checked by identity (fixed items): the classes and objects in it
            return [value for value in obj if type(value) not in _IMMUTABLE_ATOMS]
        if isinstance(obj, types.ModuleType):   # `MODS["cfg"].SCALE`: the globals the code names, after it ran
            if str(getattr(obj, "__name__", "")).partition(".")[0] not in UNWATCHED:
                self._held_modules[id(obj)] = obj
            return ()
        if (id(obj) in self.objects or self._known(obj) or _is_code(obj)
                or not (instance_dict(obj) is not None or dataclasses.is_dataclass(obj) or _slots(tp))
                or tp.__module__.partition(".")[0] in UNWATCHED and tp not in _NAMESPACES):
            return ()
        self._methods(tp)
        try:
            attributes = _attributes(obj)
        except TypeError:
            return ()
        snapshot = self._snapshot(attributes)
        if snapshot is self._nothing:
            return ()
        self.objects[id(obj)] = (obj, snapshot)
        return [value for value in self.held(snapshot) if not _is_code(value) or isinstance(value, (type, types.ModuleType))
                or type(value) in _HELD_CODE]

    def note_structure(self, containers):
        """Check the containers of a model's structure (its parameters, submodules, hooks ...)
        item by item, as those of a model the code reaches by itself are."""
        for container in containers:
            self.objects[id(container)] = (container, self._snapshot(dict(container)))

    def _methods(self, cls):
        """The class of an object the code reached (a global, an object in a global list,
        `HANDLERS[0].scale()`, many levels down). Its data attributes (`k = 2.0` in the class
        body, read as `obj.k`) are checked like `Config.k`, in each class of the MRO down to the
        one defining it. Its methods, properties and class/static methods make no framework call
        where no stack shows them, so what they read is checked like the function's own reads:
        module globals holding data (`FACTOR`, `config.SCALE`), class attributes (`Config.GAIN`)
        and framework state read in Python (`CONFIG.use_mkldnn()` returning
        `torch.backends.mkldnn.enabled`), and so for the functions they call by global name
        (_held_function, _CALLS deep). Classes of the standard library, the frameworks and tools
        are not read."""
        if cls in self._method_classes:
            return
        self._method_classes.add(cls)
        above = []          # the namespaces of the classes before, in the MRO
        for klass in cls.__mro__:
            if str(getattr(klass, "__module__", "")).partition(".")[0] in UNWATCHED:
                continue
            namespace = self._class_namespace(klass)
            for name, member in list(namespace.items()):
                func = getattr(member, "fget", None) or getattr(member, "__func__", None) or \
                    getattr(member, "func", member)         # property, class/static method, cached_property
                code = getattr(func, "__code__", None)
                if isinstance(code, types.CodeType) and isinstance(getattr(func, "__globals__", None), dict):
                    self._class_code(klass, namespace, name, member)    # (replaced on its class later)
                    self._method_codes.append(code)
                    self._method_reads(code, func.__globals__)
                elif isinstance(member, type) and not issubclass(member, enum.Enum):
                    self._class_code(klass, namespace, name, member)
                    self._methods(member)       # a nested class: `self.Inner.SCALE`
                elif not _is_code(member) and not (name.startswith("__") and name.endswith("__")):
                    for space in above:                 # set on a subclass later: seen
                        if name not in space:
                            self._class_missing(space, name)
                    self._data_global(namespace, name, member)
            above.append(namespace)

    def _held_function(self, fn, depth=0):
        """A function held in a dict, a list or an object's attribute (`OPS["scale"]()`): replacing
        it is seen by the check of its holder; what it reads (module globals, class attributes,
        framework state, its closure variables holding data) is checked like a method's (_methods),
        and so in turn for the functions it calls by global name. A bound method: its object is
        noted too (returned)."""
        owner = fn.__self__ if type(fn) is types.MethodType else None
        fn = fn.__func__ if owner is not None else fn
        if type(fn) is not types.FunctionType or id(fn) in self._held_functions or \
                str(fn.__globals__.get("__name__", "")).partition(".")[0] in UNWATCHED:
            return () if owner is None else [owner]
        code = fn.__code__
        self._held_functions[id(fn)] = fn
        self._method_codes.append(code)
        self._method_reads(code, fn.__globals__, depth)
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            value = _cell(cell, None)
            if value is not MISSING and not _is_code(value):
                self._closure_variable(cell, name, value)
        return () if owner is None else [owner]

    def _method_reads(self, code, namespace, depth=0):
        """What the code of a method or held function (and the code nested in it) reads by name in
        `namespace`: framework state, data globals (through modules: config.SCALE), class
        attributes, and what the functions it names read in turn (_held_function, _CALLS deep)."""
        _, reads, nested, _, _ = code_info(code)
        for chain in reads:
            value = namespace.get(chain[0], MISSING)
            if self._state_reads:
                self._framework_state(value, chain)
            space, name, rest = namespace, chain[0], list(chain[1:])
            while rest and isinstance(value, types.ModuleType) and \
                    str(self._name(value)).partition(".")[0] not in UNWATCHED:      # config.SCALE
                space, name = vars(value), rest.pop(0)
                value = space.get(name, MISSING)
            kind = self._kind_of(value) if value is not MISSING else _CODE
            if not kind & (_FUNCTION | _CODE):
                self._data_global(space, name, value)
                continue
            if value is not MISSING and (not rest or kind & _CLASS):    # a helper, a class it names
                module = space.get("__name__", MISSING)
                if type(module) is str:
                    self._code_global(module, space, name, value)
            if rest and kind & (_CLASS | _ENUM) == _CLASS:
                self._class_attribute(value, rest, _CALLS)
            elif not rest and type(value) is types.FunctionType and depth < _CALLS:
                self._held_function(value, depth + 1)      # a helper it calls: `return helper()`
        for const in nested:
            self._method_reads(const, namespace, depth)

    # ---- after the trace ---------------------------------------------------------------
    def names_used(self, names: frozenset, methods: bool = True) -> set:
        """Those of `names` that the watched code (the function's own, not the frameworks', and
        with `methods` every method of the objects it reached) uses as an attribute or a global name."""
        codes = [self._codes[i] for i in self._watched] + (self._method_codes if methods else [])
        return set(names).intersection(itertools.chain.from_iterable(map(_CO_NAMES, codes)))     # (in C)

    def builtins_used(self, names: frozenset) -> frozenset:
        """Those of `names` that the watched code reads as globals its module does not set (builtins),
        other than in calls whose result it drops (`hash(shape)` in a `try`, einops' test that a
        shape is hashable: only whether it raises counts, and that depends on the types alone)."""
        used = names.intersection([name for space, name in self.unbound.values() if type(space) is dict]) \
            if self.unbound else ()
        codes = [self._codes[i] for i in self._watched] if used else ()
        return frozenset(name for name in used if any(_result_used(code, name) for code in codes))

    def changed(self) -> str | None:
        """What the function itself changed among the values read, if anything."""
        if self.late_write is not None:
            return self.late_write
        for namespace, name, value, expected in self.globals.values():
            if _differs(expected, read_global(namespace, name)):
                return f"global {name!r} of {namespace.get('__name__', '?')}"
        for namespace, name in self.unbound.values():
            if name in namespace:
                return f"global {name!r} of {namespace.get('__name__', '?')}"
        for namespace, name, value, _ in self.code_values.values():
            if namespace.get(name, MISSING) is not value:
                return f"global {name!r} of {namespace.get('__name__', '?')}"
        for klass, name, value in self.class_code.values():
            if vars(klass).get(name, MISSING) is not value:
                return f"attribute {name!r} of the class {klass.__qualname__}"
        for cell, name, value, expected in self.cells:
            if _differs(expected, read_cell(cell)):
                return f"closure variable {name!r}"
        for obj, expected in self.objects.values():
            if not self._known(obj) and _differs(expected, read_attributes(obj)):
                return f"an attribute of {type(obj).__name__} object"
        for fn, expected in self.defaults:
            if _differs(expected, read_defaults(fn)):
                return f"default values of {_callable_name(fn)}"
        for reader, what, expected in self.states.values():
            if _differs(expected, read_state(reader)):
                return f"framework state {what}"
        for var, expected in self.contexts.values():
            if _differs(expected, read_context(var)):
                return f"context variable {var.name!r}"
        return None

    def iterator(self, ran: bool) -> str | None:
        """An iterator the function reaches by itself (a global, a closure variable, one an object
        holds) that it may have advanced: `next(IT)` gives another item at each eager call, and
        where it stands is nothing a guard checks. Before the function ran (`ran` false): one whose
        position cannot be read (a user class's); after: also one whose position moved (a
        generator's frame, a builtin iterator's `__reduce__` state)."""
        for obj, position in self.iterators.values():
            if not self._known(obj) and (position is None or ran and _position(obj) != position):
                return f"a {type(obj).__name__} it reaches by itself (a global, a closure variable)"
        return None

    def drawn(self) -> str | None:
        """Which random generator reached by the function (not passed in) it drew from, if any: a
        graph would repeat the draws of its trace."""
        for obj, state in self.generators.values():
            if not self._known(obj) and self._generator_state(obj) != state:
                return f"a {type(obj).__name__} it reaches by itself (a global, a closure variable)"
        return None

    def reached(self) -> set:
        """ids of the objects guarded by identity (arrays held by globals, closures, containers)."""
        if not (self.globals or self.cells or self.objects or self.defaults or self.contexts):
            return set()            # (a function that read no data: most small ones)
        snapshots = [e[-1] for e in self.globals.values()] + [e[-1] for e in self.cells] + \
            [e[-1] for e in self.objects.values()] + [e[-1] for e in self.defaults] + \
            [e[-1] for e in self.contexts.values()]
        return {id(obj) for expected in snapshots for obj in self.held(expected)}

    def held(self, expected):
        """The objects a snapshot checks by identity."""
        if isinstance(expected, self._same):
            yield expected.obj
        elif isinstance(expected, (tuple, list, dict)):
            for x in expected.values() if isinstance(expected, dict) else expected:
                yield from self.held(x)

    def guards(self):
        """(reader, arguments, expected, what the object read is) for each guard, objects'
        attributes after their identity."""
        classes = {id(namespace): cls for cls, namespace in self._class_namespaces.items()}

        def where(namespace):       # (a class's: the name its stored form has, persist/codec.py)
            cls = classes.get(id(namespace))
            return f"globals of {namespace.get('__name__', '?')}" if cls is None else \
                f"class {cls.__module__}:{cls.__qualname__}"
        for namespace, name, value, expected in self.globals.values():
            yield read_global, (namespace, name), expected, where(namespace)
        for cell, name, value, expected in self.cells:
            yield read_cell, (cell,), expected, f"closure variable {name}"
        for obj, expected in self.objects.values():
            if not self._known(obj):        # recorded by the trace itself meanwhile
                yield read_attributes, (obj,), expected, f"{type(obj).__name__} object"
        for fn, expected in self.defaults:
            yield read_defaults, (fn,), expected, f"defaults of {_callable_name(fn)}"
        unset: dict = {}        # id(namespace) -> (namespace, names): one check per module
        for namespace, name in self.unbound.values():
            unset.setdefault(id(namespace), (namespace, set()))[1].add(name)
        for namespace, names in unset.values():
            yield read_unbound, (namespace, frozenset(names)), True, where(namespace)
        for cls, mro in self.mros.values():
            yield read_mro, (cls,), mro, f"class {cls.__module__}:{cls.__qualname__}"
        for reader, what, expected in self.states.values():
            yield read_state, (reader,), expected, what
        for var, expected in self.contexts.values():
            yield read_context, (var,), expected, f"context variable {var.name}"


from . import handlers as _handlers  # noqa: E402  (last: handlers imports UNWATCHED from this module)

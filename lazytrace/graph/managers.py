"""Which context manager a `with` block holds, read from the instructions that compute it (a name
or an attribute chain, called or not: `contextlib.suppress(E)`, `torch.no_grad()`, `self.lock`) and
looked up in the frame when a call is made without running code of the user's, and whether it may
swallow an error (handlers.py asks): a manager that cannot be found, or whose `__exit__` may return
a true value or acts on the error path, counts as swallowing."""
from __future__ import annotations

import builtins
import contextlib
import dis
import functools
import inspect
import io
import threading
import types
import weakref
from typing import NamedTuple

from .reads import UNWATCHED


#: (id(manager class or factory function), whether called) -> (a weak reference to it, whether what
#: it makes may swallow an error): by identity (hashing a class may run its metaclass's code), not keeping it alive
_SWALLOWS: dict = {}


def bounded(cache: dict, key, value):
    if len(cache) >= 4096:
        cache.clear()
    cache[key] = value
    return value


#: exceptions framework calls raise for what a signature's key fixes (types, not values): an
#: except clause naming only these cannot take an exception a replay raised where the trace did not
KEYED_ERRORS = frozenset({"TypeError", "AttributeError", "KeyError", "NameError", "ImportError",
                           "ModuleNotFoundError", "NotImplementedError", "StopIteration", "builtins"})


def may_act(ins) -> bool:
    """Whether instruction `ins` may make a framework call (a call, `t[i] = v`, `t.attr = v`,
    `t += 1`): what code on the error path does that a graph could replay on the normal path only."""
    return ins.opname in _ACTING or ins.opname == "BINARY_OP" and ins.argrepr.endswith("=")


_ACTING = frozenset({"CALL", "CALL_KW", "CALL_FUNCTION_EX", "STORE_SUBSCR", "DELETE_SUBSCR", "STORE_ATTR",
                     "DELETE_ATTR"})


class Manager(NamedTuple):
    """A with block's manager as its code computes it: `scope` ('local', 'global' or 'name', as
    the first name is loaded), `name`, then attributes read in turn, then called or not (with
    `arg_names` where the arguments are global names only: `contextlib.suppress(TypeError)`)."""
    scope: str
    name: str
    attrs: tuple
    called: bool
    arg_names: tuple | None


_NAME_LOADS = {"LOAD_FAST": "local", "LOAD_FAST_CHECK": "local", "LOAD_DEREF": "local",
               "LOAD_CLASSDEREF": "local", "LOAD_GLOBAL": "global", "LOAD_NAME": "name"}
_CALL_STEPS = ("PRECALL", "KW_NAMES")


def expression(ops, end) -> Manager | None:
    """The value the instructions before `ops[end]` leave for it, where they are a name or an
    attribute chain, called or not; None for any other expression (or one with jumps)."""
    if ops[end].is_jump_target:
        return None
    need, start = 1, end
    while need > 0:
        start -= 1
        ins = ops[start] if start >= 0 else None
        if ins is None or ins.opcode in _JUMPS:
            return None
        need -= _effect(ins)
        if ins.is_jump_target and need > 0:
            return None                         # (only the expression's first instruction may be one)
    if need:
        return None
    part = ops[start:end]
    first = 1 if part[0].opname == "PUSH_NULL" else 0
    if first >= len(part) or part[first].opname not in _NAME_LOADS:
        return None
    index = first + 1
    while index < len(part) and part[index].opname in ("LOAD_ATTR", "LOAD_METHOD"):
        index += 1
    base, attrs = part[first], tuple(ins.argval for ins in part[first + 1:index])
    rest = part[index:]
    if not rest:
        return None if first else Manager(_NAME_LOADS[base.opname], base.argval, attrs, False, None)
    if rest[0].opname == "PUSH_NULL" and not first:
        rest = rest[1:]                         # (3.13: the NULL after the callable)
    call, rest = rest[-1], rest[:-1]
    while rest and rest[-1].opname in _CALL_STEPS:
        rest = rest[:-1]                        # (the call's own PRECALL, KW_NAMES)
    if call.opname not in ("CALL", "CALL_KW") or sum(map(_effect, rest)) != call.arg + (call.opname == "CALL_KW"):
        return None
    depth = 0
    for ins in rest:                            # (the arguments never take the callable: `f(x)(y)`)
        depth += _effect(ins)
        if depth < 0:
            return None
    names = all(ins.opname == "LOAD_GLOBAL" and _effect(ins) == 1 for ins in rest) \
        and not any(ins.opname == "KW_NAMES" for ins in part) and call.opname == "CALL"
    return Manager(_NAME_LOADS[base.opname], base.argval, attrs, True,
                    tuple(ins.argval for ins in rest) if names else None)


_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)


def _effect(ins) -> int:
    try:
        return dis.stack_effect(ins.opcode, ins.arg, jump=False)
    except ValueError:                          # (not understood: no expression of ours)
        return 1 << 20


class _Scope(NamedTuple):
    """The names a function's code reads, where no frame of it is at hand (no locals)."""
    f_locals: None
    f_globals: dict
    f_builtins: dict


_UNKNOWN = object()


def _lookup(scope: str, name: str, frame):
    """The value `name` of `scope` ('global', 'name', or 'local' or 'decorating': only the frame's
    locals) has in `frame` (or a _Scope)."""
    if scope != "global":
        local = frame.f_locals
        if local is not None and type(local) is not dict:
            return _UNKNOWN                     # (a class body's namespace from __prepare__: user code)
        if local is not None and name in local:
            return local[name]
        if scope != "name":
            return _UNKNOWN
    value = frame.f_globals.get(name, _UNKNOWN)
    return frame.f_builtins.get(name, _UNKNOWN) if value is _UNKNOWN else value


def swallows_safely(manager: Manager | None, frame) -> bool:
    try:
        return _swallows(manager, frame)
    except Exception:                           # (a manager not understood counts: the trace goes on)
        return True


def _swallows(manager: Manager | None, frame) -> bool:
    """Whether the manager a with block computes as `manager` may swallow an error (True where
    it cannot be found without running code: a property, an unknown local). `frame`: where the
    block runs (a frame, or a `_Scope`)."""
    if manager is None:
        return True
    value = _lookup(manager.scope, manager.name, frame)
    if value is _UNKNOWN:
        return True
    for attr in manager.attrs:
        value = _static_attr(value, attr)
        if value is _UNKNOWN:
            return True
    if manager.scope == "decorating":         # (contextlib's with block: ContextDecorator.__call__)
        recreate = inspect.getattr_static(type(value), "_recreate_cm", None)
        return not any(recreate is known for known in _RECREATING) or _value_swallows(value)
    if not manager.called:
        return _value_swallows(value)
    if value is contextlib.suppress and manager.arg_names is not None:
        return not all(id(_lookup("global", name, frame)) in _KEYED_IDS for name in manager.arg_names)
    return _made_swallows(value, called=True)


def _static_attr(obj, name):
    """`obj.name` where reading it runs no code of the object's (a property gives _UNKNOWN)."""
    if type(obj) is types.ModuleType:
        return obj.__dict__.get(name, _UNKNOWN)      # (a module's __getattr__ runs code)
    try:
        value = inspect.getattr_static(obj, name)
    except AttributeError:
        return _UNKNOWN
    kind = type(value)                          # (not isinstance(): it may read `__class__`)
    if kind is types.FunctionType or _is_class(value):
        return value
    if kind is types.MemberDescriptorType and not _is_class(obj):
        try:                                    # (a `__slots__` entry: read from the object, in C)
            return value.__get__(obj, type(obj))
        except AttributeError:
            return _UNKNOWN
    if kind is staticmethod or kind is classmethod:
        return value.__func__
    return _UNKNOWN if any("__get__" in _DICT(k) for k in _MRO(kind)) else value


_MRO = type.__dict__["__mro__"].__get__     # (a class's own, whatever its metaclass defines)
_DICT = type.__dict__["__dict__"].__get__


def _is_class(obj) -> bool:
    return issubclass(type(obj), type)          # (not isinstance(): it may read `__class__`)


def _value_swallows(obj) -> bool:
    kind = type(obj)
    if any(k is contextlib._GeneratorContextManager for k in _MRO(kind)) and \
            inspect.getattr_static(kind, "__exit__", None) is contextlib._GeneratorContextManager.__exit__:
        return _made_swallows(inspect.getattr_static(obj, "func", None))
    return _made_swallows(kind)


def _made_swallows(maker, called=False) -> bool:
    """Whether the manager `maker()` makes (or a `maker` instance, for a class not `called`) may
    swallow."""
    if type(maker) is not types.FunctionType and not _is_class(maker):
        return id(maker) not in _reraising_exits()  # (a callable object, a C function: not read)
    key = (id(maker), called)
    known = _SWALLOWS.get(key)
    if known is not None and known[0]() is maker:
        return known[1]
    reference = weakref.ref(maker)
    _SWALLOWS[key] = (reference, True)          # (a cycle counts as swallowing)
    answer = _classify(maker) or called and _is_class(maker) and not _makes_its_own(maker)
    return bounded(_SWALLOWS, key, (reference, answer))[1]


def _classify(maker) -> bool:
    if id(maker) in _reraising_exits():
        return False
    if _is_class(maker):
        exit_ = inspect.getattr_static(maker, "__exit__", None)
        if id(exit_) in _reraising_exits():
            return False
        return not (type(exit_) is types.FunctionType and _returns_false(exit_))
    if maker.__code__ is _CONTEXTMANAGER_CODE:
        return _made_swallows(maker.__wrapped__)
    if maker.__code__.co_flags & inspect.CO_GENERATOR:
        return _generator_swallows(maker)       # (the generator a @contextmanager wraps)
    return bool(maker.__code__.co_flags & _NOT_PLAIN) or _returns_swallowing(maker)


_NOT_PLAIN = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
_CONTEXTMANAGER_CODE = contextlib.contextmanager(lambda: None).__code__


def _returns_false(exit_) -> bool:
    """Whether every return of function `exit_` returns None or False and, in the user's code, it
    raises no exception of its own (an `__exit__` that never swallows nor replaces the error: as
    an except clause raising another, that changes what the caller gets; the frameworks' and
    Python's raise theirs for misuse: `catch_warnings` not entered)."""
    code = exit_.__code__
    if code.co_flags & _NOT_PLAIN:
        return False
    ops = list(dis.get_instructions(code))
    users = _module_of(exit_) not in UNWATCHED
    for index, ins in enumerate(ops):
        if users and (ins.opname == "RAISE_VARARGS" and ins.arg or may_act(ins)):
            return False        # (or a call of the user's: a replay that raised would skip it)
        if ins.opname == "RETURN_CONST":
            value = ins.argval
        elif ins.opname == "RETURN_VALUE":
            before = ops[index - 1] if index else None
            if ins.is_jump_target or before is None or before.opname != "LOAD_CONST":
                return False
            value = before.argval
        else:
            continue
        if value is not None and value is not False:
            return False
    return True


def _returns_swallowing(factory) -> bool:
    """Whether a function that returns context managers (`return nullcontext()`, `return
    torch.autocast(...)`) may return one that swallows, read from what each return computes."""
    ops = list(dis.get_instructions(factory.__code__))
    scope = _function_scope(factory)
    returns = [index for index, ins in enumerate(ops) if ins.opname in ("RETURN_VALUE", "RETURN_CONST")]
    return any(ops[i].opname == "RETURN_CONST" or _swallows(expression(ops, i), scope) for i in returns)


def _generator_swallows(func) -> bool:
    """Whether a `@contextlib.contextmanager` generator may swallow the error thrown in at its
    yield: an except clause (or a with block that may swallow) around the yield takes it, and the
    generator then ends (or yields again: an error of contextlib's own); or it delegates (`yield
    from`: the generator it reads from is not known)."""
    code = func.__code__
    ops = list(dis.get_instructions(code))
    if any(ins.opname == "SEND" for ins in ops):
        return True
    yields = [ins.offset for ins in ops if ins.opname == "YIELD_VALUE"]
    scope = _function_scope(func)
    from .handlers import handler_table
    for start, end, caught in handler_table(code, _module_of(func) not in UNWATCHED):
        if any(start <= offset < end for offset in yields):
            if caught is True or any(_swallows(manager, scope) for manager in caught):
                return True
    return False


def _function_scope(func) -> _Scope:
    return _Scope(None, func.__globals__, func.__builtins__)


def _makes_its_own(cls) -> bool:
    """Whether calling class `cls` makes an instance of it as `object.__new__` does: no `__new__`
    or metaclass `__call__` of the user's (which may return another manager; the frameworks' and
    Python's own are trusted)."""
    new = inspect.getattr_static(cls, "__new__", None)
    call = inspect.getattr_static(type(cls), "__call__", None)
    return not any(type(f) is types.FunctionType and _module_of(f) not in UNWATCHED
                   for f in (getattr(new, "__func__", new) if type(new) is staticmethod else new, call))


def _module_of(func) -> str:
    return str(func.__globals__.get("__name__", "")).partition(".")[0]


def _reraising_exits() -> frozenset:
    """The ids of the context manager types (and factories) known never to swallow whose
    `__exit__` cannot be read (written in C), and of their `__exit__` methods, so that subclasses
    keeping it count: Python's locks, and each framework in use's own (its backend's
    `reraising_managers`); by id, as comparing objects may run their code (they are held by
    their modules)."""
    from ..backends import available
    return _reraising_ids(tuple(available()))


@functools.lru_cache(maxsize=8)
def _reraising_ids(frameworks: tuple) -> frozenset:
    from ..backends import get_backend
    makers = _GENERAL_MANAGERS + tuple(m for name in frameworks for m in get_backend(name).reraising_managers)
    exits = [inspect.getattr_static(m, "__exit__", None) for m in makers if _is_class(m)]
    return frozenset(map(id, makers + tuple(e for e in exits if e is not None)))


_GENERAL_MANAGERS = (type(threading.Lock()), type(threading.RLock()), threading.Condition,
                     threading.Lock, threading.RLock, open, io.IOBase)


#: the builtin exceptions `except` / `suppress` may name without taking what a replay could raise
_KEYED_IDS = frozenset(id(getattr(builtins, name)) for name in KEYED_ERRORS if name != "builtins")
#: the code of contextlib's `ContextDecorator.__call__.<locals>.inner` (`with self._recreate_cm():
#: return func(...)`), and the manager it holds: its `self`, recreated as it was (the same class,
#: the same @contextmanager function)
DECORATED_CODE = next(c for c in contextlib.ContextDecorator.__call__.__code__.co_consts
                       if isinstance(c, types.CodeType) and c.co_name == "inner")
DECORATING = Manager("decorating", "self", (), False, None)
_RECREATING = (contextlib.ContextDecorator._recreate_cm, contextlib._GeneratorContextManager._recreate_cm)

"""Recording attribute reads and writes of stateful objects during a trace.

An object passed as an argument (arg_stateful_idxs / kwarg_stateful_idxs) is
handed to the function inside a wrapt proxy. An object the function reaches
by itself (stateful=[...]) cannot be swapped for a proxy, so for the length of
the trace its class is replaced by a recording subclass, restored afterwards;
the subclass records only for the sessions recording the object (traces overlapping in several threads share one swap), so other threads
see plain attribute access.
"""
from __future__ import annotations

import dis
import functools
import sys
import threading
from contextlib import contextmanager
from types import FunctionType, MemberDescriptorType, MethodType

import wrapt

from .reads import MISSING, UNWATCHED


def read_attribute(obj, name: str):
    """What a graph's guard reads from a stateful object: the attribute, or MISSING where it has
    none (then the guard fails, as it does for another value)."""
    return getattr(obj, name, MISSING)


def _describe_read(node) -> str:
    owner = getattr(node.args[0], "meta", None)
    found = "had no such attribute" if getattr(node.expected, "obj", None) is MISSING else f"was {node.expected!r}"
    return (f"attribute {node.args[1]!r} of {'the ' + owner if isinstance(owner, str) else 'a'} stateful object "
            f"{found} when traced and is something else now")


read_attribute.describe = _describe_read


def read_class_attribute(obj, name: str):
    """What a graph's guard reads for a property or other descriptor of a stateful object's class
    (`self.factor` of `factor = property(...)`): the object found for `name` on the class, as
    Python finds it (an attribute set on the object hides one that is not a data descriptor)."""
    for klass in type(obj).__mro__:
        found = klass.__dict__.get(name, MISSING)
        if found is not MISSING:
            if not hasattr(type(found), "__set__"):
                return getattr(obj, "__dict__", _NO_DICT).get(name, found)
            return found
    return MISSING


_NO_DICT: dict = {}


def read_instance_item(obj, key: str):
    """What a guard reads for `vars(obj).get(key)`, `obj.__dict__[key]`: the object's own entry
    (not a class attribute), or MISSING."""
    return getattr(obj, "__dict__", _NO_DICT).get(key, MISSING)


def read_instance_dict(obj) -> dict:
    """What a guard reads where the code used the object's whole __dict__ (`vars(obj).items()`)."""
    return dict(getattr(obj, "__dict__", _NO_DICT))


read_instance_item.describe = lambda node: (f"the entry {node.args[1]!r} of the __dict__ of a stateful object "
                                            f"changed")
read_instance_dict.describe = lambda node: "the __dict__ of a stateful object, read whole, changed"

#: (id(code), offset) -> the key the instruction after a read of `__dict__` at `offset` looks up
#: (`.get('k' ...)`, `['k']`), or None (the dict is used otherwise)
_DICT_KEYS: dict = {}
_SIMPLE_LOADS = frozenset({"LOAD_CONST", "LOAD_FAST", "LOAD_DEREF", "LOAD_GLOBAL", "LOAD_NAME"})


def dict_key_read(code, offset: int):
    """The key a code object reads from the __dict__ it got at `offset` (the instruction that read
    `__dict__`: `obj.__dict__`, or a call of `vars(obj)`), when it only looks one literal key up:
    `.get('k')`, `.get('k', default)` with a plain default, `['k']`. None otherwise."""
    entry = _DICT_KEYS.get((id(code), offset), _NO_DICT)
    if entry is not _NO_DICT and entry[0] is code:
        return entry[1]
    key = None
    instructions = [i for i in dis.get_instructions(code) if i.opname not in ("CACHE", "PRECALL", "PUSH_NULL")]
    at = next((n for n, ins in enumerate(instructions) if ins.offset == offset), None)
    following = instructions[at + 1:at + 5] if at is not None else []
    names = [ins.opname for ins in following]
    if names[:2] == ["LOAD_CONST", "BINARY_SUBSCR"] and type(following[0].argval) is str:
        key = following[0].argval
    elif len(names) >= 3 and names[0] in ("LOAD_METHOD", "LOAD_ATTR") and following[0].argval == "get" and \
            names[1] == "LOAD_CONST" and type(following[1].argval) is str:
        if names[2] == "CALL" and following[2].arg == 1 or \
                len(names) == 4 and names[2] in _SIMPLE_LOADS and names[3] == "CALL" and following[3].arg == 2:
            key = following[1].argval
    if len(_DICT_KEYS) > 4096:
        _DICT_KEYS.clear()
    _DICT_KEYS[(id(code), offset)] = (code, key)
    return key
read_class_attribute.describe = lambda node: (f"the class attribute {node.args[1]!r} of a stateful object (a "
                                              f"property or other descriptor) was replaced")


class SessionProxy(wrapt.ObjectProxy):
    """A proxy handed to a traced function in place of an object; attribute reads that the
    object itself does not answer on the proxy go to `_self_attribute(name)`."""

    def __init__(self, wrapped, session):
        super().__init__(wrapped)
        self._self_session = session

    def __getattr__(self, name):
        if name.startswith("_self_"):
            raise AttributeError(name)
        return self._self_attribute(name)

    def _self_attribute(self, name):
        return getattr(self.__wrapped__, name)


class CallRecordingProxy(SessionProxy):
    """Stands in for a live object argument (an RNG generator): calls of its public methods are
    reported to the session as calls, with the proxy as first argument (random draws become
    generator nodes)."""

    def _self_attribute(self, name):
        method = getattr(type(self.__wrapped__), name, None)
        if callable(method) and not name.startswith("_"):
            return functools.partial(_record_call, self, method)
        return getattr(self.__wrapped__, name)


def _record_call(proxy, method, *args, **kwargs):
    return proxy._self_session.on_call(method, (proxy,) + args, kwargs)


class StatefulProxy(SessionProxy):
    """Forwards everything to the object; reports attribute reads and writes."""

    def _self_attribute(self, name):
        wrapped = self.__wrapped__
        try:
            value = getattr(wrapped, name)
        except AttributeError:
            self._self_session.on_missing_attribute(wrapped, name)
            raise
        if isinstance(value, MethodType) and value.__self__ is wrapped:
            return MethodType(value.__func__, self)     # a method's own reads are recorded too
        return self._self_session.on_getattr(wrapped, name, value)

    def __setattr__(self, name, value):
        if name.startswith("_self_") or name == "__wrapped__":
            return super().__setattr__(name, value)
        setattr(self.__wrapped__, name, self._self_session.on_setattr(self.__wrapped__, name, value))

    def __delattr__(self, name):
        if name.startswith("_self_"):
            return super().__delattr__(name)
        delattr(self.__wrapped__, name)
        self._self_session.on_delattr(self.__wrapped__, name)

    @property
    def __dict__(self):
        """`vars(obj)`, `obj.__dict__`: the object's own dict, with what the code reads of it recorded."""
        found = self.__wrapped__.__dict__
        self._self_session.on_instance_dict(self.__wrapped__, sys._getframe(1))
        return found


class CallableStatefulProxy(StatefulProxy):
    """A stateful object the function may call (a callable transform): its class's `__call__`
    runs with the proxy as `self`, so what it reads is recorded (wrapt's proxy has no __call__)."""

    def __call__(self, *args, **kwargs):
        return type(self.__wrapped__).__call__(self, *args, **kwargs)


#: class swaps are installed and undone one at a time (two threads tracing with one object)
_swap_lock = threading.Lock()


@contextmanager
def recording_class(obj, session, active):
    """Temporarily give `obj` a subclass of its class that reports attribute use to the active
    session (`active()`) while it is one of the sessions recording `obj`. Traces overlapping in
    several threads share one swap; the last to finish puts the class back."""
    with _swap_lock:
        recorder = type(obj)
        if "_lazytrace_sessions" not in vars(recorder):
            recorder = _recorder(obj, active)
        sessions = recorder._lazytrace_sessions
        sessions.append(session)
    try:
        yield
    finally:
        with _swap_lock:
            sessions.remove(session)
            if not sessions:
                object.__setattr__(obj, "__class__", recorder.__base__)  # bypasses the recorder's __setattr__


def own_class(obj) -> type:
    """The class of `obj`, not the recording subclass a trace (maybe in another thread) gave it."""
    cls = type(obj)
    return cls.__base__ if "_lazytrace_sessions" in vars(cls) else cls


def _class_data(cls, name) -> bool:
    """Whether `name` is a plain value held by a class of `cls`'s MRO (`scale = 2.0` read as
    `self.scale`), not a method or other descriptor, nor an attribute of the framework's, the
    standard library's or a tool's own classes (nn.Module's `_compiled_call_impl`)."""
    for klass in cls.__mro__:
        namespace = vars(klass)
        if name in namespace:
            return not hasattr(type(namespace[name]), "__get__") and \
                str(getattr(klass, "__module__", "")).partition(".")[0] not in UNWATCHED
    return False


def _class_descriptor(cls, name):
    """The property, staticmethod, classmethod or other descriptor (not a plain function: a method
    is checked as the bound method it gives) that `name` finds on `cls`, or None; none of the
    framework's, the standard library's or a tool's own classes."""
    for klass in cls.__mro__:
        namespace = vars(klass)
        if name in namespace:
            found = namespace[name]
            if isinstance(found, FunctionType) or not hasattr(type(found), "__get__") or \
                    str(getattr(klass, "__module__", "")).partition(".")[0] in UNWATCHED:
                return None
            return found
    return None


def _raise(name):
    raise AttributeError(name)


def _recorder(obj, active):
    cls = type(obj)
    sessions: list = []
    class_data: dict = {}       # name -> _class_data(cls, name), for this recording
    descriptors: dict = {}      # name -> _class_descriptor(cls, name), for this recording

    def is_class_data(name):
        found = class_data.get(name)
        if found is None:
            found = class_data[name] = _class_data(cls, name)
        return found

    def descriptor(name):
        try:
            return descriptors[name]
        except KeyError:
            found = descriptors[name] = _class_descriptor(cls, name)
            return found

    def __getattribute__(self, name):
        if name == "__class__":         # `self.__class__(...)` (nn.Sequential's slice) makes an object of its
            return cls                  # class, not one that reports to this trace and keeps the recorder
        try:
            value = cls.__getattribute__(self, name)
        except AttributeError:
            if name.startswith("__") or session_of() is None:
                raise
            try:                        # what Python tries next: the class's __getattr__ (nn.Module's)
                value = cls.__getattr__(self, name) if hasattr(cls, "__getattr__") else _raise(name)
            except AttributeError:
                session_of().on_missing_attribute(self, name)
                raise
            fallback = user_getattr()
            if fallback is not None:    # one of the user's: what its code reads is checked
                session_of().on_attribute_code(self, fallback)
            return value
        if name == "__dict__":          # vars(obj), obj.__dict__.get(...): what the code reads of it
            session = active()
            if session is not None and session in sessions:
                session.on_instance_dict(self, sys._getframe(1))
        elif not name.startswith("__"):
            if (name in getattr(self, "__dict__", ()) or type(value) is MethodType and value.__self__ is self
                    or is_class_data(name) or type(descriptor(name)) is MemberDescriptorType):   # (a slot's value)
                session = active()
                if session is not None and session in sessions:
                    return session.on_getattr(self, name, value)   # a method: one set on the object later hides it
            elif descriptor(name) is not None:     # a property: replaced on the class later, it gives another value
                session = active()
                if session is not None and session in sessions:
                    session.on_class_attribute(self, name, descriptor(name))
        return value

    def user_getattr():
        """The class's `__getattr__` if it is a Python function of the user's (not nn.Module's)."""
        fn = getattr(cls, "__getattr__", None)
        module = getattr(fn, "__module__", None)
        return fn if isinstance(fn, FunctionType) and str(module).partition(".")[0] not in UNWATCHED else None

    def session_of():
        session = active()
        return session if session is not None and session in sessions else None

    def __setattr__(self, name, value):
        session = active()
        if session is not None and session in sessions:
            value = session.on_setattr(self, name, value)
        cls.__setattr__(self, name, value)

    def __delattr__(self, name):
        cls.__delattr__(self, name)
        session = active()
        if session is not None and session in sessions:
            session.on_delattr(self, name)

    try:
        recorder = type(cls.__name__, (cls,), {"__getattribute__": __getattribute__, "__setattr__": __setattr__,
                                               "__delattr__": __delattr__,
                                               "__module__": cls.__module__, "__qualname__": cls.__qualname__,
                                               "_lazytrace_sessions": sessions})
        obj.__class__ = recorder
    except TypeError as exc:
        raise TypeError(f"stateful object of type {cls.__qualname__} cannot be traced: its class cannot be "
                        f"swapped for a recording subclass ({exc}); pass it as an argument with "
                        f"arg_stateful_idxs instead") from None
    return recorder

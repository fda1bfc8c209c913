"""Recording attribute reads and writes of stateful objects during a trace.

An object passed as an argument (arg_stateful_idxs / kwarg_stateful_idxs) is
handed to the function inside a wrapt proxy. An object the function reaches
by itself (stateful=[...]) cannot be swapped for a proxy, so for the length of
the trace its class is replaced by a recording subclass, restored afterwards;
the subclass records only for the sessions recording the object (traces overlapping in several threads share one swap), so other threads
see plain attribute access.
"""
from __future__ import annotations

import functools
import threading
from contextlib import contextmanager
from types import MethodType

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


def _raise(name):
    raise AttributeError(name)


def _recorder(obj, active):
    cls = type(obj)
    sessions: list = []
    class_data: dict = {}       # name -> _class_data(cls, name), for this recording

    def is_class_data(name):
        found = class_data.get(name)
        if found is None:
            found = class_data[name] = _class_data(cls, name)
        return found

    def __getattribute__(self, name):
        try:
            value = cls.__getattribute__(self, name)
        except AttributeError:
            if name.startswith("__") or session_of() is None:
                raise
            try:                        # what Python tries next: the class's __getattr__ (nn.Module's)
                return cls.__getattr__(self, name) if hasattr(cls, "__getattr__") else _raise(name)
            except AttributeError:
                session_of().on_missing_attribute(self, name)
                raise
        if not name.startswith("__") and (
                name in getattr(self, "__dict__", ()) or type(value) is MethodType and value.__self__ is self
                or is_class_data(name)):
            session = active()
            if session is not None and session in sessions:
                return session.on_getattr(self, name, value)   # a method: one set on the object later hides it
        return value

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

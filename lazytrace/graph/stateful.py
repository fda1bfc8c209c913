"""Recording attribute reads and writes of stateful objects during a trace.

An object passed as an argument (arg_stateful_idxs / kwarg_stateful_idxs) is
handed to the function inside a wrapt proxy. An object the function reaches
by itself (stateful=[...]) cannot be swapped for a proxy, so for the length of
the trace its class is replaced by a recording subclass, restored afterwards;
the subclass records only for the session that installed it, so other threads
see plain attribute access.
"""
from __future__ import annotations

import functools
from contextlib import contextmanager
from types import MethodType

import wrapt


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
        value = getattr(wrapped, name)
        if isinstance(value, MethodType) and value.__self__ is wrapped:
            return MethodType(value.__func__, self)     # a method's own reads are recorded too
        return self._self_session.on_getattr(wrapped, name, value)

    def __setattr__(self, name, value):
        if name.startswith("_self_") or name == "__wrapped__":
            return super().__setattr__(name, value)
        self._self_session.on_setattr(self.__wrapped__, name, value)
        setattr(self.__wrapped__, name, value)


@contextmanager
def recording_class(obj, session, is_active):
    """Temporarily give `obj` a subclass of its class that reports attribute use."""
    cls = type(obj)

    def __getattribute__(self, name):
        value = cls.__getattribute__(self, name)
        if not name.startswith("__") and is_active(session) and (
                name in getattr(self, "__dict__", ()) or type(value) is MethodType and value.__self__ is self):
            return session.on_getattr(self, name, value)   # a method: one set on the object later hides it
        return value

    def __setattr__(self, name, value):
        if is_active(session):
            session.on_setattr(self, name, value)
        cls.__setattr__(self, name, value)

    recorder = type(cls.__name__, (cls,), {"__getattribute__": __getattribute__, "__setattr__": __setattr__,
                                           "__module__": cls.__module__, "__qualname__": cls.__qualname__})
    try:
        obj.__class__ = recorder
    except TypeError as exc:
        raise TypeError(f"stateful object of type {cls.__qualname__} cannot be traced: its class cannot be "
                        f"swapped for a recording subclass ({exc}); pass it as an argument with "
                        f"arg_stateful_idxs instead") from None
    try:
        yield
    finally:
        object.__setattr__(obj, "__class__", cls)   # bypasses the recorder's __setattr__

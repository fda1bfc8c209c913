"""Why a LazyGraph traced: each trace's signature as readable text, and for a
retrace what changed from the nearest earlier signature (the one with the
fewest differing leaves; the latest on ties), in the spirit of JAX's
cache-miss explanations. The retrace warning, `LazyGraph.explain()` and
`LazyGraph.traces` all use `TraceRecord`.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

from .signature import describe_paths


@dataclass(frozen=True)
class Change:
    """One leaf of the signature that differs: its path and the old and new descriptions."""

    path: str
    old: str | None      # None: the argument was not passed before
    new: str | None      # None: it is no longer passed

    def __str__(self):
        if self.old is None:
            return f"{self.path}: new argument {self.new}"
        if self.new is None:
            return f"{self.path}: no longer passed (was {self.old})"
        return f"{self.path}: {self.old} -> {self.new}"


@dataclass(frozen=True)
class TraceRecord:
    """One trace of a LazyGraph: its signature and why it happened."""

    number: int                  # 1 for the first trace of this LazyGraph
    signature: dict              # {argument path: description}
    nearest: int | None          # number of the nearest earlier trace, None for the first
    changes: tuple               # Changes from that trace's signature
    reason: str | None = None    # why, when no leaf changed (a failed guard, an evicted signature)

    @property
    def cause(self) -> str:
        """What made this trace happen, in a few words."""
        if self.nearest is None:
            return f"the first call ({self.reason})" if self.reason else "the first call"
        if self.changes:
            return "; ".join(str(c) for c in self.changes)
        return self.reason or f"the same signature as trace {self.nearest}"

    def __str__(self):
        if self.nearest is None:
            failed = f" (a loaded graph missed: {self.reason})" if self.reason else ""
            return f"trace {self.number}: first call with {format_signature(self.signature)}{failed}"
        return f"trace {self.number} (nearest earlier: trace {self.nearest}): {self.cause}"


_PATH_AND_BRIEF = operator.attrgetter("path", "meta")     # of an input array's Value (tracer.add_input)


class PendingTrace:
    """The first trace of a LazyGraph called with arrays alone, described when first read
    (LazyGraph.traces, .signatures, a retrace): its TraceRecord and describe_call's result,
    made from the arrays' briefs the trace took as the call came (what its key holds of them)
    and the global state its key holds. Most functions trace once and are never explained."""

    __slots__ = ("number", "_briefs", "_backend", "_state", "_signature")

    def __init__(self, number: int, briefs: tuple, backend, state):
        self.number, self._briefs, self._backend, self._state = number, briefs, backend, state
        self._signature = None

    @classmethod
    def of(cls, number, args, kwargs, signature, backends, inputs, state) -> "PendingTrace | None":
        """For a call whose arguments are each an array of the one backend, distinct objects, the
        trace's input Values (one per argument, in order, with their paths); else None."""
        values = (*args, *kwargs.values()) if kwargs else args
        if signature._special or len(backends) != 1 or len(inputs) != len(values) or \
                None in map(signature._describers.get, map(type, values)) or \
                len(values) > 1 and len(set(map(id, values))) != len(values):  # (describe_paths tells the same
            return None                                                          # array passed twice)
        return cls(number, tuple(map(_PATH_AND_BRIEF, inputs)), backends[0], state)

    def signature(self) -> dict:
        """describe_call(args, kwargs, signature, [backend], state=state) of the call."""
        if self._signature is None:
            backend = self._backend
            out = {path: backend.format_brief(brief) for path, brief in self._briefs}
            out.update(backend.describe_global_state(self._state))
            self._signature = out
        return self._signature

    def record(self) -> TraceRecord:
        return TraceRecord(self.number, self.signature(), None, ())


def format_signature(signature: dict, hide=()) -> str:
    """'args[0]=1x3x32x32 float32, args[1]=5, torch.is_grad_enabled()=True', without the paths in `hide`."""
    return ", ".join(f"{path}={text}" for path, text in signature.items() if path not in hide) or "no arguments"


def shared_state(signatures: list) -> set:
    """Paths of global or module state that have one value in all these signatures."""
    paths = {p for sig in signatures for p in sig if not p.startswith(("args[", "kwargs["))}
    return {p for p in paths if len({sig.get(p) for sig in signatures}) == 1}


def describe_call(args, kwargs, signature, backends, extra=None, extra_key=None, state=None) -> dict:
    """{path: description} of everything a call's cache key holds: arguments, global state (`state`:
    the one backend's, as its key holds it; else read now), and the extra live inputs (a module's
    flags and parameters) when `extra` can describe its key."""
    out = describe_paths(args, kwargs, signature)
    for backend in backends:
        out.update(backend.describe_global_state(backend.global_state() if state is None else state))
    if extra is not None:
        out.update(describe_extra(extra, extra_key))
    return out


def describe_extra(extra, extra_key) -> dict:
    """{path: description} of the extra live inputs' part of a cache key (a module's flags and parameters)."""
    describe = getattr(extra, "describe", None)
    return describe(extra_key) if describe else {"extra inputs": f"key {hash(extra_key):x}"}


def diff(old: dict, new: dict) -> tuple:
    changes = [Change(path, old.get(path), text) for path, text in new.items() if old.get(path) != text]
    return tuple(changes + [Change(path, text, None) for path, text in old.items() if path not in new])


def record(number: int, signature: dict, earlier, reason: str | None = None) -> TraceRecord:
    """The TraceRecord of a new trace, compared with the earlier ones (oldest first)."""
    best = None
    for previous in earlier:
        changes = diff(previous.signature, signature)
        if best is None or len(changes) <= len(best[1]):
            best = (previous, changes)
    if best is None:        # (a reason here: a graph loaded from the persistent cache missed)
        return TraceRecord(number, signature, None, (), reason)
    return TraceRecord(number, signature, best[0].number, best[1], reason)

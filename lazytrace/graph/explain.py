"""Why a LazyGraph traced: each trace's signature as readable text, and for a
retrace what changed from the nearest earlier signature (the one with the
fewest differing leaves; the latest on ties), in the spirit of JAX's
cache-miss explanations. The retrace warning, `LazyGraph.explain()` and
`LazyGraph.traces` all use `TraceRecord`.
"""
from __future__ import annotations

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
            return "the first call"
        if self.changes:
            return "; ".join(str(c) for c in self.changes)
        return self.reason or f"the same signature as trace {self.nearest}"

    def __str__(self):
        if self.nearest is None:
            return f"trace {self.number}: first call with {format_signature(self.signature)}"
        return f"trace {self.number} (nearest earlier: trace {self.nearest}): {self.cause}"


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
    if best is None:
        return TraceRecord(number, signature, None, ())
    return TraceRecord(number, signature, best[0].number, best[1], reason)

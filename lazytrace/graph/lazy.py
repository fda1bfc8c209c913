"""LazyGraph: traces a function on first call, one graph per input signature.

The call path: first the compiled check of the most recently used graph
(guards.py: straight-line code testing the exact signature, then the graph);
otherwise the general path builds the signature key (signature.py), looks it
up in an LRU dict and calls the graph. A miss traces under a per-key claim so
concurrent first calls trace once. A signature that cannot be traced, or whose
guards keep failing, is remembered as eager with the reason. With the persistent
cache on, graphs stored by earlier processes are loaded when the LazyGraph is made
(`preload`), else at the first call of their signature (`_load`).
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import operator
import sys
import threading
import warnings
import weakref
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from types import FunctionType, MethodType

from ..envflags import env_flag
from . import explain, interpret
from .codegen import GuardFailed
from .homes import held_changed
from .guards import MISS, compile_dispatch
from .signature import Signature, Unkeyable
from .tracer import NotTraceable, TraceOptions, _active, make_graph, trace

log = logging.getLogger("lazytrace")

#: variants of one signature kept when guards fail (e.g. both sides of a branch)
MAX_VARIANTS = 4
#: trace counts at which a retrace warning is issued
_WARN_AT = {5, 10, 20, 50, 100, 200, 500, 1000}
#: traces remembered for explanations (LazyGraph.traces)
_HISTORY = 256

_registry: "weakref.WeakSet[LazyGraph]" = weakref.WeakSet()
_WRAPPER_NAMES = functools.WRAPPER_ASSIGNMENTS
_wrapper_values = operator.attrgetter(*_WRAPPER_NAMES)
_UNSET = object()


class RetraceWarning(UserWarning):
    """A LazyGraph keeps tracing new signatures."""


#: an empty Counter, made without Counter.__init__ (a Python-level update()) nor any Python code
_counter = functools.partial(Counter.__new__, Counter)


def _zero():
    """A count starting at 0, not set by Stats.__init__: the class attribute is read until the
    first `+= 1` sets the object's own (a LazyGraph made per call of a traced library's module
    object makes one Stats per call)."""
    return field(default=0, init=False)


@dataclass
class Stats:
    calls: int = _zero()
    hits: int = _zero()
    traces: int = _zero()
    eager: int = _zero()
    guard_failures: int = _zero()
    reasons: Counter = field(default_factory=_counter, init=False)
    loaded: int = _zero()        # graphs read from the persistent cache (preloaded or at a call)
    stored: int = _zero()        # graphs written to it
    not_stored: Counter = field(default_factory=_counter, init=False)   # why a traced graph was not written
    prewarmed: int = _zero()     # preloaded graphs run once on constant-filled inputs (prewarm=True)
    shared: int = _zero()        # graphs another object of the class traced, taken at a first call (graph/shared.py)
    not_prewarmed: Counter = field(default_factory=_counter, init=False)   # why a preloaded graph was not run
    not_preloaded: Counter = field(default_factory=_counter, init=False)   # why a stored signature was left to its first call

    def as_dict(self) -> dict:
        return {"calls": self.calls, "hits": self.hits, "traces": self.traces, "eager": self.eager,
                "guard_failures": self.guard_failures, "reasons": dict(self.reasons),
                "loaded": self.loaded, "stored": self.stored, "not_stored": dict(self.not_stored),
                "prewarmed": self.prewarmed, "not_prewarmed": dict(self.not_prewarmed), "shared": self.shared,
                "not_preloaded": dict(self.not_preloaded)}


class _Entry:
    __slots__ = ("graphs", "eager_reason", "dispatch", "variants", "described", "described_extra", "unsettled",
                 "stored_data")

    def __init__(self):
        self.graphs: list = []
        self.eager_reason: str | None = None
        self.unsettled = False      # a trace changed Python state it reads: the next call traces again
        self.dispatch = None        # compiled check_and_call (guards.py), made on the first hit
        self.variants: dict = {}    # graph -> its check_and_call, where the key holds several graphs
        self.described: dict = {}   # {argument path: description} of this signature
        self.described_extra = None  # (extra, its key): described when listed (a module made per call rarely is)
        self.stored_data = None     # preloaded: each graph's (module data, memos) (persist.plan_data), checked at the first call


@dataclass(frozen=True)
class SignatureInfo:
    """One cached signature of a LazyGraph, as `LazyGraph.signatures` lists it."""

    signature: dict              # {argument path: description}
    variants: int                # graphs traced for it (more than one when guards failed)
    eager_reason: str | None     # why it runs eagerly, if it does

    def __str__(self):
        return self.describe()

    def describe(self, hide=()) -> str:
        state = f"eager: {self.eager_reason}" if self.eager_reason else \
            f"{self.variants} graph{'s' if self.variants != 1 else ''}"
        return f"{explain.format_signature(self.signature, hide)}  [{state}]"


def _disabled_by_env() -> bool:
    return env_flag("LAZYTRACE_DISABLE")


class LazyGraph:
    """A function that traces itself per input signature on first call."""

    # (immutable values set later, if at all: read from the class until then, not set by _setup)
    _undescribed = None     # the first trace while its description waits to be read (_explain)
    _persist = _UNSET       # the PersistentCache, made on the first miss (or None)
    _trace_count = 0
    _stored_check = None    # (persist.memos_hold, persist.plan_data) once _preload stored data to check
    _shared = None          # the SharedGraphs of the object's class (a traced library's module object)

    def __init__(self, fn, *, options: TraceOptions | None = None, signature: Signature | None = None,
                 name: str | None = None, max_signatures: int = 64, extra=None):
        if type(max_signatures) is not int or max_signatures < 1:
            raise ValueError(f"max_signatures must be a positive int (signatures kept in the cache), "
                             f"got {max_signatures!r}")
        self._options = options or TraceOptions()
        self._setup(fn, signature or Signature(), name or getattr(fn, "__qualname__", None) or
                    getattr(fn, "__name__", "fn"), max_signatures, extra)

    def _setup(self, fn, signature: Signature, name: str, max_signatures: int, extra):
        self._fn = fn
        self._signature = signature
        self._key = signature.key
        self._name = name
        self._extra = extra
        self.max_signatures = max_signatures
        self._cache: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self._pending: dict = {}
        self._history: deque = deque(maxlen=_HISTORY)     # TraceRecords, oldest first
        self._traced_keys: dict = {}                       # keys traced so far (the last _HISTORY)
        self._disabled = _disabled_by_env()
        self._fast = None           # (check_and_call, graph) of the most recently hit entry
        self._code_of = _code_holder(fn)    # the Python function whose code the graphs were traced from
        self._code = getattr(self._code_of, "__code__", None)
        self._defaults = _defaults_of(self._code_of)     # (its __defaults__, __kwdefaults__) if it has any
        self.stats = Stats()
        try:        # functools.update_wrapper(self, fn, updated=()), in one C call where fn has them all
            self.__dict__.update(zip(_WRAPPER_NAMES, _wrapper_values(fn)), __wrapped__=fn)
        except AttributeError:
            functools.update_wrapper(self, fn, updated=())
        _registry.add(self)

    @functools.cached_property
    def _options(self) -> TraceOptions:
        """The trace options: set by __init__; for a LazyGraph made by Recipe.make, made at first
        use from its recipe's and the stateful objects of its own."""
        options, stateful = self._own_state
        return dataclasses.replace(options, stateful=options.stateful + stateful)

    # ---- the call path ---------------------------------------------------------
    def __call__(self, *args, **kwargs):
        fast = self._fast           # (check_and_call, graph) of the last hit; never set while disabled
        if fast is not None:        # the check tests too that no trace runs and the code is the traced one
            try:
                out = fast[0](args, kwargs)
            except GuardFailed:
                if fast[1].has_state_changes:
                    fast[1].backend.restore_global_state(fast[1]._state)
                out = MISS                       # the general path handles it
            except Unkeyable:                    # the live inputs' key (a module hook added): the general path says why
                out = MISS
            except Exception:
                self.stats.calls += 1
                return self._graph_raised(fast[1], args, kwargs)
            if out is not MISS:
                stats = self.stats
                stats.calls += 1
                stats.hits += 1
                return out
        return self._call(args, kwargs)

    def _call(self, args, kwargs):
        """The general path: the signature key, the cache, a trace on a miss."""
        code_of = self._code_of               # its __code__ replaced (autoreload): its graphs are stale
        if code_of is not None and (code_of.__code__ is not self._code or self._defaults is not None and (
                code_of.__defaults__ is not self._defaults[0] or code_of.__kwdefaults__ is not self._defaults[1])):
            self._code_replaced()
        if self._disabled:
            return self._fn(*args, **kwargs)
        session = _active.get()
        if session is not None:                  # inlined into an outer trace
            if session.include_generators and not self._options.include_generators:
                session.fail(f"calls {self._name}, traced with include_generators=False: its random draws "
                             f"are frozen in its own graphs, an outer graph would draw anew")
            return self._fn(*args, **kwargs)
        stats = self.stats
        stats.calls += 1
        try:
            key, leaves, backends = self._key(args, kwargs)
            if self._extra is not None:
                extra_key, extra_leaves = self._extra()
                key = (key, extra_key)
                leaves.extend(extra_leaves)
        except Unkeyable as exc:
            return self._eager(str(exc), args, kwargs)
        cache = self._cache
        entry = cache.get(key)
        if entry is not None and entry.stored_data is not None and not self._confirm(key, entry):
            entry = None
        if entry is not None:
            if len(cache) > 1:
                try:
                    cache.move_to_end(key)
                except KeyError:        # another thread evicted it since the get: this call still replays it
                    pass
            if entry.eager_reason is not None:
                return self._eager(entry.eager_reason, args, kwargs)
            failed = None
            for graph in entry.graphs:
                try:
                    out = graph.fn(*leaves)
                except GuardFailed as exc:
                    failed = (graph, exc.args[0] if exc.args else None)
                    stats.guard_failures += 1
                    if graph.has_state_changes:
                        graph.backend.restore_global_state(graph._state)
                    continue
                except Exception:
                    return self._graph_raised(graph, args, kwargs)
                stats.hits += 1
                if len(entry.graphs) == 1:
                    self._remember_fast(entry, graph, args, kwargs, backends, key)
                else:
                    self._remember_variant(entry, graph, args, kwargs, backends, key)
                return out
            return self._miss(key, backends, entry, args, kwargs, failed)
        return self._miss(key, backends, entry, args, kwargs, leaves=leaves)

    def _code_replaced(self):
        """The function's __code__ was replaced (a reload tool such as IPython's autoreload, an
        edit applied in place), or its default values (`f.__defaults__ = (3.0,)`, which graphs
        bake like arguments): its graphs, in memory and the on-disk cache chosen for the old
        code, are of the old code."""
        with self._lock:
            self._code = self._code_of.__code__
            self._defaults = _defaults_of(self._code_of)
            self._fast = None
            self._cache.clear()
            self._persist = _UNSET

    def _graph_raised(self, graph, args, kwargs):
        """A graph raised at replay: if nothing visible happened, let the original decide."""
        if graph.has_state_changes:     # grad mode or autocast switched by the graph: back as eager's
            graph.backend.restore_global_state(graph._state)      # `with` blocks leave them
        if not graph.replay_safe or isinstance(sys.exc_info()[1], graph.backend.control_flow_exceptions):
            raise
        return self._eager("the graph raised; the original function decides", args, kwargs)

    def _confirm(self, key, entry) -> bool:
        """The first call of a preloaded signature: its graphs whose module data changed since
        the import that preloaded them (a library global the user set meanwhile) are dropped.
        False if none is left (the entry is gone: the call loads or traces anew)."""
        memos_hold, plan_data = self._stored_check      # (set by _preload: no import at this call)
        with self._lock:
            stored, entry.stored_data = entry.stored_data, None
            if stored is None:
                return self._cache.get(key) is entry
            kept = [graph for graph, (data, memos) in zip(entry.graphs, stored)
                    if memos_hold(memos) or plan_data(graph._plan) == data]
            if len(kept) < len(entry.graphs):
                entry.graphs[:] = kept
                entry.dispatch = None
                entry.variants.clear()
                if not kept:
                    del self._cache[key]
            return bool(kept)

    def _remember_fast(self, entry, graph, args, kwargs, backends, key):
        if entry.dispatch is None:
            entry.dispatch = compile_dispatch(graph, args, kwargs, self._signature, backends,
                                              key[1] if self._extra is not None else None,
                                              conditions=self._call_conditions()) or False
        if entry.dispatch:
            self._fast = (entry.dispatch, graph)

    def _remember_variant(self, entry, graph, args, kwargs, backends, key):
        """The fast path for the graph that hit among a key's variants (traced again after a guard
        failed: a global changed, a value read back differs), so that the calls after a change do
        not all take the general path; it fails over to that path as a single graph's does."""
        dispatch = entry.variants.get(graph)
        if dispatch is None:
            dispatch = entry.variants[graph] = compile_dispatch(
                graph, args, kwargs, self._signature, backends, key[1] if self._extra is not None else None,
                conditions=self._call_conditions()) or False
        if dispatch:
            self._fast = (dispatch, graph)

    def _call_conditions(self) -> list:
        """What the general path tests before the key, for compile_dispatch: no trace runs (in
        one, this function is inlined), and the function's code is the one its graphs were traced from."""
        conditions = [("{}() is None", _active.get)]
        if self._code_of is not None:
            conditions.append(("{}.__code__ is {}", self._code_of, self._code))
        if self._defaults is not None:      # (defaults set where there were none only fill arguments
            #                                   a call left out, which raised at the trace)
            conditions += [(f"{{}}.{name} is {{}}", self._code_of, value) for name, value in
                           zip(("__defaults__", "__kwdefaults__"), self._defaults) if value is not None]
        return conditions

    def _eager(self, reason: str, args, kwargs, fn=None):
        self.stats.eager += 1
        self.stats.reasons[reason] += 1
        return (fn or self._fn)(*args, **kwargs)

    # ---- tracing ------------------------------------------------------------------
    def _miss(self, key, backends, entry, args, kwargs, failed=None, leaves=None):
        if entry is not None and entry.graphs and entry.stored_data is None:
            self._drop_replaced_code(entry)
        if entry is not None and len(entry.graphs) >= MAX_VARIANTS:
            last = f" (last: {self._guard_text(*failed)})" if failed else ""
            entry.eager_reason = (f"guards failed for {MAX_VARIANTS} traced variants: values read back "
                                  f"from arrays or globals keep changing{last}")
            entry.graphs.clear()
            entry.variants.clear()
            self._fast = None
            return self._eager(entry.eager_reason, args, kwargs)
        while True:
            with self._lock:
                current = self._cache.get(key)
                if current is not None and current is not entry:
                    break                      # another thread traced it meanwhile
                claim = self._pending.get(key)       # held by the thread tracing the key (a Lock: cheaper than an Event)
                if claim is None:
                    claim = self._pending[key] = threading.Lock()
                    claim.acquire()
                    owner = True
                else:
                    owner = False
            if owner:
                try:
                    # described before the call: what it sets on the object is not its configuration
                    shared = self._shared.describe(self._extra) if self._shared is not None else None
                    if entry is None and leaves is not None:
                        out = self._load(key, backends, leaves, args, kwargs)
                        if out is MISS and shared is not None:
                            out = self._adopt(shared, key, backends, leaves, args, kwargs)
                        if out is not MISS:
                            return out
                    return self._trace(key, backends, self._cache.get(key), args, kwargs, failed, shared)
                finally:
                    with self._lock:
                        del self._pending[key]
                    claim.release()
            with claim:             # until the owner is done
                pass
        self.stats.calls -= 1       # (counted again by the call below)
        return self(*args, **kwargs)

    def _drop_replaced_code(self, entry):
        """Drop the variants whose user code was replaced in place since (homes.held_code: a
        reloader's edit): they fail at every call from now on, and each edit of a helper in an
        `%autoreload` session would add one, so that MAX_VARIANTS edits made the signature eager
        for good; nor are they stored again, under the new code's state."""
        stale = [g for g in entry.graphs if g._plan.held_code and held_changed(g._plan.held_code)]
        if stale:
            with self._lock:
                entry.graphs[:] = [g for g in entry.graphs if g not in stale]
                entry.dispatch = None       # (made for the first graph, which may be gone)
                entry.variants.clear()
                self._fast = None

    def _adopt(self, shared, key, backends, leaves, args, kwargs):
        """Replay a graph another object of the same class and structure traced for this signature
        (graph/shared.py), rebound to this object, if its guards pass for it (else MISS)."""
        for template in self._shared.candidates(shared, key):
            graph = template.graph(shared[1], key=key, signature=self._signature, original=self._fn,
                                   extra=self._extra, state=template.backend.global_state())
            try:
                out = graph.fn(*leaves)
            except GuardFailed:
                if graph.has_state_changes:
                    graph.backend.restore_global_state(graph._state)
                continue
            except Exception:
                if graph.has_state_changes:
                    graph.backend.restore_global_state(graph._state)
                if not graph.replay_safe or isinstance(sys.exc_info()[1], graph.backend.control_flow_exceptions):
                    raise
                continue                # the trace decides
            described = template.described         # (the arguments' part: the same signature as the template's)
            if described is None:
                described = template.described = explain.describe_call(args, kwargs, self._signature, backends)
            self._store(key, None, graph, (described, (self._extra, key[1])))
            self.stats.hits += 1
            self.stats.shared += 1
            return out
        return MISS

    def _trace(self, key, backends, entry, args, kwargs, failed=None, shared=None):
        stats = self.stats
        for backend in backends:
            refused = backend.trace_refused()
            if refused is not None:
                return self._eager(refused, args, kwargs, backend.refused_call(self._fn))
        state = self._key_state(key, backends)
        try:
            graph, result = trace(self._fn, args, kwargs, key=key, backends=backends,
                                  signature=self._signature, options=self._options, name=self._name,
                                  extra=self._extra, state=state)
        except NotTraceable as exc:    # decided before running: run eagerly, remember
            self._store(key, entry, exc)
            self._explain(key, backends, args, kwargs, failed)
            return self._eager(exc.reason, args, kwargs)
        except Exception as exc:       # the original raised: it reaches the caller, nothing is cached
            stats.eager += 1
            stats.reasons[f"the function raised {type(exc).__name__}"] += 1
            raise
        stats.traces += 1
        self._store(key, entry, graph)
        if isinstance(graph, NotTraceable):
            stats.eager += 1
            stats.reasons[graph.reason] += 1
            log.info("lazytrace: %s runs eagerly for this signature: %s", self._name, graph.reason)
            graph = None
        else:
            self._save(key, backends, args, kwargs)
            if shared is not None:
                self._shared.publish(shared, key, graph, self._shared.describe_held(self._extra))
        self._explain(key, backends, args, kwargs, failed, graph, state)
        return result

    # ---- persistent cache (lazytrace.persist) -----------------------------------------
    def _persistent(self):
        if self._persist is _UNSET:
            store = _store_module().store_for(self._options.cache)
            if store is None:
                self._persist = None
            else:
                from ..persist import PersistentCache
                self._persist = PersistentCache(store, self._fn, self._options, self._signature, self._extra)
        return self._persist

    def preload(self) -> int:
        """Load now the graphs earlier processes stored for this function (at most max_signatures
        signatures, most recently used first), code generated and compiled, so that their first
        calls are graph hits (after a check that the data globals of the modules their traces ran
        are still as at this load: _confirm); with prewarm, run each graph free of visible effects once on
        a rebuilt call of its signature (lazytrace.persist.prewarm). Returns the graphs loaded.
        Without a persistent cache now (no cache=, $LAZYTRACE_CACHE not set), the LazyGraph has
        none (as one made by Recipe.make): its first call does not look again."""
        if self._disabled:
            return 0
        store = _store_module().store_for(self._options.cache)
        if store is None:
            self._persist = None
            return 0
        if not store.has_files(self._fn):
            return 0
        from ..persist import memos_hold, plan_data, prewarm
        persist = self._persistent()
        warm = prewarm.wanted(self._options.prewarm)
        self._stored_check = (memos_hold, plan_data)         # what _confirm checks stored_data with
        loaded, fast = 0, None
        skipped = self.stats.not_preloaded
        for found in persist.preload(self.max_signatures - len(self._cache), start_devices=warm, skipped=skipped):
            try:
                key, leaves, backends = self._key(found.args, found.kwargs)
            except Unkeyable as exc:
                skipped[f"its stored call cannot be keyed here: {exc}"] += 1
                continue
            if key in self._cache:
                continue
            if persist.signature_text(key, found.backend) != found.signature:
                skipped["stored under other global state (grad mode, default dtype ...) than this process has "
                        "now"] += 1
                continue
            state = found.backend.global_state()
            graphs = [make_graph(found.backend, plan, name=self._name, key=key, signature=self._signature,
                                 original=self._fn, options=self._options, state=state) for plan in found.plans]
            for graph in graphs:
                graph.fn            # source generated and compiled now, not at the first call
                self._store(key, None, graph)
            entry = self._cache[key]
            entry.stored_data = list(found.data)
            entry.described = explain.describe_call(found.args, found.kwargs, self._signature, backends, None, None)
            if len(graphs) == 1:
                entry.dispatch = compile_dispatch(graphs[0], found.args, found.kwargs, self._signature,
                                                  backends, conditions=self._call_conditions()) or False
                fast = fast or (entry.dispatch and (key, entry))
            for graph, (_, memos) in zip(graphs, entry.stored_data) if warm else ():
                call = functools.partial(entry.dispatch, found.args, found.kwargs) if entry.dispatch else \
                    functools.partial(graph.fn, *leaves)         # the checks of a call too, when compiled
                reason = prewarm.run(graph, call, MISS)
                if reason is None:
                    self.stats.prewarmed += 1
                else:
                    self.stats.not_prewarmed[reason] += 1
                memos_hold(memos)           # the check its first call makes (_confirm): its code warm too
            loaded += len(graphs)
        self.stats.loaded += loaded
        if fast:               # the most recently used signature takes the fast path at once
            self._fast = (self._confirming(*fast), fast[1].graphs[0])
        return loaded

    def _confirming(self, key, entry):
        """The fast path's first call of a preloaded signature: _confirm, then its dispatch."""
        def dispatch(args, kwargs):
            if _active.get() is not None:       # inlined into a trace: the general path
                return MISS
            if not self._confirm(key, entry) or not entry.dispatch:
                self._fast = None
                return MISS
            self._fast = (entry.dispatch, entry.graphs[0])
            return entry.dispatch(args, kwargs)
        return dispatch

    def _load(self, key, backends, leaves, args, kwargs):
        """Replay graphs stored by an earlier process for this key, if any (else MISS)."""
        persist = self._persistent()
        if persist is None:
            return MISS
        backend, plans = persist.load(key, backends)
        if not plans:
            return MISS
        state = backend.global_state()
        for plan in plans:
            self._store(key, None, make_graph(backend, plan, name=self._name, key=key, signature=self._signature,
                                             original=self._fn, options=self._options, state=state))
        self.stats.loaded += len(plans)
        for graph in self._cache[key].graphs:
            try:      # this call walks the plan; source is generated on the next (as after a trace)
                out = graph.fn(*leaves) if graph._generated else interpret.run(graph._plan, leaves, backend)
            except GuardFailed:
                self.stats.guard_failures += 1
                if graph.has_state_changes:
                    graph.backend.restore_global_state(graph._state)
                continue
            except Exception:
                return self._graph_raised(graph, args, kwargs)
            self.stats.hits += 1
            return out
        return MISS

    def _save(self, key, backends, args, kwargs):
        persist = self._persistent()
        if persist is None:
            return
        from ..persist import CacheWarning, NotStorable
        entry = self._cache.get(key)
        try:
            persist.save(key, backends, [g._plan for g in entry.graphs] if entry else [], (args, kwargs))
        except NotStorable as exc:
            self.stats.not_stored[str(exc)] += 1
            log.info("lazytrace: %s: graph not stored: %s", self._name, exc)
        except Exception as exc:      # the cache must never fail the call itself
            reason = f"{type(exc).__name__}: {exc}"
            self.stats.not_stored[reason] += 1
            warnings.warn(f"lazytrace: {self._name}: graph not stored: {reason}", CacheWarning,
                          stacklevel=_caller_level(backends))
        else:
            self.stats.stored += 1

    def _store(self, key, entry, graph, described=None):
        """Keep `graph` (or why the signature runs eagerly) for `key`; `described`: (the call's
        description, (extra, its key)) of a graph adopted from another object (_adopt)."""
        with self._lock:
            self._fast = None
            if entry is None:
                entry = self._cache.setdefault(key, _Entry())      # (one hash of the key: a JAX key's costs ~0.5 us)
            if described is not None:
                entry.described, entry.described_extra = described
            if isinstance(graph, NotTraceable) and graph.transient and not entry.unsettled:
                entry.unsettled = True      # e.g. a cache the first call filled: try once more
            elif isinstance(graph, NotTraceable):
                entry.eager_reason = graph.reason
                entry.graphs.clear()
                entry.variants.clear()
            else:
                entry.graphs.append(graph)
            while len(self._cache) > self.max_signatures:
                self._cache.popitem(last=False)

    def _explain(self, key, backends, args, kwargs, failed, graph=None, state=_UNSET):
        """Record this trace's signature and what changed from the nearest earlier one; warn
        when the trace count reaches one of _WARN_AT. The first trace of a call of arrays alone
        that made `graph` is described when first read (explain.PendingTrace); a later one of arrays
        alone from the same briefs: the arguments as they came, not as the function left them
        (an input changed in place). `state`: _key_state's."""
        if state is _UNSET:
            state = self._key_state(key, backends)
        pending = None
        if graph is not None and self._extra is None:
            pending = explain.PendingTrace.of(0, args, kwargs, self._signature, backends, graph._plan.inputs, state)
        if pending and failed is None and not self._history:
            with self._lock:
                if not self._history:
                    pending.number = self._trace_count + 1
                    self._trace_count += 1
                    self._traced_keys[key] = None
                    self._history.append(pending)
                    self._undescribed = pending
                    current = self._cache.get(key)
                    if current is not None:
                        current.described = pending
                    return
        described = pending.signature() if pending else explain.describe_call(
            args, kwargs, self._signature, backends, self._extra, key[1] if self._extra is not None else None, state)
        with self._lock:
            if self._undescribed is not None:
                self._describe_pending()
            if failed is not None:      # (a graph loaded from the persistent cache: on its first trace too)
                reason = self._guard_text(*failed)
            elif not self._history:
                reason = None
            elif key in self._traced_keys:
                reason = (f"this signature was traced before and left the cache (max_signatures="
                          f"{self.max_signatures}, or clear())")
            else:
                reason = "a part of the cache key not described here changed (e.g. strides)"
            self._traced_keys[key] = None
            while len(self._traced_keys) > _HISTORY:
                del self._traced_keys[next(iter(self._traced_keys))]
            self._trace_count += 1
            rec = explain.record(self._trace_count, described, self._history, reason)
            self._history.append(rec)
            current = self._cache.get(key)
            if current is not None:
                current.described = described
        if rec.nearest is not None:
            log.info("lazytrace: %s traced again (%s)", self._name, rec)
        if self.stats.traces in _WARN_AT and rec.nearest is not None:
            warnings.warn(f"lazytrace: {self._name} traced {self.stats.traces} times; cause of the last "
                          f"trace: {rec.cause}. Calls with changing shapes or Python values each "
                          f"trace a new graph; LazyGraph.explain() lists why each trace happened.", RetraceWarning,
                          stacklevel=_caller_level(backends))

    def _describe_pending(self):
        """Describe the trace _explain left pending, where it is held (under self._lock)."""
        pending, self._undescribed = self._undescribed, None
        history = self._history
        if history and history[0] is pending:
            history[0] = pending.record()
        for entry in self._cache.values():
            if entry.described is pending:
                entry.described = pending.signature()

    def _key_state(self, key, backends):
        """The global state this call's key holds (Signature.key_state), read once per trace."""
        return self._signature.key_state(key[0] if self._extra is not None else key, backends)

    @staticmethod
    def _guard_text(graph, index) -> str:
        nodes = graph._plan.nodes
        if isinstance(index, str):      # codegen's own checks say what failed
            return index
        if index is None or not 0 <= index < len(nodes):
            return "a guard of the earlier graph failed"
        node = nodes[index]
        if hasattr(node.target, "describe"):        # a global or closure variable (graph/reads.py), an attribute
            return node.target.describe(node)
        return (f"a value read back from an array changed: {graph.backend.qualified_name(node.target)} "
                f"gave {node.expected!r} when traced and something else now")

    # ---- introspection -------------------------------------------------------------
    @property
    def graphs(self) -> list:
        """The graphs traced so far (most recently used last)."""
        return [g for e in self._cache.values() for g in e.graphs]

    @property
    def eager_signatures(self) -> list[str]:
        return [e.eager_reason for e in self._cache.values() if e.eager_reason is not None]

    @property
    def signatures(self) -> list[SignatureInfo]:
        """The cached signatures (least recently used first), described argument by argument."""
        with self._lock:
            if self._undescribed is not None:
                self._describe_pending()
            entries = list(self._cache.values())
        return [SignatureInfo(e.described if e.described_extra is None else
                              {**e.described, **explain.describe_extra(*e.described_extra)},
                              len(e.graphs), e.eager_reason) for e in entries]

    @property
    def traces(self) -> list:
        """Every trace so far (the last 256), each a TraceRecord: its signature and, for a
        retrace, what changed from the nearest earlier signature (`changes`, `cause`)."""
        with self._lock:
            if self._undescribed is not None:
                self._describe_pending()
            return list(self._history)

    def explain(self) -> str:
        """Why this function traced each time, and the signatures it holds now, as text."""
        traces, signatures = self.traces, self.signatures
        lines = [f"{self._name}: {self.stats.traces} traces, {self.stats.calls} calls, "
                 f"{self.stats.hits} graph hits, {self.stats.eager} eager calls"]
        lines += [f"  {rec}" for rec in traces]
        lines.append(f"cached signatures ({len(signatures)} of at most {self.max_signatures}):")
        same = explain.shared_state([info.signature for info in signatures])   # shown once, above
        lines += [f"  {info.describe(same)}" for info in signatures]
        return "\n".join(lines)

    def graph_for(self, *args, **kwargs):
        """The graph this call would replay, or None."""
        key, _, _ = self._signature.key(args, kwargs)
        if self._extra is not None:
            key = (key, self._extra()[0])
        entry = self._cache.get(key)
        return entry.graphs[0] if entry and entry.graphs else None

    def clear(self):
        with self._lock:
            self._fast = None
            self._cache.clear()

    def __reduce__(self):
        """Pickled (and deep-copied) as what it was made from: graphs are not carried along."""
        sig = self._signature
        return (_restore, (self._fn, self._options, (tuple(sig.static_argnums), tuple(sig.static_argnames),
                                                     tuple(sig.stateful_argnums), tuple(sig.stateful_argnames),
                                                     sig.to),
                           self._name, self.max_signatures, self._extra))

    def __get__(self, instance, owner):
        return self if instance is None else MethodType(self, instance)

    def __repr__(self):
        return f"<lazytrace.LazyGraph {self._name}: {len(self._cache)} signatures>"


class Recipe:
    """How a LazyGraph was made, less its function and its own stateful objects: its options,
    Signature (shared: it caches only per type), name and bound. `make` gives another one (a
    traced library's module made per call) without reading trace_graph's arguments again."""

    __slots__ = ("options", "signature", "name", "max_signatures")

    def __init__(self, options: TraceOptions, signature: Signature, name: str, max_signatures: int):
        self.options, self.signature, self.name, self.max_signatures = options, signature, name, max_signatures

    def make(self, fn, extra, stateful: tuple) -> LazyGraph:
        """A LazyGraph of `fn` with these settings, `stateful` added to its options' (on first use)."""
        lazy = LazyGraph.__new__(LazyGraph)
        lazy._own_state = (self.options, stateful)
        lazy._setup(fn, self.signature, self.name, self.max_signatures, extra)
        if _store_module().store_for(self.options.cache) is None:
            lazy._persist = None        # no persistent cache now: nothing to preload, nor to load at its first call
        else:
            lazy.preload()
        return lazy


@functools.cache
def _store_module():
    """lazytrace.persist.store, imported at its first use (import lazytrace does not import it): a
    call in C where a relative import in a function runs importlib's Python (ModuleSpec.parent)."""
    from ..persist import store
    return store


def _restore(fn, options, signature_args, name, max_signatures, extra):
    return LazyGraph(fn, options=options, signature=Signature(*signature_args), name=name,
                     max_signatures=max_signatures, extra=extra)


def stats() -> dict:
    """Per LazyGraph (by name): calls, graph hits, traces, eager calls and their reasons."""
    out = {}
    for lazy in list(_registry):
        name = lazy._name
        while name in out:
            name += "'"
        out[name] = lazy.stats.as_dict()
    return out


def _caller_level(backends) -> int:
    """The stacklevel of a warning issued where it is called: the first frame outside lazytrace
    and the frameworks (nn.Module.__call__ runs between the caller and a model's forward), so
    that warnings of several models are not shown as one, at the framework's line."""
    prefixes = ("lazytrace.", *(f"{b.name}." for b in backends))
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and str(frame.f_globals.get("__name__", "")).startswith(prefixes):
        frame, level = frame.f_back, level + 1
    return level


def _defaults_of(fn):
    """(fn.__defaults__, fn.__kwdefaults__), checked by identity at each call, or None for a function
    without defaults (one set later only fills arguments such calls gave: their keys differ)."""
    if fn is None or fn.__defaults__ is None and fn.__kwdefaults__ is None:
        return None
    return fn.__defaults__, fn.__kwdefaults__


def _code_holder(fn):
    """The Python function a callable runs (through bound methods and functools.partial), what
    stands for it (a module's forward: its class's, read at each call), or None."""
    if type(fn) is FunctionType:        # (most: `function` takes no attribute of lazytrace's)
        return fn
    live = getattr(type(fn), "_lazytrace_code_holder", None)
    if live is not None:
        return live(fn)
    fn = getattr(fn, "__func__", fn)
    while isinstance(fn, functools.partial):
        fn = getattr(fn.func, "__func__", fn.func)
    return fn if isinstance(fn, FunctionType) else None

"""A trace session: runs a function once with real arguments while its
framework reports every call, and records those calls as nodes.

Values are tracked by identity (`id` of the object the function holds). All
state lives on the session object, which exists for one trace; the only
module-level object is the ContextVar saying which session (if any) is active
in the current thread/context, so nested LazyGraphs inline into the outer trace.

A trace runs with the cyclic garbage collector's automatic collections paused
(_pause_collector): cyclic garbage made meanwhile waits for its end.
"""
from __future__ import annotations

import collections
import contextvars
import copy
import dataclasses
import inspect
import enum
import itertools
import functools
import gc
import operator
import os
import sys
import types
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable
from types import MethodType

from ..backends import FRESH_ENTROPY, Backend, CallKind, foreign_rng_tokens, generator_state, get_backend
from . import codegen, escapes, passes
from .homes import function_homes, held_code
from .display import shown_only
from .ir import Graph, Kind, Node, Source, TraceResult, Value
from .handlers import inside_except
from .reads import MISSING, READERS, UNWATCHED, PythonReads, read_environment, signed
from .signature import Signature, container_snapshot, containers_changed, walk
from .stateful import (CallableStatefulProxy, SessionProxy, StatefulProxy, dict_key_read, read_attribute,
                       read_class_attribute, read_instance_dict, read_instance_item, own_class, recording_class)

_active: contextvars.ContextVar["TraceSession | None"] = contextvars.ContextVar(
    "lazytrace_active_session", default=None)

# enum members read at every framework call: an enum class attribute costs ~0.2 us on Python 3.11
# (EnumType.__getattr__ puts every attribute read of the class through Python), a global 20 ns
_OP, _GENERATOR, _STATE, _METADATA, _HISTORY, _DISPLAY, _READBACK, _ESCAPE, _UNKNOWN, _DYNAMIC_SHAPE = (
    CallKind.OP, CallKind.GENERATOR, CallKind.STATE, CallKind.METADATA, CallKind.HISTORY, CallKind.DISPLAY,
    CallKind.READBACK, CallKind.ESCAPE, CallKind.UNKNOWN, CallKind.DYNAMIC_SHAPE)
# kinds of calls on_call may record (a tuple: `in` tests identity first, in C; an enum's hash is Python's)
_RECORDED = (_OP, _GENERATOR, _UNKNOWN, _STATE, _DYNAMIC_SHAPE)
_EXTERNAL, _FROM_NODE, _INPUT = Source.EXTERNAL, Source.NODE, Source.INPUT
_NODE_OP, _NODE_GENERATOR, _NODE_STATE, _NODE_GUARD, _NODE_SETATTR = (Kind.OP, Kind.GENERATOR, Kind.STATE, Kind.GUARD,
                                                                      Kind.SETATTR)


class TraceSession:
    # (immutable values set by a few traces: read from the class until then, not set by __init__)
    untraceable_transient = False       # the reason it failed may not hold at the next call
    live_handed = False                 # a live input (a generator) handed to the function
    stateful_stack: _Exits | None = None        # where recorded objects' class swaps are undone (_run)
    proxied = False                     # objects passed in were handed as SessionProxy
    changed_reads: str | None = None    # Python state the function read and changed (add_reads)
    misused: str | None = None          # a tracer the framework refused where eager has an array (the backend
    #                                     sets it: a JAX tracer used in a thread the function started)

    def __init__(self, backend, *, include_generators=True, array_caching=True):
        self.backend = backend
        self.include_generators = include_generators
        self.array_caching = array_caching
        self.nodes: list[Node] = []
        self.inputs: list[Value] = []
        self.untraceable: str | None = None
        self.closed = False         # the function returned: its tracers now compute as their arrays
        self._values: dict[int, tuple[Any, Value]] = {}
        self._versions: dict[Any, int] = {}     # storage -> number of writes seen
        self._tainted: set = set()              # storages written by non-foldable calls
        self._tracked = backend.tracked_types
        # arguments kept as they are (dtypes ...); whether the backend replays some calls with other
        # arguments, or another callable: facts of its class (_backend_facts)
        self._literals, self._specializes, self._replays = _FACTS.get(type(backend)) or _backend_facts(backend)
        self._run_takes_caller = backend.run_takes_caller
        self._saw_generator = False
        self._objects = False                   # any non-array inputs (stateful, live) registered
        self._unkeyed_metadata = False          # any value whose metadata the key does not fix
        self._externals: list = []              # arrays used that no recorded call made (add_external)
        self._entry_checks: list = []           # checks of their metadata, for the graph's entry (add_external)
        # call outputs whose framework counts writes (Backend.write_count): (array, write count then,
        # Value, writes recorded then); check_input_writes compares the counts at the end
        self._counts_writes = type(backend).write_count is not Backend.write_count
        self._made: list = []
        self.backend_state = None               # the backend's own object for this trace (JAX: its Trace)
        self._unseen = backend.unseen_state()   # state calls cannot show changing (see on_call)
        self._filters = self._filters_seen = warnings.filters   # the warning filters (see _filters_changed)
        self._filter_count = len(warnings.filters)
        self._shows_warnings = _warning_display()
        self._displays: list = []               # text made from arrays (on_display)
        self._copied_unseen: list = []          # Values of arrays made unseen, set as attributes (copied)
        self._written: dict = {}                # (id(stateful object), attribute) -> (real, value, object, layout)
        self._checked_callables: set = set()    # (id(stateful object), attribute) guarded by identity
        self._checked_arrays: dict = {}         # (id(stateful object), attribute) -> array whose metadata is guarded
        self._deleted: set = set()              # (id(stateful object), attribute) deleted by the function
        self._rng: dict[int, tuple] = {}        # id(RNG) -> (RNG, its state after the last draw seen)
        self._input_writes: list = []           # (input array, its Value, its write count before the call)
        self._undo: list = []                   # callables putting back what the trace wrote (undo_writes)
        self._saved: set = set()                # storages whose memory before the trace _undo holds
        self._new_rngs: dict = {}               # id -> RNG drawn from, neither passed in nor the default one
        self.recorded: list = []                # objects whose attribute use is recorded (stateful)
        self._unrecorded_rngs: dict = {}        # id -> (generator whose draws no call shows, its state, what)
        # (its callbacks hold the session weakly: no reference cycle, which would keep the session
        # and what it holds until a collection; only the session holds its reads)
        session = weakref.ref(self)
        self.reads = PythonReads(lambda v: session()._snapshot(v, record=False), _NOTHING, _Same,
                                 known=lambda obj: session().value_of(obj) is not None,
                                 record=lambda obj: session()._record_reached(obj),
                                 generator_state=lambda obj: generator_state(backend, obj),
                                 state_reads=backend.state_reads())

    def release(self) -> None:
        """Let go of the arrays the trace saw (a graph keeps what it needs: its constants, in their
        Values). A session may live on after its trace (a proxy the function left behind holds
        it), and would keep every intermediate array of the function alive with it. It is in no
        reference cycle (tests/test_gc_objects.py): freed at the trace's end, without a collection."""
        self.reads.release()
        if self.nodes:
            self.unlink()
        self._values.clear()
        self._made.clear()
        self._written.clear()
        self._checked_arrays.clear()
        self._input_writes.clear()
        self._undo.clear()

    def unlink(self) -> None:
        """Cut Value.node, the back reference of Node.outputs, in the Values of the calls it
        recorded: a reference cycle per call, which would leave a dropped graph (and the calls a
        graph does not keep) to a full collection. A graph's code needs no Value's maker; views
        name a constant's (_calls_only gives those their own). (Each Value's attribute set in C:
        ~10 bytecodes a trace, not ~25 a call.)"""
        nodes, self.nodes = self.nodes, []
        collections.deque(map(setattr, itertools.chain.from_iterable(map(_OUTPUTS, nodes)), _NODE_NAMES,
                              itertools.repeat(None)), 0)

    # ---- values --------------------------------------------------------------
    def add_input(self, obj, kind="array", path="") -> Any:
        """Register an input leaf; return what the traced function should receive.
        kind: "array", "live" (an object used as is, e.g. an RNG generator) or "stateful"."""
        if kind == "array":
            handed = self.backend.wrap_input(obj, self)
            value = Value(_INPUT, meta=self.backend.brief(obj), storage=self.backend.storage_key(obj))
            self._input_writes.append((obj, value, self.backend.write_count(obj)))
        else:
            if kind == "stateful" and isinstance(obj, (list, tuple, dict, set, frozenset)):
                # iterating the proxy hands out the items themselves: their attributes would be baked
                raise NotTraceable(f"a stateful argument ({path}) is a {type(obj).__name__}: only the "
                                   f"attributes of the object passed itself are recorded; pass each "
                                   f"object as its own stateful argument")
            if kind == "stateful" and self.backend.reached_model(obj)[0]:
                # its submodules and parameters would be read through attributes of its own, unrecorded
                raise NotTraceable(f"a stateful argument ({path}) is a {type(obj).__name__} model: trace it "
                                   f"with trace_graph(model), or let the function reach it as a global")
            if kind == "live" and not isinstance(obj, self.backend.live_types):
                # another framework's generator (np.random.Generator in a torch function): handed
                # as is (its framework takes no proxy), its draws are not recorded (add_reads)
                handed = obj
                self._note_rng(obj, f"a {type(obj).__name__} passed in (another framework's)")
            else:
                handed = (CallableStatefulProxy if callable(obj) else StatefulProxy)(obj, self) if kind == "stateful" \
                    else self.backend.wrap_live(obj, self)
                self.proxied = self.proxied or isinstance(handed, SessionProxy)
                self.live_handed = self.live_handed or kind == "live"
            token = self.backend.rng_token(obj) if kind == "live" else None
            if token is not None:
                self._rng[id(obj)] = (obj, token)
            self._objects = True
            value = Value(_INPUT, meta=type(obj).__name__, storage=id(obj))
        value.path = path
        self.inputs.append(value)
        self._values[id(obj)] = (obj, value)
        self._values[id(handed)] = (handed, value)
        return handed

    def _made_here(self, value) -> bool:
        """Whether `value` is memory the trace allocated: not an input's, an external array's, or a
        view of either (which share their version counter)."""
        if value.source is not _FROM_NODE:
            return False
        storage, values = value.storage, self._values
        return all(v.storage != storage for v in self.inputs) and \
            all(values[id(obj)][1].storage != storage for obj in self._externals if id(obj) in values)

    def add_stateful(self, obj) -> Value:
        """An object the function reaches by itself (stateful=[...]): a constant reference."""
        value = Value(_EXTERNAL, meta=type(obj).__name__, storage=id(obj), obj=obj)
        self._values[id(obj)] = (obj, value)
        self._objects = True
        return value

    def add_external(self, obj) -> Value:
        """An array the function reached by itself (a global, a closure variable, a module's
        parameter): no key fixes its metadata, which may change in place between calls (resize_,
        transpose_, `.data =`, set_). The graph checks it at its entry, as first seen here, before
        any draw or write (a failed check traces again): what the trace decided on it, and on every
        array computed from it (`(g * 2).shape`, `zeros_like(g[1:])` folded, `g.contiguous()` handing
        back g itself, dead calls read for their metadata), then holds as for an input's. Every
        such array is checked, not only those whose metadata the function read: those decisions
        show no read."""
        backend = self.backend
        raw = backend.unwrap(obj)
        value = Value(_EXTERNAL, meta=backend.brief(raw), storage=backend.storage_key(raw), obj=obj)
        self._values[id(obj)] = (obj, value)
        self._unkeyed_metadata = True
        self._externals.append(obj)
        if not backend.metadata_fixed(raw):
            try:
                described = backend.describe(raw)
            except Exception as exc:        # noqa: BLE001 - a nested tensor's strides ...
                self.fail(f"uses an array it reached by itself whose metadata lazytrace cannot describe, "
                          f"so a graph could not check it ({type(exc).__name__})")
            else:
                self._entry_checks.append(Node(0, _NODE_GUARD, codegen.read_metadata, (value, backend, None), {},
                                               [value], (self.version(value),), expected=described))
        return value

    def value_of(self, obj) -> Value | None:
        entry = self._values.get(id(obj))
        return entry[1] if entry is not None and entry[0] is obj else None

    def _lift(self, obj, found: list, arrays: list | None = None):
        """Replace tracked objects in a call's arguments by Values (appended to `found`, in order;
        the objects themselves to `arrays`, where given: every array in the arguments, at any depth,
        for the backend's run)."""
        tp = type(obj)
        if not self._objects:
            if tp in _PLAIN:
                return obj
            # the common cases: a flat tuple, list or dict of arrays and numbers (a call's
            # arguments, `F.pad(x, [1, 1, 1, 1])`, `torch.stack([a, b])`, keyword arguments)
            if tp is tuple or tp is list:
                # each item's entry, looked up in C; every item a tracked array (`x + y`, `torch.stack([a,
                # b])`): their Values, without a Python loop (an entry is that object's where it is `is` it)
                entries = list(map(self._values.get, map(id, obj)))
                if None not in entries and all(map(_is, map(_FIRST, entries), obj)):
                    out = list(map(_SECOND, entries))
                    found += out
                    if arrays is not None:
                        arrays += obj
                    return tuple(out) if tp is tuple else out
                literals = self._literals
                out = []
                for x, entry in zip(obj, entries):
                    if entry is not None and entry[0] is x:
                        found.append(entry[1])
                        out.append(entry[1])
                        if arrays is not None:
                            arrays.append(x)
                        continue
                    tx = type(x)
                    if tx in literals:          # (no object of these types is tracked)
                        out.append(x)
                    elif tx is slice and type(x.start) in literals and type(x.stop) in literals \
                            and type(x.step) in literals:
                        out.append(x)           # `t[:, 1:]`: kept as it is
                    else:
                        out.append(self._lift(x, found, arrays))
                return tuple(out) if tp is tuple else out
            if tp is dict:
                values, literals = self._values, self._literals
                out = {}
                for k, x in obj.items():
                    if type(x) in literals:
                        out[k] = x
                        continue
                    entry = values.get(id(x))
                    if entry is not None and entry[0] is x:
                        found.append(entry[1])
                        out[k] = entry[1]
                        if arrays is not None:
                            arrays.append(x)
                    else:
                        out[k] = self._lift(x, found, arrays)
                return out
        if isinstance(obj, self._tracked):
            value = self.value_of(obj)
            if value is None:
                value = self.add_external(obj)
            found.append(value)
            if arrays is not None:
                arrays.append(obj)
            return value
        if tp is tuple or tp is list:
            return tp([self._lift(x, found, arrays) for x in obj])
        if tp is dict:
            return {k: self._lift(v, found, arrays) for k, v in obj.items()}
        if tp is slice:
            return slice(self._lift(obj.start, found, arrays), self._lift(obj.stop, found, arrays),
                         self._lift(obj.step, found, arrays))
        if isinstance(obj, tuple) and hasattr(tp, "_fields"):
            return tp(*[self._lift(x, found, arrays) for x in obj])
        if self._objects:                       # stateful or live objects among the inputs
            value = self.value_of(obj)
            if value is not None:
                found.append(value)
                return value
        return obj

    def version(self, value: Value) -> int:
        return self._versions.get(value.storage, 0)

    # ---- calls -----------------------------------------------------------------
    def on_call(self, func, args, kwargs, caller=None, facts=None):
        """Called by the backend's interceptor for every framework call (the hot path of a
        trace: one frame, enum members and attributes read once). `caller`: the frame making the
        call, where the backend knows it (else the frame below the interceptor's); `facts`:
        backend.call_facts(func), where the interceptor has it."""
        if self.closed:
            # a tracer used after the trace (by a generator the function returned, a closure, an
            # object it left behind): computed as eager would, on the arrays, and not recorded
            return self.backend.run_detached(func, args, kwargs)
        try:
            # the code making this call (graph.reads), from the frame below the interceptor's: that
            # one is lazytrace's own code (a backend's or stateful.py's), which reads never watches
            if caller is None:
                caller = sys._getframe(2)
            backend = self.backend
            if facts is None:
                facts = backend.call_facts(func)
            kind = facts.kind if facts.fixed else backend.classify(func, args, kwargs)
            # a call that may be recorded: whether a try or with block is around it, in the same walk
            # (True: inside_except, asked when it is recorded, says whether one may catch its error)
            recorded = kind in _RECORDED
            blocks = self.reads.on_call(caller, recorded)
            if kind is _METADATA and not self._unkeyed_metadata and args and id(args[0]) in self._values:
                return backend.run(func, args, kwargs)[0]     # covered by the signature key
            # (a change before a metadata read is seen here, at the next call that is recorded)
            filters = warnings.filters
            if filters is not self._filters_seen or len(filters) != self._filter_count:
                self._filters_changed()
            if backend.unseen_state() != self._unseen:
                self._unseen_state_changed()
            if self.untraceable is not None or not recorded and (kind is _DISPLAY or kind is _ESCAPE):
                if kind is _ESCAPE:
                    self.fail(f"{_name(func)} hands array memory (or an autograd hook) to code lazytrace cannot see")
                result = backend.run(func, args, kwargs)[0]
                return self.on_display(result, func, args, kwargs) if kind is _DISPLAY else result
            inputs: list[Value] = []
            arrays = [] if self._run_takes_caller else None     # (the arrays themselves, for run)
            try:
                largs = self._lift(args, inputs, arrays)
                lkwargs = self._lift(kwargs, inputs, arrays) if kwargs else {}
            except Exception as exc:
                # an array lazytrace cannot describe (a lazy module's uninitialized parameter, which
                # this call may be materializing): the call runs as in eager code, and the next call
                # of the signature traces again
                detail = str(exc).split(". ")[0].splitlines()[0] if str(exc) else ""
                self.fail(f"{_name(func)} was passed an array lazytrace cannot describe ({type(exc).__name__}: "
                          f"{detail})", transient=True)
                return backend.run(func, args, kwargs)[0]
            if facts.stores_arguments and kind is _OP and inputs and backend.stores_arguments(func):
                largs = self._fresh(largs, inputs)      # `x.grad = c`: the caller holds c, a copy per call
            written = self._versions        # (empty until a recorded call writes into an array)
            # (no write yet: zeros, as bytes, which the garbage collector does not follow)
            versions = tuple([written.get(v.storage, 0) for v in inputs]) if written else bytes(len(inputs))
            if kind is _GENERATOR:
                rngs = backend.rng_sources(func, args, kwargs)
                for rng in rngs:
                    if self._rng.get(id(rng), (rng, None))[1] not in (None, backend.rng_token(rng)):
                        self.fail(_UNSEEN_RNG)
                    if id(rng) not in self._rng:
                        self._new_rngs[id(rng)] = rng       # not passed in: a global, or made inside (add_reads)
            result, mutated = backend.run(func, args, kwargs, caller, facts, arrays) if self._run_takes_caller else \
                backend.run(func, args, kwargs)
            if kind is _GENERATOR:
                for rng in rngs:
                    self._rng[id(rng)] = (rng, backend.rng_token(rng))
            if kind is _UNKNOWN:        # (most of torch's calls)
                kind = _OP if mutated or isinstance(result, self._tracked) or _contains(result, self._tracked) \
                    else _READBACK if inputs else _METADATA
            if kind is not _OP:
                if kind is _METADATA or kind is _HISTORY:
                    # not in the key: the shape of a data-dependent result or of an array not passed in,
                    # and what happened before to memory the trace did not make (the version counter of
                    # an input, of a view of one, of one the function wrote)
                    if any(v.dynamic or v.source is _EXTERNAL for v in inputs) or \
                            kind is _HISTORY and not all(self._made_here(v) for v in inputs):
                        self._guard(func, largs, lkwargs, inputs, versions, result)
                    return result
                if kind is _READBACK:
                    self._guard(func, largs, lkwargs, inputs, versions, result)
                    return result
            # ---- recorded: a node (written out here: one frame per call) ----
            if kind is _OP and args and result is args[0] and backend.returned_its_input(func, args, result, mutated):
                return result   # `k.to(same dtype)`, `.contiguous()` of a contiguous array: the result is the input
            data = inputs
            metadata = facts.metadata and backend.metadata_inputs(func, largs, lkwargs, args, kwargs)
            if metadata:
                data = list(inputs)
                for arg in metadata:
                    if isinstance(arg, Value):          # read for its metadata only, if that is keyed:
                        if arg.dynamic or arg.source is _EXTERNAL:
                            break
                        data.pop(next(i for i, v in enumerate(data) if v is arg))
            constant_inputs = True
            tainted = self._tainted
            for v in data:
                if not v.foldable or v.storage in tainted:
                    constant_inputs = False
                    break
            if kind is _GENERATOR:
                self._saw_generator = True
                node_kind = _NODE_GENERATOR if self.include_generators else _NODE_OP
                foldable = not self.include_generators and not mutated and constant_inputs
            elif kind is _STATE:
                node_kind, foldable = _NODE_STATE, False
            else:
                node_kind = _NODE_OP
                # a new leaf requiring grad (`torch.ones(3, requires_grad=True)`) is made at every call, as in eager
                foldable = self.array_caching and constant_inputs and not self._requires_grad(result)
            target = func       # (what the graph calls)
            if not foldable:
                # (a number to swap for an array is among the arguments only where not each is one)
                if self._specializes and facts.specializes and len(inputs) < len(args):
                    largs = backend.specialize_args(func, args, lkwargs, largs)
                if self._replays and facts.replays:
                    target, largs, lkwargs = backend.replay_call(func, args, kwargs or {}, largs, lkwargs)
            node = Node(len(self.nodes), node_kind, target, largs, lkwargs, inputs, versions)
            if foldable:
                node.foldable = True
            if blocks and inside_except(caller, self.reads.root, self.reads.stop):
                node.guarded_by_except = True
            if target is not func:
                node.wrapper = func     # the graph checks it is still where the code found it
            for obj in mutated:
                value = self.value_of(obj)
                if value is None:
                    continue
                if value.source is _EXTERNAL and not backend.sees_creation:
                    self.fail(f"{_name(target)} writes into an array made by calls lazytrace does not see "
                              f"(e.g. {backend.name} array creation)")
                if not node.mutated:
                    node.mutated = []           # (the class's empty tuple until a call writes)
                node.mutated.append(value)
                self._versions[value.storage] = self._versions.get(value.storage, 0) + 1
                if facts.takes_metadata and not value.dynamic and \
                        any(v.dynamic or v.source is _EXTERNAL for v in inputs):
                    # its shape now another array's that no key fixes (`y.data = g`, `y.resize_as_(g)`
                    # of a global g or a data-dependent one): its metadata reads are guarded
                    value.dynamic = True
                    self._unkeyed_metadata = True
                if not foldable:
                    tainted.add(value.storage)
            # (only values registered as dynamic set _unkeyed_metadata: without it, none is)
            dynamic = (kind is _DYNAMIC_SHAPE or not backend.knows_dynamic_shapes
                       or self._unkeyed_metadata and any(v.dynamic for v in inputs))
            self._register_outputs(node, result, foldable, dynamic, facts.caller_owned or target is not func)
            self.nodes.append(node)
            if kind is _STATE:
                self._unseen = backend.unseen_state()       # a change this call shows, recorded
            return result
        except Exception:
            # if the function catches this, what it does next depends on whether the call raised,
            # which a graph cannot check (cholesky of a non-positive-definite input, ...)
            self.fail(f"{_name(func)} raised during the trace and the function went on")
            raise

    def on_metadata(self, func, args, caller, facts):
        """`func(*args)` reads the metadata of `args[0]` whatever the arguments (facts.kind METADATA,
        facts.fixed: `x.shape`, `x.dim()`, no keyword arguments), from the frame `caller`: where the
        signature key fixes that array's metadata, on_call's shortest path in a frame of its own
        (a third of the calls a trace of kornia's functions sees); every other case is on_call's."""
        if self.closed or self._unkeyed_metadata or not args or id(args[0]) not in self._values:
            return self.on_call(func, args, {}, caller, facts)
        try:
            self.reads.on_call(caller, False)       # (the code reading: its global reads watched)
            return func(*args)
        except Exception:
            self.fail(f"{_name(func)} raised during the trace and the function went on")
            raise

    def on_display(self, text, func=None, args=(), kwargs=None):
        """`str(x)`, `repr(x)`, `f"{x}"` of an array (`func(*args)` made `text`): asked by print
        or logging, for display, which a graph drops (a result that returns the text is refused,
        see finish); asked by other code (`float(str(x))`, `str(x)[:4]`, an f-string), text that
        may feed the computation: checked at every call, as a number read back is."""
        if func is not None and self.untraceable is None and \
                not shown_only(sys._getframe(1), (*self.backend.internal_modules, f"{self.backend.name}.")):
            inputs: list[Value] = []
            largs, lkwargs = self._lift(args, inputs), self._lift(kwargs, inputs) if kwargs else {}
            # (text of a constant too: it follows the framework's print options, which no key holds)
            self._guard(func, largs, lkwargs, inputs, [self._versions.get(v.storage, 0) for v in inputs], text,
                        constant_ok=False)
        elif isinstance(text, str) and text:
            self._displays.append(text)
        return text

    def _guard(self, func, args, kwargs, inputs, versions, result, constant_ok=True):
        if constant_ok and inputs and all(v.foldable and v.storage not in self._tainted for v in inputs):
            return  # a value read back from constants is itself constant
        self.nodes.append(Node(len(self.nodes), _NODE_GUARD, func, args, kwargs, inputs, versions,
                               expected=result))

    def _requires_grad(self, result) -> bool:
        backend = self.backend
        if isinstance(result, self._tracked):       # (most calls: one array, no generator made)
            return backend.requires_grad(backend.unwrap(result))
        items = result if isinstance(result, (tuple, list)) else ()
        return any(isinstance(x, self._tracked) and backend.requires_grad(backend.unwrap(x)) for x in items)

    def _register_outputs(self, node: Node, result, foldable: bool, dynamic: bool, caller_owned=True):
        """Values for the arrays `result` holds; `caller_owned`: False where the call is known to
        hand out none the caller holds (CallFacts), else backend.caller_owned is asked."""
        tracked = self._tracked
        if isinstance(result, tracked):
            node.result_structure = "single"
            items = ((None, result),)
        elif isinstance(result, (tuple, list)):
            node.result_structure = len(result)
            items = [(index, x) for index, x in enumerate(result) if isinstance(x, tracked)]
            if len(items) < len(result) and any(not isinstance(x, tracked) and _contains(x, tracked) for x in result):
                self.fail(f"{_name(node.target)} returns nested containers of arrays")
        else:
            node.result_structure = "single"
            items = ()
        if dynamic:
            self._unkeyed_metadata = True
        if not items:
            return
        backend = self.backend
        caller_owned = caller_owned and backend.caller_owned(node.target)
        outputs, values, versions = node.outputs, self._values, self._versions
        counts_writes = self._counts_writes
        for index, obj in items:
            meta, storage, grad, writes = backend.output_facts(obj)
            kept = foldable and not grad
            value = Value(_FROM_NODE, node, index, meta, storage, kept, obj if kept else None)
            if dynamic:
                value.dynamic = True
            if caller_owned:
                value.caller_owned = True
            outputs.append(value)
            values[id(obj)] = (obj, value)
            if counts_writes:
                self._made.append((backend.unwrap(obj) if backend.tracer_class is not None else obj, writes, value,
                                   versions.get(storage, 0) if versions else 0))

    # ---- stateful objects --------------------------------------------------------
    def on_setattr(self, obj, name: str, value):
        """Called from user code (interception active): framework calls made here are paused.
        Returns what the object is given: `value` without tracers (they are the trace's own)."""
        real = self._real(value)
        if self.untraceable is not None or name in self.backend.bookkeeping_attributes:
            return real
        with self.backend.suspended():
            self._record_setattr(obj, name, value)
        self._written[(id(obj), name)] = (real, value, obj, _layout(value))
        return real

    def on_missing_attribute(self, obj, name: str) -> None:
        """A read of `obj.name` found nothing (`hasattr`, getattr with a default): a guard checks
        that the attribute is still missing (unless this trace deleted it)."""
        if (self.untraceable is not None or name.startswith("__") or name in self.backend.bookkeeping_attributes
                or (id(obj), name) in self._deleted):
            return                      # (dunders: Python's and the frameworks' protocol lookups)
        with self.backend.suspended():
            inputs: list[Value] = []
            args = self._lift((obj, name), inputs)
            self.nodes.append(Node(len(self.nodes), _NODE_GUARD, read_attribute, args, {}, inputs,
                                   [self.version(v) for v in inputs], expected=_Same(MISSING)))

    def on_delattr(self, obj, name: str) -> None:
        """`del obj.name` in user code (after it happened): replayed as delattr."""
        self._written.pop((id(obj), name), None)
        self._deleted.add((id(obj), name))
        if self.untraceable is not None or name in self.backend.bookkeeping_attributes:
            return
        with self.backend.suspended():
            inputs: list[Value] = []
            args = self._lift((obj, name), inputs)
            self.nodes.append(Node(len(self.nodes), Kind.SETATTR, delattr, args, {}, inputs,
                                   [self.version(v) for v in inputs]))

    def settle_written(self):
        """A list or dict set as an attribute and then changed in place (kornia's mix augmentations:
        `self._params = p; self._params.update(dtype=...)`): the object gets its final contents
        (it holds a copy without tracers, see on_setattr) and the graph sets it again at its end."""
        for (_, name), (real, value, obj, layout) in list(self._written.items()):
            if layout is None or _same_layout(_layout(value), layout):
                continue
            if real is not value:           # (the trace has ended: no recording class is in the way)
                final = self._real(value)
                if type(real) is dict:
                    real.clear()
                    real.update(final)
                elif type(real) is list:
                    real[:] = final
                else:
                    setattr(obj, name, final)
            if self.untraceable is None:
                with self.backend.suspended():
                    self._record_setattr(obj, name, value)

    def _real(self, obj):
        """`obj` with the trace's tracers replaced by their arrays, through tuples, lists and dicts."""
        tp = type(obj)
        if isinstance(obj, self._tracked):
            return self.backend.unwrap(obj)
        if issubclass(tp, SessionProxy):        # `self.last = self`: the object, as in eager
            return obj.__wrapped__
        if tp is tuple or tp is list:
            return tp([self._real(x) for x in obj])
        if tp is dict:
            return {k: self._real(v) for k, v in obj.items()}
        return obj

    def _record_setattr(self, obj, name, value):
        inputs: list[Value] = []
        args = self._lift((obj, name, value), inputs)
        if not self.backend.sees_creation:
            args = (args[0], args[1], self._copy_made_unseen(args[2], inputs))
        if not self._rebuildable(args[2]):
            self.fail(f"sets attribute {name!r} of a stateful object to a {type(value).__name__} "
                      f"a graph cannot rebuild")
            return
        node = Node(len(self.nodes), Kind.SETATTR, setattr, args, {}, inputs,
                    [self.version(v) for v in inputs])
        self.nodes.append(node)

    def _copy_made_unseen(self, lifted, inputs: list):
        """`lifted` with each array made by calls lazytrace does not see (NumPy's np.zeros: a
        constant of the graph) replaced by a copy of it made at every call, as eager makes a new
        array each time (the caller may write into what it finds in the attribute)."""
        def copy(value):
            if value.source is not _EXTERNAL or id(value.obj) in self.reads.reached():
                return value        # (an array the function reached is the same object in eager)
            self._copied_unseen.append(value)       # (its constant becomes a copy when the trace ends)
            return self._copy_per_call(value, self.backend.clone(value.obj), inputs)
        return _map_values(lifted, copy)

    def _fresh(self, lifted, inputs: list):
        """`lifted` with each cached constant replaced by a copy made at every call, as eager makes
        a new array each time (the caller may write into what it finds in the attribute)."""
        def fresh(value):
            if not value.foldable or value.source is _EXTERNAL or value.obj is None:
                return value
            made = self.backend.clone(value.obj)
            # the attribute now holds the object this trace made; the graph keeps a copy of its own,
            # which the caller cannot write into
            value.obj = self.backend.clone(value.obj)
            return self._copy_per_call(value, made, inputs)
        return _map_values(lifted, fresh)

    def _copy_per_call(self, value: Value, made, inputs: list) -> Value:
        """A node copying `value` at every call (`made`: its copy at this trace)."""
        node = Node(len(self.nodes), _NODE_OP, self.backend.clone, (value,), {}, [value], [self.version(value)])
        self._register_outputs(node, made, False, value.dynamic)
        self.nodes.append(node)
        inputs.append(node.outputs[0])
        return node.outputs[0]

    def _rebuildable(self, lifted) -> bool:
        """Arrays (computed by the graph, constants included: made at every call, see
        _separate_shared_memory; or external ones, the same object as in eager), literals, and
        tuples, lists and dicts of them."""
        if isinstance(lifted, Value):
            return True
        if type(lifted) in (tuple, list) or isinstance(lifted, tuple) and hasattr(type(lifted), "_fields"):
            return all(self._rebuildable(x) for x in lifted)
        if type(lifted) is dict:
            return all(self._rebuildable(x) for x in lifted.values())
        return _is_literal(lifted, self.backend)

    def on_getattr(self, obj, name: str, value):
        if self.untraceable is not None or name in self.backend.bookkeeping_attributes:
            return value
        written = self._written.get((id(obj), name))
        if written is not None and written[0] is value:
            return written[1]   # what the graph itself set earlier in this call
        if callable(value) and not isinstance(value, self._tracked):
            # a function or module held in an attribute (kornia's `Lambda.func`, an augmentation's
            # `_param_generator`), a method an attribute set later would hide: the graph baked in
            # what it did, so the same one must be there
            with self.backend.suspended():
                self._record_callable(obj, name, value)
            return value
        with self.backend.suspended():
            return self._record_getattr(obj, name, value)

    def _record_getattr(self, obj, name, value):
        inputs: list[Value] = []
        args = self._lift((obj, name), inputs)
        versions = [self.version(v) for v in inputs]
        if isinstance(value, self._tracked):
            node = Node(len(self.nodes), Kind.GETATTR, getattr, args, {}, inputs, versions)
            if self.value_of(value) is None and type(value) is not self.backend.tracer_class:
                value = self.backend.wrap_input(value, self)     # NumPy: its methods are recorded too
            self._register_outputs(node, value, False, False)
            self.nodes.append(node)
            # read live, its shape, dtype, device ... are in no key (another object of a class traced
            # with `self` stateful, the attribute set anew): checked (once), before anything runs
            array = self.backend.unwrap(value)
            if self._checked_arrays.setdefault((id(obj), name), array) is array:
                self.nodes.append(Node(len(self.nodes), _NODE_GUARD, read_array_metadata, (*args, self.backend), {},
                                       inputs, versions, expected=self.backend.describe(array)))
        else:
            self._note_rng(value, f"a {type(value).__name__} held by attribute {name!r}")
            expected = self._snapshot(value)        # numbers, strings, a dict of flags or of samplers ...
            if expected is _NOTHING:
                self.fail(f"reads attribute {name!r} ({type(value).__name__}) of a stateful object, and "
                          f"lazytrace cannot record what is read from that")
                return value
            self.nodes.append(Node(len(self.nodes), _NODE_GUARD, read_attribute, args, {}, inputs, versions,
                                   expected=expected))
        return value

    def _note_rng(self, obj, what: str):
        """A random generator whose draws this trace does not record (random.Random, another
        framework's): its state is compared after the trace (add_reads)."""
        if id(obj) not in self._unrecorded_rngs:
            state = generator_state(self.backend, obj)
            if state is not None:
                self._unrecorded_rngs[id(obj)] = (obj, state, what)

    def on_class_attribute(self, obj, name: str, descriptor) -> None:
        """`obj.name` found a property or other descriptor on the object's class: what it gave was
        recorded as it ran (a property's own reads of the object), so the same one must be there."""
        if self.untraceable is not None or (id(obj), name) in self._checked_callables:
            return
        self._checked_callables.add((id(obj), name))
        with self.backend.suspended():
            inputs: list[Value] = []
            args = self._lift((obj, name), inputs)
            self.nodes.append(Node(len(self.nodes), _NODE_GUARD, read_class_attribute, args, {}, inputs,
                                   [self.version(v) for v in inputs], expected=_Same(descriptor)))
        if isinstance(descriptor, (classmethod, staticmethod, property, functools.cached_property)):
            self.reads.class_method(descriptor, own_class(obj))

    def on_attribute_code(self, obj, fn) -> None:
        """A `__getattr__` of the user's class answered a read of `obj`: what its code reads (a
        global config) is checked as a property's is."""
        if self.untraceable is None and (id(obj), "__getattr__") not in self._checked_callables:
            self._checked_callables.add((id(obj), "__getattr__"))
            self.reads.class_method(staticmethod(fn), own_class(obj))

    def on_instance_dict(self, obj, frame) -> None:
        """The code at `frame` read the __dict__ of a stateful object (`vars(obj).get("k", 0)`,
        `obj.__dict__["k"]`), which no attribute read shows: a guard checks the entry it looks up,
        or the whole dict where it uses it otherwise. Reads by the frameworks' own code (nn.Module
        looks at its __dict__ at every attribute access), the standard library's and tools' are not
        the function's."""
        if self.untraceable is not None or \
                str(frame.f_globals.get("__name__", "")).partition(".")[0] in UNWATCHED:
            return
        key = dict_key_read(frame.f_code, frame.f_lasti)
        if key is not None and ((id(obj), key) in self._written or key in self.backend.bookkeeping_attributes):
            return              # what the function set itself earlier in this call
        with self.backend.suspended():
            inputs: list[Value] = []
            what = "entry" if key is not None else "whole __dict__"
            args = self._lift((obj, key) if key is not None else (obj,), inputs)
            if key is not None:
                reader, found = read_instance_item, read_instance_item(obj, key)
                expected = _Same(MISSING) if found is MISSING else self._snapshot(found)
            else:
                reader, expected = read_instance_dict, self._snapshot(read_instance_dict(obj))
            if expected is _NOTHING:
                self.fail(f"reads the {what} of the __dict__ of a stateful object ({type(obj).__name__}) "
                          f"holding something lazytrace cannot record")
                return
            self.nodes.append(Node(len(self.nodes), _NODE_GUARD, reader, args, {}, inputs,
                                   [self.version(v) for v in inputs], expected=expected))

    def _record_callable(self, obj, name, value):
        if (id(obj), name) in self._checked_callables:
            return                  # checked once
        self._checked_callables.add((id(obj), name))
        inputs: list[Value] = []
        args = self._lift((obj, name), inputs)
        expected = _SameMethod(value) if isinstance(value, MethodType) else _Same(value)
        self.nodes.append(Node(len(self.nodes), _NODE_GUARD, read_attribute, args, {}, inputs,
                               [self.version(v) for v in inputs], expected=expected))
        # its code (`self.gain()` returning CONFIG["gain"], or a helper's) runs as the object's, but no
        # stack shows it where it makes no framework call: walked as a function called by name
        func = value.__func__ if isinstance(value, MethodType) else value
        if isinstance(func, types.FunctionType):
            self.reads.class_method(staticmethod(func), own_class(obj))

    def _snapshot(self, obj, record=True):
        """What a guard compares a value read from a stateful object with: literals by value,
        containers item by item (copied: they may change in place), other objects by identity
        (and recorded themselves if `record`); _NOTHING if something in it cannot be checked."""
        if _is_literal(obj, self.backend):
            return obj
        if type(obj) in (set, frozenset) and all(_is_literal(x, self.backend) for x in obj):
            return type(obj)(obj)
        if isinstance(obj, tuple) or type(obj) is list:
            items = [signed(self._snapshot(x, record)) for x in obj]      # (0.0 == -0.0: SignedZero)
            if any(x is _NOTHING for x in items):
                return _NOTHING
            return obj if all(a is b for a, b in zip(items, obj)) and type(obj) is not list else \
                (type(obj)(*items) if hasattr(type(obj), "_fields") else type(obj)(items))
        if type(obj) is dict:
            if not all(_is_literal(k, self.backend) for k in obj):
                return _NOTHING
            items = {k: signed(self._snapshot(v, record)) for k, v in obj.items()}
            return _NOTHING if any(v is _NOTHING for v in items.values()) else items
        read = self.backend.baked_contents(obj)
        if read is not None:
            return _SameContents(obj, read)
        if (not record or isinstance(obj, self._tracked) or self.value_of(obj) is not None
                or self._record_object(obj)):
            return _Same(obj)       # an array in a container: used live, checked by identity
        return _NOTHING

    def _record_object(self, obj, model=True) -> bool:
        """Make an object read from a stateful one stateful too, for the rest of the trace; a
        model (one held in a list attribute, not registered as a submodule) as a global model is:
        its submodules too, and its parameters, buffers, submodules and hooks checked by identity."""
        if self.stateful_stack is None or isinstance(obj, self._tracked) or type(obj) in (set, frozenset):
            return False
        objects, structure = self.backend.reached_model(obj) if model else ((), ())
        refused = self.backend.model_refused(objects) if objects else None
        if refused is not None:
            self.fail(refused)
            return False
        try:
            self.stateful_stack.enter_context(recording_class(obj, self, _active.get))
        except TypeError:           # its class cannot be swapped (slots, builtins ...)
            return False
        self.recorded.append(obj)
        self.add_stateful(obj)
        if model:
            for part in objects:
                if self.value_of(part) is None:
                    self._record_object(part, model=False)
            self.reads.note_structure(structure)
            for module, attribute in self.backend.model_state_reads(objects):
                self.reads.note_framework_state(module, attribute)
        return True

    def add_reads(self, reads: PythonReads):
        """Guards on the globals and closure variables the function read by itself (graph.reads)."""
        reads.settle()
        changed = reads.changed()
        if changed is not None:
            self.changed_reads = (f"changes the {changed} while it runs: a graph could not replay that "
                                  f"(traced once more in case it was a cache being filled)")
            return
        drawn = reads.drawn() if self.include_generators else None
        for obj, state, what in self._unrecorded_rngs.values() if self.include_generators else ():
            if generator_state(self.backend, obj) != state:
                drawn = what
        if drawn is not None:
            self.fail(f"draws random numbers from {drawn}, which lazytrace does not record: a graph "
                      f"would repeat the values of its trace")
        reached = reads.reached()
        if any(i not in reached for i in self._new_rngs):
            # `torch.Generator().manual_seed(0)` inside: eager draws from a new generator at every call,
            # a graph would go on drawing from the one this trace made
            self.fail("draws from a random generator made inside the function (not passed in, not a "
                      "global): a graph could not replay that")
        self.check_iterators(ran=True)
        for reader, (obj, *rest), expected, what in reads.guards():
            value = self.value_of(obj)
            if value is None:
                value = self.add_stateful(obj)
                value.meta = what
            self.nodes.append(Node(len(self.nodes), _NODE_GUARD, reader, (value, *rest), {}, [value],
                                   [self.version(value)], expected=expected))
        if reads.environment:           # which variables it reads is not known: all of them
            value = self.value_of(os.environ) or self.add_stateful(os.environ)
            value.meta = "os.environ"
            self.nodes.append(Node(len(self.nodes), _NODE_GUARD, read_environment, (value,), {}, [value],
                                   [self.version(value)], expected=read_environment(os.environ)))

    def check_iterators(self, ran: bool) -> None:
        """Fail the trace if the function reaches an iterator by itself that it may have advanced
        (PythonReads.iterator: before it runs, one whose position cannot be read; after, one moved)."""
        iterator = self.reads.iterator(ran)
        if iterator is not None:
            self.fail(f"reads {iterator}: an iterator's position, which next() moves, is nothing a "
                      f"graph can check, so it would return the traced item again")

    def _held_arrays(self, reads, reached) -> set | None:
        """ids of what the trace checks by identity or records, with what those hold a few levels
        down (attributes, container items): arrays in containers read from stateful objects (a
        module's `flags` dict), arrays held by objects such a one holds (kornia's samplers' `low`,
        in the `sampler_dict` of a parameter generator, a submodule: read by torch.distributions'
        code, which records nothing). None if there is too much to look through (_check_externals:
        then nothing is taken as held)."""
        held = set(reached)
        objects = [obj for node in self.nodes if node.kind is _NODE_GUARD for obj in reads.held(node.expected)]
        objects += self.recorded
        for _ in range(_HELD_DEPTH):
            found = []
            for obj in objects:
                held.add(id(obj))
                if isinstance(obj, (list, tuple)):
                    children = obj
                elif isinstance(obj, dict):
                    children = obj.values()
                else:
                    attributes = getattr(obj, "__dict__", None)
                    children = attributes.values() if isinstance(attributes, dict) and not isinstance(obj, type) else ()
                found.extend(c for c in children if id(c) not in held and not isinstance(c, _LEAVES))
            if len(held) + len(found) > _HELD_MAX:
                return None
            objects = found
        held.update(map(id, objects))
        return held

    def _record_reached(self, obj) -> tuple:
        """A model the function reaches by itself (a global, a closure variable): its attributes
        are recorded like those of `stateful` objects (`model.eval()` after the trace is seen);
        returns the containers of its structure, which the caller checks item by item."""
        objects, structure = self.backend.reached_model(obj)
        if any(self.value_of(o) is not None for o in objects):
            return ()           # bound or stateful already
        refused = self.backend.model_refused(objects) if objects else None
        if refused is not None:
            self.fail(refused)
            return ()
        for o in objects:
            self._record_object(o)
        return structure

    def _unseen_state_changed(self):
        """Global state changed without a call showing it: record the change if the backend can
        replay it (autocast), else this signature runs eagerly."""
        now = self.backend.unseen_state()
        change = self.backend.state_change(self._unseen, now)
        if change is None:
            self.fail(_UNSEEN_STATE)
            return
        func, args = change
        self.nodes.append(Node(len(self.nodes), _NODE_STATE, func, args, {}, [], []))
        self._unseen = now

    def before_write(self, target):
        """Called by a backend before a call writes `target` (a tracer or an array). The memory of an
        input or of an array the function reached by itself is saved once, so that the function can
        run again on what the caller passed if the trace cannot finish (undo_writes)."""
        raw = self.backend.unwrap(target)
        storage = self.backend.storage_key(raw)
        if storage in self._saved:
            return
        value = self.value_of(target)
        if value is not None and value.source is _FROM_NODE and \
                all(storage != v.storage for v in self.inputs):
            return          # made inside the function: nobody else sees it
        self._saved.add(storage)
        restore = self.backend.snapshot(raw)
        if restore is not None:
            self._undo.append(restore)

    def undo_writes(self):
        """Put back the inputs and reached arrays the trace wrote, and the framework's global RNG,
        before the function runs again eagerly (a failure the trace caused, lists it changed): it
        would otherwise write them twice (`x += 1` once more) and draw other numbers than eager."""
        while self._undo:
            self._undo.pop()()

    def _filters_changed(self):
        """Warnings made errors inside the function (`warnings.simplefilter("error")` in a
        `catch_warnings` block, the RuntimeWarning of np.log(0) caught as a fallback), or recorded
        (`catch_warnings(record=True)`, then `if w:`): a graph would replay the call under the
        caller's filters, a warning where eager raised or branched. Filters that only hide or show
        warnings change no result."""
        current = warnings.filters
        if any(f[0] == "error" and f not in self._filters for f in current):
            self.fail("warnings are made errors inside the function (warnings.simplefilter('error')): a graph "
                      "would replay its calls under the caller's warning filters")
        elif _warning_display() != self._shows_warnings:
            self.fail("warnings are recorded inside the function (catch_warnings(record=True)): what it does "
                      "with them depends on warnings a graph would not record")
        self._filters_seen, self._filter_count = current, len(current)

    def check_input_writes(self):
        """An input written more often than the calls recorded show (torch's `set_` reaches no
        TorchFunctionMode), or an array a call made written with none recorded, cannot be
        replayed: this signature runs eagerly."""
        for obj, value, before in self._input_writes:
            if before is not None and self.backend.write_count(obj) - before > self._versions.get(value.storage, 0):
                self.fail(f"an input ({value.path}) was written by a call lazytrace does not see (e.g. set_)")
        # an array a call made, written since with no recorded write (a call may write several times)
        made = self._made
        counts = list(map(_SECOND, made))
        now = self.backend.write_counts(list(map(_FIRST, made)))
        if now == counts:
            return
        versions = self._versions
        for count, before, (_, _, value, recorded) in zip(now, counts, made):
            if count != before and before is not None and versions.get(value.storage, 0) == recorded:
                self.fail("an array made inside was written by a call lazytrace does not see (e.g. set_)")
                return

    def fail(self, reason: str, transient: bool = False):
        """This signature runs eagerly; `transient`: its next call may trace (what stopped this
        trace changes with the call itself)."""
        if self.untraceable is None:
            self.untraceable = reason
            self.untraceable_transient = transient

    # ---- running ---------------------------------------------------------------
    def __enter__(self):
        """The function runs under the trace from here to __exit__ (_run enters it in its _Exits:
        a class's methods, not a @contextmanager generator, whose machinery ran ~100 bytecodes a trace)."""
        restore, rngs = self.backend.enter_rngs()      # the global RNG(s): undone, compared in __exit__
        if restore is not None:
            self._undo.append(restore)
        for rng, token in rngs:
            self._rng[id(rng)] = (rng, token)
        self._foreign = foreign_rng_tokens(self.backend) if self.include_generators else None
        self._token = _active.set(self)     # reset in __exit__ whatever happens: a session left active
        try:                                # would make every later LazyGraph call of this thread run eagerly
            self._intercept = self.backend.intercept(self)
            self._intercept.__enter__()
        except BaseException:
            _active.reset(self._token)
            self.closed = True
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self._intercept.__exit__(exc_type, exc, tb)
        finally:
            self._intercept = None      # (it holds the session: a reference cycle)
            _active.reset(self._token)
            self.closed = True
        if exc_type is not None:
            return
        if self.backend.unseen_state() != self._unseen:
            self._unseen_state_changed()
        if self.include_generators:
            token = self.backend.rng_token
            for rng, before in self._rng.values():      # (a loop: no generator expression's frame)
                if token(rng) != before:
                    self.fail(_UNSEEN_RNG)
                    break
        foreign = self._foreign
        if foreign is not None and foreign_rng_tokens(self.backend) != foreign:
            self.fail("draws random numbers from a generator lazytrace does not record (Python's "
                      "`random`, or another framework's global one such as np.random in a torch "
                      "function): a graph would repeat the values of its trace")

    def finish(self, result) -> tuple[TraceResult, Any]:
        """Map the function's result to Values; return the trace and the result
        to hand back to the caller (real arrays, not tracer objects)."""
        backend = self.backend
        tracked = self._tracked
        copies: dict = {}       # id(cached constant) -> the copy handed to the caller
        reached = self.reads.reached() if not backend.sees_creation else ()

        def out(obj):
            if isinstance(obj, tracked):
                value = self.value_of(obj)
                if value is None:
                    value = self.add_external(obj)
                real = backend.unwrap(obj)
                if value.source is _EXTERNAL and not backend.sees_creation and id(real) not in reached:
                    value.foldable = True       # made inside by calls lazytrace does not see (np.zeros): a
                                                # new array at every call in eager, so a copy of the constant
                if value.foldable and self.untraceable is None:
                    # the graph keeps this object as a constant: the caller gets a copy, as at
                    # every replay, so writing into the result cannot change later calls (no graph
                    # is made of a trace that failed: its result is eager's, an input handed back
                    # by a call it could not see, np.ascontiguousarray(x), is that input)
                    if id(real) not in copies:
                        copies[id(real)] = backend.clone(real)
                    real = copies[id(real)]
                return value, real
            tp = type(obj)
            if issubclass(tp, SessionProxy) and self.value_of(obj) is not None:
                return self.value_of(obj), obj.__wrapped__      # an object passed in (`return self`)
            if any(obj is held for held in self.recorded):     # a stateful one (a bound method's self)
                return self.value_of(obj), obj
            if tp is tuple or tp is list or isinstance(obj, tuple) and _rebuilds(tp, obj):
                pairs = [out(x) for x in obj]
                rebuild = (lambda xs: tp(*xs)) if hasattr(tp, "_fields") else tp
                return rebuild([p[0] for p in pairs]), rebuild([p[1] for p in pairs])
            if tp is dict or tp in _MAPPINGS:          # (a defaultdict, a dict subclass: not rebuilt)
                pairs = {k: out(v) for k, v in obj.items()}
                return tp({k: p[0] for k, p in pairs.items()}), tp({k: p[1] for k, p in pairs.items()})
            if tp is str and any(text in obj for text in self._displays):
                self.fail("returns text made from an array's values (str, repr, format): a graph would "
                          "return the text of its trace")
            elif not _is_literal(obj, backend):
                self.fail(f"returns a {tp.__name__}, which a graph cannot rebuild")
                if backend.tracer_class is not None:    # arrays in it, as eager gives them
                    obj = escapes.release(obj, backend.tracer_class)
            return obj, obj

        if self.untraceable is None:
            self._separate_shared_memory(result, reached)
        structure, real = out(result)
        del out     # (a recursive closure: a reference cycle holding the session else)
        if backend.sees_every_array:
            self._check_externals()
        if self._entry_checks:
            self._add_entry_checks()
        trace = TraceResult(self.nodes, self.inputs, structure, self.untraceable)
        return trace, real

    def _separate_shared_memory(self, result, reached) -> None:
        """Arrays returned together that share memory (a constant and its view, a view of a
        constant that runs at every call), and arrays set as attributes in memory of a constant,
        are made at every call, as in eager, not copied one by one from constants: the caller
        gets them sharing memory, writes into one reach no later call, and what the function
        writes or views later is that memory."""
        backend = self.backend
        shared = set()
        for node in self.nodes:
            if node.kind is _NODE_SETATTR:
                stack = list(node.args[2:])     # (a `del` has no value)
                while stack:
                    item = stack.pop()
                    if isinstance(item, Value):
                        if item.source is _FROM_NODE and _in_constant_memory(item):
                            shared.add(item.storage)
                    elif isinstance(item, (tuple, list)):
                        stack.extend(item)
                    elif type(item) is dict:
                        stack.extend(item.values())
        found: dict = {}        # storage -> {id: Value or None}
        for value in self._copied_unseen:   # (also set as an attribute: a copy apart from any other)
            found.setdefault(value.storage, {})[("attribute", id(value))] = value
            value.obj = backend.clone(value.obj)    # the attribute holds the trace's array: not the graph's
        stack = [result]
        while stack:
            obj = stack.pop()
            if isinstance(obj, self._tracked):
                real = backend.unwrap(obj)
                value = self.value_of(obj)
                storage = value.storage if value is not None else backend.storage_key(real)
                found.setdefault(storage, {})[id(real)] = value
            elif isinstance(obj, (tuple, list)):
                stack.extend(obj)
            elif isinstance(obj, dict):
                stack.extend(obj.values())
        for storage, values in found.items():
            if len(values) > 1 or any(v is not None and not v.foldable for v in values.values()):
                if len(values) > 1 and not backend.sees_creation and \
                        any(v is None or v.source is _EXTERNAL for v in values.values()) and \
                        not all(id_ in reached for id_ in values):
                    self.fail("returns or sets as attributes arrays sharing memory made by calls lazytrace does "
                              "not see: a graph would copy them apart")
                    return
                shared.add(storage)
        if shared:
            passes.demote_storages(self.nodes, shared)

    def _add_entry_checks(self):
        """The checks of the external arrays' metadata (add_external) go first: before any draw or
        write, a failed one traces again. Not those of arrays made inside by calls the backend does
        not see (NumPy's `np.zeros(3)`: a new array at each eager call, its metadata the code's, a
        constant of the graph's own), which nothing the trace watches holds."""
        checks = self._entry_checks
        if not self.backend.sees_creation:
            reached = self.reads.reached()
            if any(id(n.inputs[0].obj) not in reached for n in checks):
                reached = self._held_arrays(self.reads, reached)
            if reached is not None:         # (None: too much to look through, each checked)
                checks = [n for n in checks if id(n.inputs[0].obj) in reached and not n.inputs[0].foldable]
        backend = self.backend
        for node in checks:
            # the backend's native check, made here, out of the function (inside, `with torch.autocast`
            # would be part of the dispatch keys it compares), of an array as first seen
            raw = backend.unwrap(node.inputs[0].obj)
            try:
                native = backend.metadata_check(raw) if backend.describe(raw) == node.expected else None
            except Exception:       # noqa: BLE001 - the comparison of describe() itself, at each call
                native = None
            node.args = (*node.args[:2], native)
        for position, node in enumerate(checks, len(self.nodes)):
            node.position = position
        self.nodes[:0] = checks

    def _check_externals(self):
        """Arrays used or returned that no seen call made must be held where the trace watches them."""
        reached = self.reads.reached() if self._externals else ()
        if any(id(obj) not in reached for obj in self._externals):
            held = self._held_arrays(self.reads, reached)
            # (too much to look through: not known to be held, so not taken for an external array)
            if held is None or any(id(obj) not in held for obj in self._externals):
                self.fail(f"uses a {self.backend.name} array made by a call lazytrace does not see "
                          f"(Tensor.as_subclass, nn.Parameter(x), torch.Tensor(x), DLPack, nested tensors, "
                          f"work of another thread ...) or held where it does not look: a graph would bake it")


#: builtins giving a number of an object's identity (`id(x)`, `hash(x)` of a tensor): a new one at
#: every call. Code reading one as a global runs eagerly
_IDENTITY_BUILTINS = frozenset({"id", "hash"})
#: (backend class, include_generators) -> the names that make code naming one run eagerly
_EAGER_NAMES: dict = {}


def _eager_names(backend, include_generators: bool) -> frozenset:
    key = (type(backend), include_generators)
    names = _EAGER_NAMES.get(key)
    if names is None:
        names = _EAGER_NAMES[key] = backend.unseen_changes | (FRESH_ENTROPY if include_generators else frozenset())
    return names


#: backend class -> (arguments kept as they are, whether it specializes arguments, whether it replays
#: some calls with another callable): TraceSession's facts of its backend, taken once per class
_FACTS: dict = {}


def _backend_facts(backend) -> tuple:
    facts = _FACTS[type(backend)] = (_PLAIN | frozenset(backend.static_types),
                                     type(backend).specialize_args is not Backend.specialize_args,
                                     type(backend).replay_call is not Backend.replay_call)
    return facts


def _in_constant_memory(value: Value) -> bool:
    """Whether `value` is a constant, or a view made by calls (of the same memory) from one."""
    while value is not None:
        if value.foldable:
            return True
        node = value.node
        value = next((v for v in node.inputs if v.storage == value.storage), None) if node is not None else None
    return False


def _warning_display() -> tuple:
    """Where warnings go: catch_warnings(record=True) replaces these to collect them in a list."""
    return warnings.showwarning, getattr(warnings, "_showwarnmsg_impl", None)


_PLAIN = frozenset({int, float, bool, str, type(None), complex, type(Ellipsis)})   # arguments never tracked
#: dict subclasses a graph rebuilds as `tp({...})` (codegen._output_expr)
_MAPPINGS = frozenset({collections.OrderedDict, collections.Counter})
_OUTPUTS = operator.attrgetter("outputs")
_NODE_NAMES = itertools.repeat("node")     # (repeat: an endless iterator, read by map in C)


def _rebuilds(tp, obj) -> bool:
    """Whether a tuple subclass is rebuilt from its items as a graph rebuilds it: a namedtuple,
    torch.Size, a structseq (torch.return_types.max) take them; a class with its own __new__ may
    not (a list subclass is never rebuilt: codegen keeps only plain lists)."""
    if hasattr(tp, "_fields"):
        return True
    try:
        again = tp(list(obj))
    except Exception:
        return False
    return type(again) is tp and len(again) == len(obj) and all(a is b for a, b in zip(again, obj))


class _Shape(tuple):
    """A container's type and keys (or length) in a _layout."""


def _layout(obj) -> list | None:
    """What a list, tuple or dict holds, through nested ones: their shapes and the objects in
    them (kept alive, compared by identity in _same_layout); None for anything else."""
    if type(obj) not in (dict, list, tuple):
        return None
    out, seen = [], set()

    def walk(x):
        tp = type(x)
        if tp not in (dict, list, tuple) or id(x) in seen:
            out.append(x)
            return
        seen.add(id(x))
        out.append(_Shape((tp, *x) if tp is dict else (tp, len(x))))
        for item in x.values() if tp is dict else x:
            walk(item)

    walk(obj)
    return out


def _same_layout(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x is y or type(x) is _Shape and type(y) is _Shape and x == y
                                    for x, y in zip(a, b))


def _name(func) -> str:
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)


def _contains(obj, types) -> bool:
    if isinstance(obj, types):
        return True
    if isinstance(obj, (tuple, list)):
        return any(_contains(x, types) for x in obj)
    if isinstance(obj, dict):
        return any(_contains(x, types) for x in obj.values())
    return False


_NOTHING = object()
_FIRST, _SECOND, _is = operator.itemgetter(0), operator.itemgetter(1), operator.is_


def read_array_metadata(obj, name: str, backend):
    """What a guard compares for an array read from an attribute of a stateful object: its
    description in a cache key (type, shape, dtype, device ...), or MISSING if it is no array."""
    value = getattr(obj, name, MISSING)
    return backend.describe(value) if isinstance(value, backend.array_types) else MISSING


read_array_metadata.hoistable = True       # reads the object, not arrays the graph computed: passes.py
read_array_metadata.describe = lambda node: (f"the array in attribute {node.args[1]!r} of a stateful object was "
                                             f"{node.expected!r} when traced and is another now")


class _Same:
    """Compares equal to exactly the object it holds: identity inside a guard's value comparison
    (`{"degrees": <sampler>}` read from a module compares its sampler by identity). Guards put
    the expected value on the left, so this __eq__ runs first (a NumPy array on the left would
    compare elementwise)."""

    __slots__ = ("obj",)
    __hash__ = None

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return other is self.obj

    def __ne__(self, other):
        return other is not self.obj

    def __repr__(self):
        return f"<the same {type(self.obj).__name__}>"


class _SameMethod(_Same):
    """A bound method, made anew at each attribute read: the same function bound to the same object."""

    __slots__ = ()

    def __eq__(self, other):
        return type(other) is MethodType and other.__func__ is self.obj.__func__ \
            and other.__self__ is self.obj.__self__

    def __ne__(self, other):
        return not self == other


class _SameContents(_Same):
    """The same object holding the same contents: host memory of another framework (a NumPy
    table read by a torch, TensorFlow or JAX function) that a conversion call (tf.constant,
    torch.tensor, jnp.asarray) may have copied into a constant; an in-place write must be seen."""

    __slots__ = ("contents", "read")

    def __init__(self, obj, read):
        super().__init__(obj)
        self.read = read
        self.contents = read(obj)

    def __eq__(self, other):
        return other is self.obj and self.read(other) == self.contents

    def __ne__(self, other):
        return not self.__eq__(other)


def _is_literal(obj, backend) -> bool:
    return (obj is None or type(obj) in (int, float, bool, complex, str, bytes, slice, type(Ellipsis))
            or isinstance(obj, enum.Enum) or isinstance(obj, backend.static_types))


@dataclass(frozen=True)
class TraceOptions:
    include_generators: bool = True
    array_caching: bool = True
    to: str | None = None
    return_backend_traced_fn: bool | tuple = False    # or (option, value) pairs for the compiler
    stateful: tuple = ()
    cache: object = None        # persistent cache: None ($LAZYTRACE_CACHE), True, False or a directory
    prewarm: bool | None = None  # run preloaded effect-free graphs once at creation (None: $LAZYTRACE_PREWARM)


class NotTraceable(Exception):
    """This call cannot become a graph; `reason` says why. The caller runs it eagerly."""

    def __init__(self, reason: str, transient: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.transient = transient      # the next call may trace successfully (graph/reads.py)


def choose_backend(backends: list, to: str | None):
    if to is not None:
        backend = get_backend(to)
        if any(b is not backend for b in backends):
            names = sorted({b.name for b in backends} - {backend.name})
            raise NotTraceable(f"arguments are {', '.join(names)} arrays and to={to!r}: converting "
                               f"between frameworks is not supported yet")
        return backend
    if not backends:
        raise NotTraceable("no array arguments: nothing to trace against")
    if len(backends) > 1:
        raise TypeError(f"arguments mix arrays of several frameworks ({', '.join(b.name for b in backends)}); "
                        f"pass to= to choose one")
    return backends[0]


_HELD_DEPTH, _HELD_MAX = 5, 20000     # how far _held_arrays looks, and at how many objects at most
#: what _held_arrays does not look into: numbers and text, and modules (a global object holding
#: `torch` would have it look through the framework: the arrays of a module's globals that code
#: reads are watched by the reads themselves)
_LEAVES = (str, bytes, int, float, complex, bool, type(None), types.ModuleType)

_UNSEEN_STATE = ("global state changed inside the function in a way calls do not show (torch.autocast, "
                 "set_default_dtype, set_flush_denormal, inference_mode, torch.func transforms, grad mode "
                 "switched off by a custom torch.autograd.Function's forward, np.errstate, jax.config settings "
                 "such as x64 ...): a graph could not replay it")


#: a plain function whose code has one of these flags runs its body after the call returns (what
#: inspect.isgeneratorfunction, iscoroutinefunction and isasyncgenfunction read, in one test)
_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR

_UNSEEN_RNG = ("random numbers were drawn, or an RNG was reseeded, by calls lazytrace does not see "
               "(manual_seed, set_rng_state, ...): a graph could not replay that")


class _Exits(list):
    """The context managers _run holds open: recorded objects' class swaps (those of `stateful`,
    then those the function reached), the session among them. Exited last in, first out, as by an
    ExitStack (whose machinery ran ~120 bytecodes a trace): the session's __exit__ after the swaps
    made while it ran, before those made before it; an exception an __exit__ raises goes on to the
    managers entered before it. None of them suppresses an exception (they return None)."""

    def enter_context(self, cm):
        result = type(cm).__enter__(cm)
        self.append(cm)         # (not if __enter__ raised: nothing to undo)
        return result

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        pending = exc
        while self:
            cm = self.pop()
            try:
                type(cm).__exit__(cm, exc_type, pending, tb)     # (none of _run's suppresses an exception)
            except BaseException as new:
                if new is not pending:
                    if pending is not None and new.__context__ in (None, exc):
                        new.__context__ = pending   # (Python set the with block's exception: the last one)
                    pending, exc_type, tb = new, type(new), new.__traceback__
        if pending is not exc:
            context = pending.__context__
            try:
                raise pending
            except BaseException:
                pending.__context__ = context   # (raising it here set the with block's exception instead)
                raise


def _map_values(lifted, each):
    """`lifted` with each Value replaced by each(value), through tuples, lists, namedtuples and dicts."""
    if isinstance(lifted, Value):
        return each(lifted)
    if type(lifted) in (tuple, list):
        return type(lifted)(_map_values(x, each) for x in lifted)
    if isinstance(lifted, tuple) and hasattr(type(lifted), "_fields"):
        return type(lifted)(*[_map_values(x, each) for x in lifted])
    if type(lifted) is dict:
        return {k: _map_values(v, each) for k, v in lifted.items()}
    return lifted


def trace(fn: Callable, args: tuple, kwargs: dict, *, key, backends: list, signature: Signature,
          options: TraceOptions, name: str, extra: Callable | None = None, state=None):
    """Run `fn(*args, **kwargs)` once while recording it. `state`: the global state of the
    backend of `backends` (the only one) as the call's key holds it (else it is read here).

    Returns (graph or NotTraceable, result): the result is what `fn` returned.
    Exceptions raised by `fn` propagate unchanged.
    """
    if fn.__code__.co_flags & _RESUMABLE if type(fn) is types.FunctionType and not fn.__dict__ else \
            inspect.isgeneratorfunction(fn) or inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        # its body runs after the call returns, outside the trace: it would keep the trace's arrays
        raise NotTraceable("a generator or async function: its body runs after the call returns")
    backend = choose_backend(backends, options.to)
    if state is None or backend is not backends[0]:
        state = backend.global_state()
    paused = _pause_collector()
    try:
        session = TraceSession(backend, include_generators=options.include_generators,
                               array_caching=options.array_caching and backend.folds_constants())
        try:
            return _run(session, backend, fn, args, kwargs, key=key, signature=signature, options=options,
                        name=name, extra=extra, state=state)
        finally:
            session.release()
    finally:
        _resume_collector(paused)


#: the first threshold while a trace runs: automatic collections start only where 100 million
#: new container objects are alive (gigabytes of them; reached, a collection just runs). Not 0,
#: which the traced code or another thread may set (`gc.set_threshold(0)`): theirs must stay after
#: the trace; not near 2**31 (a C int), so code scaling the threshold it reads does not overflow
_PAUSED_THRESHOLD = 10 ** 8


def _pause_collector():
    """Turn the cyclic garbage collector's automatic collections off for a trace: a first
    threshold of _PAUSED_THRESHOLD (`gc.set_threshold`), which leaves `gc.isenabled()` as the user
    and the traced code set it.
    A trace keeps what it records alive until it ends, so the collections it would start (one
    per ~60 recorded calls) find little to free but promote it to older generations, bringing
    full collections (~100 ms with torch and kornia loaded) sooner: 28% of the CPU of kornia traces
    made one after another, 15-17% paused (benchmarks/results/gc_trace_s14.txt; the trade-off:
    docs/guarantees.md).
    Returns (thresholds to restore, thresholds set), or None where collections were off already
    (threshold 0: the user's; _PAUSED_THRESHOLD: another thread's trace)."""
    threshold = gc.get_threshold()
    if not threshold[0] or threshold[0] == _PAUSED_THRESHOLD:
        return None
    paused = (_PAUSED_THRESHOLD, *threshold[1:])
    gc.set_threshold(*paused)
    return threshold, paused


def _resume_collector(paused) -> None:
    """Undo _pause_collector, unless the thresholds changed since (the traced code or another
    thread set them, `gc.set_threshold(0)` included: theirs stay; another thread's trace that
    paused too restores them once)."""
    if paused is not None and gc.get_threshold() == paused[1]:
        gc.set_threshold(*paused[0])


def _run(session, backend, fn, args, kwargs, *, key, signature, options, name, extra, state):
    """trace() with its session: run the function under it, then make the graph."""
    # (where the backend hands arrays over as themselves, a container holding nothing replaced is
    # handed as itself: what the function does to it is done once, to the caller's own, as in
    # eager code; a tracer backend's trace may be run again, on the caller's containers)
    targs, tkwargs = walk(args, kwargs, signature, lambda path, leaf, kind: session.add_input(leaf, kind, path),
                          reuse=backend.tracer_class is None)
    handed = container_snapshot(targs, tkwargs)     # (the function gets its own **kwargs)
    if extra is not None:
        for i, leaf in enumerate(extra()[1]):
            session.add_input(leaf, path=f"self.tensors[{i}]")
    with _Exits() as stack:
        session.stateful_stack = stack
        for obj in options.stateful:
            session.add_stateful(obj)
            try:
                stack.enter_context(recording_class(obj, session, _active.get))
            except TypeError as exc:    # a class, an object with __slots__: its reads would be baked
                raise NotTraceable(str(exc)) from None
            session.recorded.append(obj)
        session.reads.start(fn)
        session.check_iterators(ran=False)
        early = session.untraceable     # (what the function reaches cannot be replayed: a model's hooks ...)
        if early is None:
            stack.enter_context(session)
            try:
                result = fn(*targs, **tkwargs)
            except Exception as exc:
                cause = session.misused or backend.caused_by_tracing(exc)
                if not cause:
                    if backend.tracer_class is not None or session.proxied:
                        # it reaches the caller as eager's: holding arrays, as do the places the
                        # function filled before it raised
                        escapes.release_exception(exc, backend.tracer_class)
                        escapes.release_held(session.reads.holders(), backend.tracer_class)
                        escapes.release_held([(obj, None) for obj in session.recorded], backend.tracer_class)
                    raise
                session.undo_writes()       # the call runs again eagerly (LazyGraph._trace)
                raise NotTraceable(cause if isinstance(cause, str) else
                                   f"{type(exc).__name__} under the trace: {str(exc).splitlines()[0]}") from None
            if session.misused is not None:     # the function went on (it caught the error): eager decides
                session.undo_writes()
                raise NotTraceable(session.misused)
    if early is not None:               # it runs as eager code, not under the trace's interception
        return NotTraceable(early, transient=session.untraceable_transient), fn(*args, **kwargs)
    session.reads.settle()
    if session.live_handed and backend.live_unseen_methods:
        named = session.reads.names_used(backend.live_unseen_methods)
        if named:
            session.fail(f"a {backend.name} RNG generator is passed in and the code calls "
                         f"{', '.join(sorted(named))}() on something: what that gives or changes in "
                         f"Python, no call shows (a graph would bake it)")
    named = session.reads.names_used(_eager_names(backend, session.include_generators), methods=False)
    if named:
        unseen = named & backend.unseen_changes
        session.fail(f"the code calls {', '.join(sorted(unseen))}, which changes arrays where no call shows: "
                     f"a graph would leave them as they were" if unseen else
                     f"the code calls {', '.join(sorted(named))}, which may make a random generator seeded "
                     f"from the operating system's entropy: its draws, no call shows, would be baked")
    if session.reads.other_thread:
        session.fail("calls on its arrays were made in another thread (work handed to a thread it started): "
                     "a trace records its own thread's calls only")
    identity = session.reads.builtins_used(_IDENTITY_BUILTINS)
    if identity:
        session.fail(f"the code calls {', '.join(sorted(identity))}(): an object's identity differs at "
                     f"every call, and a graph would bake the traced one")
    if backend.tracer_class is not None or session.proxied:
        # a global or an object the function filled holds arrays, not tracers, and the objects
        # passed in, not the proxies the function was handed (escapes.release)
        if session.reads.changed() is not None:
            escapes.release_held(session.reads.holders(), backend.tracer_class)
        escapes.release_held([(obj, None) for obj in session.recorded], backend.tracer_class)
    if containers_changed(handed):
        reason = "changes lists or dicts it was passed, which a graph cannot replay"
        own = {id(c) for c, _ in container_snapshot(args, kwargs)}
        if all(id(c) in own for c, _ in handed):
            return NotTraceable(reason), result     # it ran on the caller's own containers
        # the function ran on rebuilt containers: run it on the caller's own ones, as eager would
        session.undo_writes()
        return NotTraceable(reason), fn(*args, **kwargs)
    session.settle_written()
    session.check_input_writes()
    session.add_reads(session.reads)
    record, real = session.finish(result)
    plan = passes.plan(record, session._versions)
    _calls_only(plan, session)
    reads = session.reads
    plan.packages = tuple(sorted(reads.packages))
    plan.code_globals = tuple(sorted(reads.code_globals, key=str)) if reads.code_values else ()
    plan.class_code = tuple([(klass, name) for klass, name, _ in reads.class_code.values()])
    plan.imported = tuple(reads.imported)
    plan.framework_functions = tuple([(m, n, f) for (m, n), f in reads.framework_functions.items()]) \
        if reads.framework_functions else ()
    plan.reads_environment = reads.environment or reads.machine
    plan.constant_state = backend.constant_state(plan)
    plan.modules = tuple(sorted(reads.modules))
    if plan.untraceable:
        return NotTraceable(plan.untraceable, transient=session.untraceable_transient and
                            plan.untraceable == session.untraceable), real
    if session.changed_reads:
        return NotTraceable(session.changed_reads, transient=True), real

    graph = make_graph(backend, plan, name=name, key=key, signature=signature, original=fn, options=options,
                       extra=extra, state=state)
    return graph, real


def _calls_only(plan, session) -> None:
    """Of the calls a graph does not run (dropped as dead code, folded into its constants), it
    keeps the call alone, for views (`Graph.dropped`, what made a constant), not their
    arguments and Values, which hold the trace's intermediate arrays; the session's calls are
    unlinked from their Values (TraceSession.unlink)."""
    makers = [(value, value.node) for value in plan.constants if value.node is not None] if plan.constants else ()
    session.unlink()
    if plan.pruned:
        plan.pruned = [_call_alone(node) for node in plan.pruned]
    for value, node in makers:
        value.node = _call_alone(node)
        value.node.foldable = node.foldable


def _call_alone(node) -> Node:
    return Node(node.position, node.kind, node.target, (), {}, (), b"")


def make_graph(backend, plan, *, name, key, signature, original, options, extra=None, state=None) -> Graph:
    """A Graph over a plan (from a trace, or loaded from the persistent cache)."""
    plan.function_homes = function_homes(backend, plan)
    plan.held_code = held_code(plan, plan.function_homes, original)

    def build():    # code generation waits for the first replay: the first call pays only the trace
        compiler = options.return_backend_traced_fn
        if compiler:
            # the checks of globals (graph.reads) stay Python, run before the compiled body: a
            # compiler would run them once, when it traces
            # (and the checks of external arrays' metadata: codegen.read_metadata)
            checks = [(i, n) for i, n in enumerate(plan.nodes) if n.target in READERS or n.target is codegen.read_metadata]
            body = dataclasses.replace(plan, nodes=[n for n in plan.nodes if n.target not in READERS
                                                    and n.target is not codegen.read_metadata])
            # (a compiler bakes in the functions it compiles, whatever their module holds later:
            # the places holding them are checked before it runs, by codegen.Checked)
            compiled = codegen.generate(backend, body, body.inputs, body.output_structure, name,
                                        check_functions=False)[1]
            compiled = backend.compile(compiled, body, **dict(compiler)) if isinstance(compiler, tuple) else \
                backend.compile(compiled, body)
        source, gfn, constants, aliases = codegen.generate(backend, plan, plan.inputs, plan.output_structure,
                                                           name)
        # the warnings its calls issue are the traced function's module's, for filters naming it,
        # and shown once per module where its registry says so (the `once` and `module` actions)
        module = getattr(original, "__module__", None)
        gfn.__globals__["__name__"] = module or "<lazytrace>"
        registry = getattr(sys.modules.get(module), "__warningregistry__", None) if module else None
        if type(registry) is dict:
            gfn.__globals__["__warningregistry__"] = registry
        if compiler:
            homes, held = plan.function_homes, plan.held_code     # (both taken above, when the graph was made)
            gfn = codegen.Checked(compiled, checks, homes, held) if checks or homes or held else compiled
        return source, gfn, constants, aliases

    return Graph(name=name, build=build, key=key, signature=signature, original=original, plan=plan,
                 backend=backend, extra=extra, state=state)

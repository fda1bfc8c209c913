"""Passes over a finished trace: constant folding, dead-code elimination and
the guard-safety check. They decide; `codegen` writes.

Folding. A call is foldable when every array it reads was created inside the
trace from no input (see `TraceSession.on_call`). Its value is cached as a
constant, unless the memory it lives in is written later by a non-foldable
call: then the cached object would be changed at every replay, so the call is
demoted to a node (and its own foldable arguments are checked in turn). The
check compares the storage version seen when a node read a value with the
version at the end of the trace.

Dead code. Walking backwards from the outputs, a node is kept if it produces a
live value, writes memory that is live afterwards or visible to the caller
(inputs, external arrays), or has an effect of its own (random draws, global
state, guards, attribute writes).

Guards. A guard that fails makes the call run eagerly from the start, which is
only safe if nothing visible happened before it; otherwise the signature runs
eagerly, with the reason recorded.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field

from .ir import Kind, Node, Source, TraceResult, Value

# enum members read in loops over the nodes: an enum class attribute costs ~0.2 us on Python 3.11
# (EnumType.__getattr__), a global 20 ns
_OP, _GENERATOR, _STATE, _GUARD, _GETATTR, _SETATTR = (Kind.OP, Kind.GENERATOR, Kind.STATE, Kind.GUARD,
                                                       Kind.GETATTR, Kind.SETATTR)
_INPUT, _FROM_NODE, _EXTERNAL = Source.INPUT, Source.NODE, Source.EXTERNAL
_storage = operator.attrgetter("storage")
_foldable = operator.attrgetter("foldable")
_EFFECTS = (_GENERATOR, _STATE, _SETATTR, _GUARD)     # kinds of calls kept for their own effect
_NOTHING = frozenset()


@dataclass
class Plan:
    nodes: list                                   # kept nodes, in trace order
    constants: list                               # Values baked as constants (foldable or external)
    cloned_outputs: set = field(default_factory=set)   # foldable Values returned: copy per call
    folded: int = 0                               # calls folded into constants
    pruned: list = field(default_factory=list)    # calls dropped as dead code
    untraceable: str | None = None
    visible_effects: bool = False                 # random draws, attribute writes, writes to inputs
    inputs: list = field(default_factory=list)    # the trace's input Values (for views)
    output_structure: object = None               # the result with Values in place of arrays
    packages: tuple = ()                          # top-level packages whose Python code the trace ran
    code_globals: tuple = ()                      # (module, name) of globals holding code it read
    class_code: tuple = ()                        # (class, name) of user class attributes holding code it read
    imported: tuple = ()                          # names of the user's modules its code imported in a function body
    framework_functions: tuple = ()               # (module, name, function) of framework functions its code read
    modules: tuple = ()                           # names of the modules whose Python code it ran (not UNWATCHED)
    reads_environment: bool = False               # its Python code read os.environ / os.getenv
    constant_state: object = None                 # state its constants were computed under (Backend.constant_state)
    function_homes: tuple | None = None           # where its functions were found (homes.function_homes)
    held_code: tuple | None = None                # (function, its code, defaults) of the user's code it ran (homes.held_code)
    code_state: dict | None = None                # the code state it was traced (or stored) under (persist._encode)


def plan(trace: TraceResult, final_versions: dict) -> Plan:
    nodes = trace.nodes
    _demote_mutated_constants(nodes, final_versions)
    outputs = output_values(trace.output_structure)
    # (read only for nodes that write memory: none written, none needed)
    visible = _visible(nodes, trace.inputs) if _writes(nodes) else _NOTHING
    kept, pruned = _eliminate_dead_code(nodes, outputs, visible)
    if any_kind(kept, _GUARD):      # (without guards both keep the order)
        kept = _hoist_external_guards(kept)
        if any_kind(kept, _SETATTR):
            kept = _sink_attribute_writes(kept)
    constants: dict[int, Value] = {}
    for n in kept:
        for v in n.inputs:
            source = v.source
            if source is _EXTERNAL or source is _FROM_NODE and v.foldable:
                constants.setdefault(id(v), v)
    cloned = set()
    for v in outputs:
        if v.source is not _INPUT and v.foldable:     # a constant (EXTERNAL: one made by unseen calls)
            constants.setdefault(id(v), v)
            cloned.add(v)
        elif v.source is _EXTERNAL:
            constants.setdefault(id(v), v)
    result = Plan(kept, list(constants.values()), cloned,
                  folded=len(list(filter(_foldable, nodes))), pruned=pruned,
                  inputs=trace.inputs, output_structure=trace.output_structure)
    unsafe, result.visible_effects = _effects(kept, visible)
    result.untraceable = trace.untraceable or unsafe
    return result


def any_kind(nodes, kind) -> bool:
    """Whether a node is of `kind`. (A loop: `kind in map(attrgetter("kind"), nodes)` compares
    enum members by == past the identity test, taking twice as long for 17 nodes.)"""
    for n in nodes:
        if n.kind is kind:
            return True
    return False


def _writes(nodes) -> bool:
    """Whether a node writes memory (a loop, as any_kind)."""
    for n in nodes:
        if n.mutated:
            return True
    return False


def _demote_mutated_constants(nodes: list[Node], final_versions: dict) -> None:
    if not final_versions:
        return      # no write recorded: every input was read at version 0, its final one
    work = [n for n in nodes if not n.foldable]
    varying: set = set()        # storages written by calls that run at every call
    while work:
        for n in work:
            if n.mutated:
                varying.update(map(_storage, n.mutated))
        demoted = []
        for consumer in work:
            for value, version in zip(consumer.inputs, consumer.input_versions):
                producer = value.node
                if (producer is not None and producer.foldable
                        and final_versions.get(value.storage, 0) != version):
                    _demote(producer)
                    demoted.append(producer)
        # a constant in memory such a call writes is stale: `v = g[:2]; g.add_(x); return v`
        if varying:
            demoted += demote_storages(nodes, varying)
        work = demoted


def demote_storages(nodes: list[Node], storages: set) -> list[Node]:
    """Demote every foldable call that makes or writes an array in `storages` (memory that is
    not one constant's alone: the caller's, or written at every call); return them."""
    demoted = []
    for n in nodes:
        if n.foldable and (not storages.isdisjoint(map(_storage, n.outputs)) or
                           not storages.isdisjoint(map(_storage, n.mutated))):
            _demote(n)
            demoted.append(n)
            storages.update(map(_storage, n.mutated))
    return demoted


def _demote(node: Node) -> None:
    node.foldable = False
    for out in node.outputs:
        out.foldable = False


def output_values(structure) -> list[Value]:
    found: list[Value] = []

    def rec(obj):
        if isinstance(obj, Value):
            found.append(obj)
        elif isinstance(obj, (tuple, list)):
            for x in obj:
                rec(x)
        elif isinstance(obj, dict):
            for x in obj.values():
                rec(x)
    rec(structure)
    del rec     # (a recursive closure: a reference cycle else)
    return found


def _visible(nodes, inputs) -> set:
    """Storages the caller can see besides the outputs: inputs, arrays the function reached by
    itself, arrays such as `x.grad` that belong to an input, arrays read from an attribute of a
    stateful object (`self.total.add_(x)`)."""
    visible = {v.storage for v in inputs}
    external = _EXTERNAL
    for n in nodes:
        for v in n.inputs:
            if v.source is external:
                visible.add(v.storage)
        for v in n.outputs:
            if v.caller_owned or n.kind is _GETATTR:
                visible.add(v.storage)
    return visible


def _eliminate_dead_code(nodes, outputs, visible):
    live = set(outputs)         # Values read later (a Value is hashed and compared by identity)
    live_storage = None         # storages read later: made at the first node that writes memory
    kept, pruned = [], []
    for n in reversed(nodes):
        if n.foldable:
            continue
        # kept: an effect of its own, a live output, or a write to memory visible or live afterwards
        mutated = n.mutated
        if mutated and live_storage is None:
            live_storage = set(map(_storage, outputs))
            for k in kept:
                live_storage.update(map(_storage, k.inputs))
        if n.kind is not _OP and n.kind in _EFFECTS or not live.isdisjoint(n.outputs) or mutated and (
                not visible.isdisjoint(map(_storage, mutated)) or
                not live_storage.isdisjoint(map(_storage, mutated))):
            kept.append(n)
            live.update(n.inputs)
            if live_storage is not None:
                live_storage.update(map(_storage, n.inputs))
        else:
            pruned.append(n)
    kept.reverse()
    pruned.reverse()
    return kept, pruned


def _sink_attribute_writes(kept: list[Node]) -> list[Node]:
    """Attribute writes on stateful objects go after every guard (so a failed guard has nothing
    to undo), and no further: a call after them that raises (cholesky of a matrix that is not
    positive-definite) leaves them done, as in eager. Nothing in the graph reads them back: reads
    of an attribute the call set itself use the written values directly (TraceSession.on_getattr)."""
    last_guard = max((i for i, n in enumerate(kept) if n.kind is _GUARD), default=-1)
    early = [n for n in kept[:last_guard + 1] if n.kind is _SETATTR]
    return [n for n in kept[:last_guard + 1] if n.kind is not _SETATTR] + early + kept[last_guard + 1:]


def _hoist_external_guards(kept: list[Node]) -> list[Node]:
    """Guards that read only arrays the function reached by itself (globals, closures, module
    attributes), unwritten by the graph before them, check the same thing at the start of the
    graph: moved there, they fail before any random draw or write (kornia's augmentations read
    the dtype of tensors they hold after drawing their parameters)."""
    hoisted, rest, written = [], [], set()
    for n in kept:
        # (so are checks of what an object passed in holds: the metadata of a tensor attribute)
        if (n.kind is _GUARD and n.inputs and (getattr(n.target, "hoistable", False) or
                                                    all(v.source is _EXTERNAL for v in n.inputs))
                and not any(v.storage in written for v in n.inputs)):
            hoisted.append(n)
        else:
            rest.append(n)
        if n.mutated:
            written.update(map(_storage, n.mutated))
    return hoisted + rest


def _visible_effect(node: Node, visible: set) -> str | None:
    """What a kept node does that the caller could observe besides its outputs, if anything."""
    if node.kind is _GENERATOR:
        return f"drew random numbers ({_describe(node)})"
    if node.kind is _SETATTR:
        return f"set an attribute ({_describe(node)})"
    if any(m.storage in visible or m.source is _EXTERNAL for m in node.mutated):
        return f"wrote to an input or external array ({_describe(node)})"
    return None


def _effects(kept: list[Node], visible: set) -> tuple[str | None, bool]:
    """(why the guards are unsafe, if they are; whether the graph has visible effects)."""
    effect = caught = None
    for n in kept:
        if n.kind is _GUARD and effect is not None:
            return (f"a value is read back from an array (by {_describe(n)}) after the function "
                    f"{effect}; a failed check could not be undone"), True
        if effect is None and (n.mutated or n.kind is not _OP):
            effect = _visible_effect(n, visible)
        if n.guarded_by_except:
            caught = n
    if caught is not None and effect is not None:
        # a graph that raises is run again as the function only where it did nothing visible
        return (f"it calls {_describe(caught)} inside a try block with an except clause "
                f"(or a with block whose context manager may swallow the error) and {effect}: "
                f"had the call raised at a replay, the graph could neither undo that nor go on as the "
                f"function does"), True
    return None, effect is not None


def _describe(node: Node) -> str:
    target = node.target
    descriptor = getattr(target, "__self__", None)
    if getattr(target, "__name__", None) == "__get__" and hasattr(descriptor, "__objclass__"):
        return f"{descriptor.__objclass__.__name__}.{descriptor.__name__}"     # a property read: x.shape
    return getattr(target, "__qualname__", None) or getattr(target, "__name__", repr(target))

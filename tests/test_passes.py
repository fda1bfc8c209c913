"""passes._visible and demote_storages (its generator expressions made set.isdisjoint / map in
session 13) against plain loops, on random traces."""
from hypothesis import given, settings
from hypothesis import strategies as st

from lazytrace.graph import passes
from lazytrace.graph.ir import Kind, Node, Source, Value

_KINDS = [Kind.OP, Kind.GENERATOR, Kind.STATE, Kind.GUARD, Kind.GETATTR, Kind.SETATTR]
_SOURCES = [Source.INPUT, Source.NODE, Source.EXTERNAL]


def _visible_loop(nodes, inputs):
    visible = {v.storage for v in inputs}
    for n in nodes:
        for v in n.inputs:
            if v.source is Source.EXTERNAL:
                visible.add(v.storage)
        for v in n.outputs:
            if v.caller_owned or n.kind is Kind.GETATTR:
                visible.add(v.storage)
    return visible


def _demote_loop(nodes, storages):
    demoted = []
    for n in nodes:
        if n.foldable and (any(v.storage in storages for v in n.outputs) or
                           any(m.storage in storages for m in n.mutated)):
            n.foldable = False
            demoted.append(n)
            storages.update(m.storage for m in n.mutated)
    return demoted


_value = st.builds(lambda source, storage, owned: _made(source, storage, owned),
                   st.sampled_from(_SOURCES), st.integers(0, 6), st.booleans())


def _made(source, storage, owned):
    value = Value(source, storage=storage)
    value.caller_owned = owned
    return value


_node = st.tuples(st.sampled_from(_KINDS), st.lists(_value, max_size=3), st.lists(_value, max_size=3),
                  st.lists(_value, max_size=2), st.booleans())


def _nodes(specs):
    return [Node(i, kind, None, (), {}, inputs, [0] * len(inputs), outputs=outputs, mutated=mutated,
                 foldable=foldable)
            for i, (kind, inputs, outputs, mutated, foldable) in enumerate(specs)]


@settings(max_examples=200, deadline=None)
@given(st.lists(_node, max_size=8), st.lists(_value, max_size=3), st.sets(st.integers(0, 6), max_size=3))
def test_visible_and_demote_storages_match_the_loops(specs, inputs, storages):
    nodes = _nodes(specs)
    assert passes._visible(nodes, inputs) == _visible_loop(nodes, inputs)
    again = _nodes(specs)
    wanted, found = set(storages), set(storages)
    expected = [n.position for n in _demote_loop(again, wanted)]
    assert [n.position for n in passes.demote_storages(nodes, found)] == expected
    assert found == wanted and [n.foldable for n in nodes] == [n.foldable for n in again]


def _dead_code_loop(nodes, outputs, visible):
    """passes._eliminate_dead_code before session 14 (live Values by id, storages read later kept
    from the start)."""
    live, live_storage = {id(v) for v in outputs}, {v.storage for v in outputs}
    kept, pruned = [], []
    for n in reversed(nodes):
        if n.foldable:
            continue
        if n.kind in (Kind.GENERATOR, Kind.STATE, Kind.SETATTR, Kind.GUARD) or \
                any(id(v) in live for v in n.outputs) or \
                any(m.storage in visible or m.storage in live_storage for m in n.mutated):
            kept.append(n)
            live.update(id(v) for v in n.inputs)
            live_storage.update(v.storage for v in n.inputs)
        else:
            pruned.append(n)
    return kept[::-1], pruned[::-1]


_picks = st.lists(st.integers(0, 7), max_size=3)
_linked_node = st.tuples(st.sampled_from([Kind.OP] * 6 + _KINDS), _picks, _picks,
                         st.lists(st.integers(0, 7), max_size=2), st.sampled_from([False] * 3 + [True]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([Source.NODE] * 4 + _SOURCES), st.integers(0, 4),
                          st.sampled_from([False] * 5 + [True])), min_size=8, max_size=8),
       st.lists(_linked_node, max_size=10), _picks, st.lists(st.integers(0, 7), max_size=1))
def test_dead_code_and_plan_match_the_loops(pool, specs, outputs, inputs):
    """Nodes sharing Values (one's output another's input, writes into memory read later):
    session 14's dead-code pass (live Values in a set of Values, the storages read later made
    at the first write) and plan without _visible where nothing is written decide as before."""
    values = [_made(*spec) for spec in pool]
    nodes = [Node(i, kind, None, (), {}, [values[j] for j in ins], [0] * len(ins),
                  outputs=[values[j] for j in outs], mutated=[values[j] for j in muts], foldable=foldable)
             for i, (kind, ins, outs, muts, foldable) in enumerate(specs)]
    outputs, inputs = [values[j] for j in outputs], [values[j] for j in inputs]
    visible = _visible_loop(nodes, inputs)
    expected = _dead_code_loop(nodes, outputs, visible)
    assert passes._eliminate_dead_code(nodes, outputs, visible) == expected
    from lazytrace.graph.ir import TraceResult
    result = passes.plan(TraceResult(nodes, inputs, list(outputs), None), {})
    kept = expected[0]
    if Kind.GUARD in [n.kind for n in kept]:
        kept = passes._sink_attribute_writes(passes._hoist_external_guards(kept))
    assert result.nodes == kept and result.pruned == expected[1]
    unsafe, effects = passes._effects(kept, visible)
    assert (result.untraceable, result.visible_effects) == (unsafe, effects)


def test_a_write_into_memory_a_later_call_reads_is_kept():
    """`a = f(x); v = a[1:]; v.zero_(); return g(a)`: the write returns nothing read later, and
    writes memory neither returned nor the caller's; g reads it (the storages read later, made
    at the first write, hold those of the calls kept before it was reached)."""
    a, view, out = (Value(Source.NODE, storage=s) for s in (1, 1, 2))
    nodes = [Node(0, Kind.OP, None, (), {}, [], [], outputs=[a]),
             Node(1, Kind.OP, None, (), {}, [a], [0], outputs=[view]),
             Node(2, Kind.OP, None, (), {}, [view], [0], mutated=[view]),
             Node(3, Kind.OP, None, (), {}, [a], [1], outputs=[out])]
    kept, pruned = passes._eliminate_dead_code(nodes, [out], set())
    assert [n.position for n in kept] == [0, 1, 2, 3] and pruned == []
    assert (kept, pruned) == _dead_code_loop(nodes, [out], set())

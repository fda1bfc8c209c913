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

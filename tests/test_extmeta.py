"""A graph checks, at its entry, the metadata of each array the function reached by itself (a
global, a closure variable, a module attribute, a global model's parameter): no key fixes it,
and an in-place change (resize_, set_, transpose_, `.data =`, requires_grad_) between calls
changes what the trace decided on every array computed from it, with no metadata read to guard
(TraceSession.add_external, codegen.read_metadata). The tests marked "silently wrong on main"
failed before the check."""
from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import lazytrace
from lazytrace.graph import codegen

_G = torch.ones(3, 2)


@pytest.fixture
def g():
    """The global _G, put back as it was after each test."""
    saved = _G.detach().clone()
    yield _G
    _G.requires_grad_(False)
    _G.data = saved


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return type(a) is type(b) and a.shape == b.shape and a.dtype == b.dtype and a.stride() == b.stride() \
            and a.is_contiguous() == b.is_contiguous() and torch.equal(a.detach(), b.detach())
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _entry_checks(lazy) -> int:
    return sum(n.target is codegen.read_metadata for graph in lazy.graphs for n in graph.nodes)


def _derived(x):
    y = _G * 2                          # dead code: only its shape is used
    return x * y.shape[0] + y.dim()


def _derived_returned(x):
    return x + 1, _G * 2, (_G + 1).shape


def _contiguous(x):
    return x + 1, _G.contiguous()       # the trace's _G is contiguous: the call hands back _G itself


def _folded_zeros(x):
    return x + 1, torch.zeros_like(_G * 2)      # read for its metadata only: folded into a constant


def _converted(x):
    return x + 1, _G.to(torch.float32)  # the same dtype at the trace: _G itself


def _resize(g):
    g.resize_(5)


def _set(g):
    g.set_(torch.ones(2, 7))


def _transpose(g):
    g.transpose_(0, 1)


def _other_dtype(g):
    g.data = torch.ones(3, 2, dtype=torch.float64)


def _requires_grad(g):
    g.requires_grad_(True)


_CHANGES = [_resize, _set, _transpose, _other_dtype, _requires_grad]
_FUNCTIONS = [_derived, _derived_returned, _contiguous, _folded_zeros, _converted]


@pytest.mark.parametrize("change", _CHANGES, ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("fn", _FUNCTIONS, ids=lambda f: f.__name__.strip("_"))
def test_a_global_changed_in_place_between_calls_traces_again(g, fn, change):
    """Silently wrong on main (each function with at least one of the changes)."""
    lazy = lazytrace.trace_graph(fn)
    for _ in range(2):
        x = torch.rand(2)
        assert _same(lazy(x), fn(x))
    assert lazy.stats.hits == 1 and _entry_checks(lazy) == 1
    change(g)
    for _ in range(2):
        x = torch.rand(2)
        assert _same(lazy(x), fn(x))
    stats = lazy.stats
    assert stats.traces == 2 and stats.guard_failures >= 1 and stats.hits == 2 and stats.eager == 0
    assert not stats.reasons
    assert "reached by itself" in lazy.explain()


def test_a_global_changed_back_and_forth_replays_each_graph(g):
    lazy = lazytrace.trace_graph(_derived)
    x = torch.rand(2)
    for _ in range(3):
        for shape in ((3, 2), (4,), (3, 2)):
            g.resize_(*shape)
            assert _same(lazy(x), _derived(x))
    assert lazy.stats.traces == 2 and lazy.stats.eager == 0


def test_the_check_comes_before_a_random_draw_and_a_write_to_the_global(g):
    """Checked at the entry: a graph that draws and writes into the global stays a graph."""
    def fn(x):
        noise = torch.rand(x.shape)
        _G.add_(1)
        return x * (_G * 2).shape[0] + noise
    lazy = lazytrace.trace_graph(fn)
    for i, n in enumerate((3, 3, 5, 5)):
        g.resize_(n)
        g.fill_(0)
        x = torch.rand(2)
        torch.manual_seed(i)
        mine = lazy(x)
        mine_g = g.clone()
        g.fill_(0)
        torch.manual_seed(i)
        assert _same(mine, fn(x)) and torch.equal(mine_g, g)
    assert lazy.stats.traces == 2 and lazy.stats.hits == 2 and lazy.stats.eager == 0
    assert lazy.graphs[0].nodes[0].target is codegen.read_metadata


def test_a_global_resized_by_the_function_itself(g):
    def fn(x):
        _G.resize_(4)
        return x * (_G * 1).shape[0]
    lazy = lazytrace.trace_graph(fn)
    g.resize_(3)
    for _ in range(3):
        x = torch.rand(2)
        before = g.shape
        mine = lazy(x)
        g.resize_(before)
        assert _same(mine, fn(x))
    assert lazy.stats.eager == 0


def _closure():
    c = torch.ones(3)
    return (lambda x: x * (c * 2).shape[0]), lambda: c.resize_(5)


_HOLDER = types.ModuleType("holder")      # (a module reached through a global: one in a closure runs eagerly)


def _module_attribute():
    _HOLDER.t = torch.ones(3)
    return (lambda x: x * (_HOLDER.t + 1).numel()), lambda: _HOLDER.t.resize_(6)


def _object_attribute():
    obj = types.SimpleNamespace(t=torch.ones(3))
    return (lambda x: x * len(obj.t * 1)), lambda: obj.t.resize_(7)


def _model_parameter():
    model = torch.nn.Linear(3, 4)
    return (lambda x: x * (model.weight * 1).shape[0]), lambda: setattr(model.weight, "data", torch.ones(8, 3))


@pytest.mark.parametrize("make", [_closure, _module_attribute, _object_attribute, _model_parameter],
                         ids=lambda f: f.__name__.strip("_"))
def test_externals_reached_through_a_closure_a_module_an_object_and_a_global_model(make):
    """Silently wrong on main."""
    fn, change = make()
    lazy = lazytrace.trace_graph(fn)
    x = torch.rand(2)
    assert _same(lazy(x), fn(x)) and _same(lazy(x), fn(x))
    assert lazy.stats.hits == 1 and _entry_checks(lazy) == 1
    change()
    assert _same(lazy(x), fn(x))
    assert lazy.stats.eager == 0 and lazy.stats.traces == 2


def test_a_traced_model_keys_its_parameters_without_entry_checks():
    model = torch.nn.Linear(3, 4)
    lazytrace.trace_graph(model)
    x = torch.rand(2, 3)
    model(x), model(x)
    assert not any(n.target is codegen.read_metadata for graph in model.forward.graphs for n in graph.nodes)


def test_the_compiled_tier_checks_externals_before_its_body(g):
    lazy = lazytrace.trace_graph(_derived, return_backend_traced_fn=True)
    x = torch.rand(2)
    assert _same(lazy(x), _derived(x)) and _same(lazy(x), _derived(x))
    assert isinstance(lazy.graphs[0].fn, codegen.Checked)
    g.resize_(5)
    assert _same(lazy(x), _derived(x))
    assert lazy.stats.traces == 2 and lazy.stats.eager == 0


def test_a_graph_with_an_external_only_dead_calls_read_is_not_stored(g, tmp_path):
    """The stored form of a graph has no external arrays (persist.codec): one whose external is
    read only by dead calls, for their metadata, was stored and replayed with that metadata."""
    lazy = lazytrace.trace_graph(_derived, cache=tmp_path / "cache")
    x = torch.rand(2)
    assert _same(lazy(x), _derived(x))
    assert lazy.stats.stored == 0 and lazy.stats.not_stored


def test_numpy_arrays_a_call_reads_are_checked(monkeypatch):
    """A NumPy global met by a call on a tracer (a global read alone is not one of the trace's arrays)."""
    n = np.ones(3)
    monkeypatch.setitem(globals(), "_N", n)

    def fn(x):
        y = np.multiply(_N, x[0])
        return x * y.shape[0] + y.ndim
    lazy = lazytrace.trace_graph(fn)
    x = np.ones(2)
    assert np.array_equal(lazy(x), fn(x)) and np.array_equal(lazy(x), fn(x))
    assert _entry_checks(lazy) == 1
    n.resize(5, refcheck=False)
    assert np.array_equal(lazy(x), fn(x))
    n.shape = (5, 1)
    assert np.array_equal(lazy(x), fn(x))
    assert lazy.stats.eager == 0


def test_immutable_jax_arrays_are_not_checked(monkeypatch):
    jnp = pytest.importorskip("jax.numpy")
    monkeypatch.setitem(globals(), "_J", jnp.ones(3))

    def fn(x):
        return x * (_J * 2).shape[0]
    lazy = lazytrace.trace_graph(fn)
    x = jnp.ones(2)
    assert np.array_equal(lazy(x), fn(x)) and np.array_equal(lazy(x), fn(x))
    assert lazy.stats.hits == 1 and _entry_checks(lazy) == 0


def test_a_global_first_seen_under_autocast_is_checked_as_at_the_entry(g):
    """The native check is made after the function returned: made where it first met the array,
    inside `with torch.autocast`, it compared autocast's dispatch keys too and failed at every
    call (test_redteam9's global weight traced at every call)."""
    def fn(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return x @ (_G * 1)
    lazy = lazytrace.trace_graph(fn)
    for _ in range(3):
        x = torch.rand(2, 3)
        assert _same(lazy(x), fn(x))
    assert lazy.stats.hits == 2 and lazy.stats.traces == 1
    g.data = torch.rand(3, 4)
    x = torch.rand(2, 3)
    assert _same(lazy(x), fn(x)) and lazy.stats.traces == 2 and lazy.stats.eager == 0

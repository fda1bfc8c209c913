"""The hit path of a LazyGraph (graph/guards.py's compiled check, LazyGraph.__call__): every
global setting a graph depends on, changed after the check was compiled, makes the check miss;
so do a running trace and a replaced function code. Each state change is tried on the compiled
check alone (a check missing one of its conditions returns the graph's result instead of MISS)
and through the LazyGraph (the call is eager's and is not counted as a hit)."""
import pytest
import torch
from global_states import ALL_STATES, call_in

import lazytrace
from lazytrace.graph.guards import MISS
from lazytrace.graph.tracer import _active


def _on_cpu(x):
    return x * 2


def _with_meta(x):       # an array on another device than the CPU: the check tests each setting itself
    return x * 2, x.to("meta")


def _inference_tensor():
    with torch.inference_mode():
        return torch.rand(3)


@pytest.mark.parametrize("make", [lambda: torch.rand(3), _inference_tensor], ids=["tensor", "inference tensor"])
@pytest.mark.parametrize("fn", [_on_cpu, _with_meta])
@pytest.mark.parametrize("state", ALL_STATES)
def test_compiled_check_misses_when_global_state_changed(fn, state, make):
    lazy = lazytrace.trace_graph(fn)
    args = (make(),)
    lazy(*args), lazy(*args)
    check = lazy._fast[0]
    assert check(args, {}) is not MISS            # the state it was compiled in: a hit
    if fn is _on_cpu and state == "CUDA autocast":
        # a graph of CPU tensors alone: another device's autocast changes none of its calls (a
        # decision: TensorGuards sees the CPU's autocast only, and the check adds no test of its own)
        assert call_in(state, lambda: check(args, {})) is not MISS
        assert torch.equal(call_in(state, lambda: lazy(*args)), fn(*args))
        return
    assert call_in(state, lambda: check(args, {})) is MISS
    assert check(args, {}) is not MISS


@pytest.mark.parametrize("state", ALL_STATES)
def test_lazy_call_under_changed_state_is_eager_and_no_hit(state):
    """The call in the changed state returns what eager returns there (device, dtype, grad,
    values) and is not served by the graph of the default state."""
    def fn(x):
        return (x * 2 + 1).sum(0, keepdim=True), torch.ones(3) * 1.5      # (a constant: folded)

    lazy = lazytrace.trace_graph(fn)
    x = torch.rand(3, requires_grad=True)
    lazy(x), lazy(x)
    hits = lazy.stats.hits
    got, expected = call_in(state, lambda: (lazy(x), fn(x)))
    # (CUDA's autocast changes no call of a graph of CPU tensors: its check leaves it out)
    assert lazy.stats.hits == hits + (state == "CUDA autocast")
    for a, b in zip(got, expected):
        assert (a.device, a.dtype, a.requires_grad) == (b.device, b.dtype, b.requires_grad)
        if a.device.type != "meta":
            assert torch.allclose(a.detach().float(), b.detach().float())
    out = lazy(x)                                 # back in the default state: the fast path again
    assert lazy.stats.hits == hits + 1 + (state == "CUDA autocast") and torch.allclose(out[0], fn(x)[0])


def test_compiled_check_misses_inside_a_trace():
    """A LazyGraph called by a function being traced is inlined there: its check misses then."""
    lazy = lazytrace.trace_graph(lambda x: x + 1)
    x = torch.rand(2)
    lazy(x), lazy(x)
    token = _active.set(object())
    try:
        assert lazy._fast[0]((x,), {}) is MISS
    finally:
        _active.reset(token)

    outer = lazytrace.trace_graph(lambda x: lazy(x) * 3)
    for _ in range(3):
        y = torch.rand(2)
        assert torch.allclose(outer(y), (y + 1) * 3)
    assert outer.stats.traces == 1 and "add" in outer.graphs[0].source


def test_compiled_check_misses_when_the_code_is_replaced():
    def fn(x):
        return x + 1

    def other(x):
        return x - 1

    lazy = lazytrace.trace_graph(fn)
    x = torch.rand(2)
    lazy(x), lazy(x)
    check = lazy._fast[0]
    fn.__code__ = other.__code__              # what IPython's autoreload does
    assert check((x,), {}) is MISS
    assert torch.equal(lazy(x), x - 1) and torch.equal(lazy(x), x - 1)
    assert lazy.stats.traces == 2


def test_an_array_given_twice_takes_the_fast_path_and_aliasing_is_checked():
    """dynamo's TensorGuards fails on a tensor given twice: each array goes to it once, and the
    alias test tells `f(x, x)` from `f(x, y)`."""
    def add_into(a, b):
        a.add_(1)
        return a + b           # reads a after the write: b too when b is a

    lazy = lazytrace.trace_graph(add_into)
    x = torch.zeros(2)
    lazy(x, x), lazy(x, x)
    assert lazy._fast is not None and "is p1" in lazy._fast[0].source
    hits = lazy.stats.hits
    x = torch.zeros(2)
    assert torch.equal(lazy(x, x), torch.full((2,), 2.0))
    assert lazy.stats.hits == hits + 1
    x, y = torch.zeros(2), torch.zeros(2)
    assert torch.equal(lazy(x, y), torch.ones(2))          # another signature: f(x, y)
    x, y = torch.zeros(2), torch.zeros(2)
    assert torch.equal(lazy(x, y), torch.ones(2))
    x = torch.zeros(2)
    assert torch.equal(lazy(x, x), torch.full((2,), 2.0))


def test_distinct_arrays_are_told_by_tensorguards_alone():
    lazy = lazytrace.trace_graph(lambda a, b: a + b)
    x, y = torch.rand(2), torch.rand(2)
    lazy(x, y), lazy(x, y)
    assert " is not " not in lazy._fast[0].source
    assert lazy._fast[0]((x, x), {}) is MISS
    assert torch.equal(lazy(x, x), x + x) and torch.equal(lazy(y, x), y + x)


def test_wrong_argument_count_misses():
    lazy = lazytrace.trace_graph(lambda *a: a[0] + len(a))
    x = torch.rand(2)
    lazy(x), lazy(x)
    check = lazy._fast[0]
    assert check((x, x), {}) is MISS and check((), {}) is MISS and check((x,), {"y": 1}) is MISS
    assert torch.equal(lazy(x, x), x + 2) and torch.equal(lazy(x), x + 1)


def test_hits_and_raising_graphs_are_counted():
    lazy = lazytrace.trace_graph(lambda x, y: x @ y)
    x, y = torch.rand(2, 3), torch.rand(3, 2)
    lazy(x, y)
    for _ in range(3):
        lazy(x, y)
    assert (lazy.stats.calls, lazy.stats.hits, lazy.stats.traces) == (4, 3, 1)

    def raising(args, kwargs):          # a graph raising at replay (free of visible effects)
        raise ValueError("boom")
    lazy._fast = (raising, lazy._fast[1])
    assert torch.equal(lazy(x, y), x @ y)             # the original decides
    assert (lazy.stats.calls, lazy.stats.hits, lazy.stats.eager) == (5, 3, 1)


SCALE = 2.0


def _scaled(x):
    return x * SCALE


def test_graph_body_inlined_into_the_check_keeps_its_guards():
    """The graph's lines run in the check's frame (one call less per hit); its own checks (a
    global read at the trace) still send a changed call to the general path."""
    global SCALE
    lazy = lazytrace.trace_graph(_scaled)
    x = torch.rand(2)
    lazy(x), lazy(x)
    source = lazy._fast[0].source
    assert "graph_fn(" not in source and "_GuardFailed" in source
    try:
        SCALE = 3.0
        assert torch.equal(lazy(x), x * 3) and torch.equal(lazy(x), x * 3)
    finally:
        SCALE = 2.0
    assert torch.equal(lazy(x), x * 2)


def test_a_graph_raising_inside_the_check_shows_its_line():
    import traceback

    def write_then_index(x, i):
        x.add_(1)                   # a visible effect: the graph's error is raised as it is
        return x[i]

    lazy = lazytrace.trace_graph(write_then_index)
    x, i = torch.zeros(3), torch.tensor([0, 2])
    lazy(x, i), lazy(x, i)
    with pytest.raises(IndexError) as info:
        lazy(x, torch.tensor([0, 7]))
    frames = [f for f in traceback.extract_tb(info.value.__traceback__) if f.filename.startswith("<lazytrace")]
    assert frames and "x[" not in frames[-1].line and frames[-1].line.strip().startswith("v")


def test_checks_of_one_source_are_compiled_once():
    """LazyGraphs of one function (a module made per call) share the code of their checks (each
    over its own constants), and the graphs' lines are verified against their code once."""
    def fn(x):
        return x * 3

    made = []
    for _ in range(3):
        lazy = lazytrace.trace_graph(fn)
        x = torch.rand(2)
        lazy(x), lazy(x)
        made.append(lazy._fast[0])
        assert torch.equal(lazy(x), x * 3)
    assert made[0].__code__ is made[1].__code__ is made[2].__code__
    assert made[0].__globals__ is not made[1].__globals__


_GAIN = 2.0


def _gained(x):
    return x * _GAIN


def test_after_a_guard_failure_the_new_variant_takes_the_fast_path(monkeypatch):
    """A key traced again after a guard failed holds two graphs; the calls after the change took
    the general path for good, checking the stale graph first (one guard failure per call, ~3x
    the hit's time). The graph that hit now gets the fast path, and going back to the old value
    is seen by that path's own check."""
    lazy = lazytrace.trace_graph(_gained)
    x = torch.rand(3)
    lazy(x), lazy(x)
    monkeypatch.setitem(globals(), "_GAIN", 3.0)
    for _ in range(6):
        assert torch.equal(lazy(x), _gained(x))
    assert lazy.stats.traces == 2 and lazy.stats.guard_failures <= 2
    assert lazy._fast is not None and lazy._fast[0]((x,), {}) is not MISS
    failures = lazy.stats.guard_failures
    for value in (2.0, 3.0) * 4:              # alternating: each graph in turn, through their fast paths
        monkeypatch.setitem(globals(), "_GAIN", value)
        assert torch.equal(lazy(x), _gained(x))
    assert lazy.stats.traces == 2 and lazy.stats.eager == 0
    assert lazy.stats.guard_failures - failures <= 8      # at most the general path's one stale check per switch

"""A trace leaves no cyclic garbage (the session, its reads and interceptor, its recursive
helpers, Node <-> Value): what it made is freed by reference counting at its end, and a dropped
LazyGraph at once, without waiting for a collection; what a graph keeps still serves its views,
and a proxy the function leaves behind still finds its trace ended."""
import gc

import pytest
import torch

import lazytrace
from lazytrace.view import layout


def _kernel(n):
    k = torch.arange(n, dtype=torch.float32)     # made from no input: folded into a constant
    return torch.exp(-k * k) / torch.exp(-k * k).sum()


def blur(x):
    dead = x.sin()              # dropped as dead code  # noqa: F841
    return torch.nn.functional.conv1d(x.reshape(1, 1, -1), _kernel(3).reshape(1, 1, -1), padding=1).reshape(-1)


def nested(xs, scale=2.0):      # containers in the arguments and the result (signature.walk, finish)
    return {"a": (xs[0] * scale, [xs[1] + 1]), "b": xs[0].sum()}


class Model:
    def __init__(self):
        self.w = torch.ones(4)


def method(model, x):
    return x * model.w + 1


def shapes(x):                  # shapes returned (briefs hold tuples; the result has torch.Size)
    return x * 2, x.shape, x[0].shape, x.size()


@pytest.mark.parametrize("calls", [1, 3], ids=["traced", "replayed"])
@pytest.mark.parametrize("fn, args, options", [
    (blur, (torch.rand(4),), {}),
    (nested, ([torch.rand(3), torch.rand(3)],), {}),
    (method, (Model(), torch.rand(4)), {"arg_stateful_idxs": [0]}),
    (shapes, (torch.rand(3, 4),), {}),
], ids=["blur", "nested", "stateful", "shapes"])
def test_a_trace_and_its_dropped_graph_leave_no_cyclic_garbage(fn, args, options, calls):
    """Also a graph that replayed: its generated code (codegen) and hit path (guards.check_and_call)
    were each a function in its own globals, a cycle keeping the graph's constants until a collection."""
    lazy = lazytrace.trace_graph(fn, **options)
    for _ in range(calls):
        lazy(*args)             # (caches warm)
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        fn(*args)
        eager = gc.collect()
        lazy = lazytrace.trace_graph(fn, **options)
        for _ in range(calls):
            lazy(*args)
        assert len(lazy.graphs) == 1 and lazy.stats.hits == calls - 1
        assert gc.collect() == eager            # the trace's session, its helpers: freed at its end
        del lazy
        assert gc.collect() == eager            # the graph (its code, its hit path): freed when dropped
    finally:
        if enabled:
            gc.enable()


def test_a_kept_graph_still_names_its_dropped_and_folded_calls():
    lazy = lazytrace.trace_graph(blur)
    x = torch.rand(4)
    for _ in range(2):
        assert torch.allclose(lazy(x), blur(x))
    graph = lazy.graphs[0]
    assert "sin" in " ".join(graph.dropped["pruned"]) and graph.dropped["folded"] >= 3
    hover = " ".join(" ".join(box.details) for box in layout(graph).boxes if box.kind == "constant")
    assert "made by" in hover and "reshape" in hover     # the call that made the constant
    assert all(v.node is None for n in graph.nodes for v in n.outputs)   # no Node <-> Value cycle


class Holder:
    def __init__(self):
        self.scale = torch.tensor(3.0)


def test_a_proxy_left_behind_finds_its_trace_ended():
    """A stateful object's proxy kept by a closure the function returns: its attribute reads
    and writes after the trace reach a session that ended (its reads' callbacks hold it weakly,
    the proxy strongly) and are as eager's."""
    def fn(holder, x):
        def later(y):
            holder.scale = holder.scale + 1
            return y * holder.scale
        return x * holder.scale, later

    lazy = lazytrace.trace_graph(fn, arg_stateful_idxs=[0])
    for i in range(3):
        mine, theirs = Holder(), Holder()
        x = torch.rand(2)
        out, later = lazy(mine, x)
        expected, eager_later = fn(theirs, x)
        assert torch.equal(out, expected)
        gc.collect()
        assert torch.equal(later(x), eager_later(x))
        assert torch.equal(later(x), eager_later(x))
        assert torch.equal(mine.scale, theirs.scale)

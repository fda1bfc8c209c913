"""Review of session 15's gcobj (a trace leaves no cyclic garbage: Value.node cut at release,
dropped/folded calls kept alone, the session held weakly by its reads, torch briefs' shapes as
tuples): everything that reads a graph after its trace ended, against eager on new inputs."""
import gc

import pytest
import torch

from conftest import run_fresh_python

import lazytrace
from lazytrace import view


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return type(a) is type(b) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _check(fn, make, calls=3, **options):
    """fn through a LazyGraph against eager on new inputs (a collection between calls: what a
    graph reads after its trace must not have been freed); returns the LazyGraph."""
    lazy = lazytrace.trace_graph(fn, **options)
    for i in range(calls):
        torch.manual_seed(i)
        mine = make()
        torch.manual_seed(i)
        theirs = make()
        assert _same(lazy(*mine), fn(*theirs))
        assert _same(list(mine), list(theirs))          # inputs after the call
        gc.collect()
    return lazy


def shapes(x):
    return x * 2, x.shape, x[0].shape, x.size(), x.reshape(-1).shape


def test_a_returned_shape_is_still_a_torch_size():
    """Briefs hold shapes as tuples; what the function returns is still a torch.Size."""
    lazy = _check(shapes, lambda: (torch.rand(3, 4),))
    assert lazy.stats.hits == 2
    out = lazy(torch.rand(3, 4))
    assert all(type(s) is torch.Size for s in out[1:])


def shape_keys(x):
    table = {x.shape: 1, (5,): 2}
    bonus = table.get(torch.Size([3, 4]), 0) + table.get((3, 4), 0)
    return x + bonus + (1 if x.shape == (3, 4) else 2) + hash(x.shape) % 7


def test_shapes_hashed_and_compared_as_tuples_and_sizes():
    lazy = _check(shape_keys, lambda: (torch.rand(3, 4),))
    assert lazy(torch.rand(5)).shape == (5,) and lazy.stats.traces == 2


def folded(x):
    k = torch.exp(-torch.arange(4.0) ** 2)      # folded into a constant
    dead = x.cos()                              # dropped  # noqa: F841
    return x @ k.reshape(4, 1), k[:2]


def test_views_of_a_graph_with_folded_and_dropped_calls_after_its_trace_and_a_retrace():
    lazy = _check(folded, lambda: (torch.rand(3, 4),))
    first = lazy.graphs[0]
    _check(folded, lambda: (torch.rand(2, 4),))
    lazy(torch.rand(2, 4))                      # a retrace: the first graph's views unchanged
    gc.collect()
    assert len(lazy.graphs) == 2 and lazy.graph_for(torch.rand(3, 4)) is first
    assert "cos" in " ".join(first.dropped["pruned"]) and first.dropped["folded"] >= 3
    hover = [" ".join(box.details) for box in view.layout(first).boxes if box.kind == "constant"]
    assert any("made by torch.Tensor.reshape" in h for h in hover)
    assert "4 float32" in first.to_dot() and view.to_html(first)
    assert "matmul" in first.source or "@" in first.source
    assert "2 traces" in lazy.explain() and "3x4 float32" in lazy.explain()


def views_of_inputs(x):
    return x[1:], x.T, x.view(-1), x.reshape(-1)[:3]


def test_outputs_that_are_views_of_inputs_stay_views():
    lazy = _check(views_of_inputs, lambda: (torch.rand(3, 4),))
    x = torch.rand(3, 4)
    out = lazy(x)
    x.add_(1)
    assert all(o.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() for o in out)
    assert torch.equal(out[0], x[1:])


def writes_a_view(x):
    y = x[:, 0]
    y.mul_(2)
    return x.sum(), y


def test_a_write_through_a_view_of_an_input():
    _check(writes_a_view, lambda: (torch.rand(3, 4),))


inner = lazytrace.trace_graph(lambda x: torch.sin(x) * 2 + torch.arange(4.0))


def outer(x):
    return inner(x).sum(), inner(x * 2)


def test_a_lazygraph_inlined_into_an_outer_trace():
    lazy = _check(outer, lambda: (torch.rand(4),))
    assert lazy.stats.hits == 2
    view.layout(lazy.graphs[0])
    view.layout(inner.graphs[0])


def makes_a_generator(x):
    g = torch.Generator().manual_seed(3)
    return x + torch.rand(x.shape, generator=g), g


def test_a_generator_made_in_the_trace_used_after_it():
    lazy = lazytrace.trace_graph(makes_a_generator)
    for _ in range(3):
        x = torch.rand(3)
        (y, g), (y2, g2) = lazy(x), makes_a_generator(x)
        gc.collect()
        assert torch.equal(y, y2) and torch.equal(torch.rand(2, generator=g), torch.rand(2, generator=g2))
    assert lazy.stats.hits == 0 and lazy.eager_signatures


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        k = torch.arange(3.0)                   # folded
        return self.lin(x) + k, self.lin.weight.shape


def test_a_module_traced_in_place_after_its_trace():
    torch.manual_seed(0)
    mine = Net()
    theirs = Net()
    theirs.load_state_dict(mine.state_dict())
    lazytrace.trace_graph(mine)
    for _ in range(3):
        x = torch.rand(2, 4)
        assert _same(mine(x), theirs(x))
        gc.collect()
        assert torch.equal(mine.calls, theirs.calls)
    assert type(mine(torch.rand(2, 4))[1]) is torch.Size


def test_the_compiled_tier_built_after_the_trace():
    def fn(x):
        return torch.sin(x) + torch.arange(3.0), x[1:]
    lazy = _check(fn, lambda: (torch.rand(3),), return_backend_traced_fn=True)
    assert lazy.stats.hits == 2


def test_the_compiled_tier_of_a_graph_returning_a_shape():
    """`return y, x.shape` with return_backend_traced_fn=True: was refused by inductor's direct
    path at every call (each call then ran eagerly, after a failed compile: ~25 ms)."""
    def fn(x):
        return torch.sin(x) + torch.arange(3.0), x.shape
    lazy = _check(fn, lambda: (torch.rand(3),), return_backend_traced_fn=True)
    assert lazy.stats.hits == 2 and not lazy.stats.reasons
    assert type(lazy(torch.rand(3))[1]) is torch.Size
    assert lazy.graphs[0].fn.choice in ("torch.compile", "python")


LIBRARY = '''
import torch

def blur(x):
    k = torch.exp(-(torch.arange(5.0) - 2) ** 2)
    k = (k / k.sum()).reshape(1, 1, 5)
    dead = x.cos()
    return torch.conv1d(x.reshape(1, 1, -1), k, padding=2).reshape(-1), x[1:], x.shape
'''


def test_a_loaded_graph_and_a_traced_one_alike_after_release(temp_library, tmp_path):
    """A graph loaded from the persistent cache (whose constants keep no call that made them)
    has views, as a traced one has; both replay as eager and name the same dropped calls."""
    name, folder = temp_library(LIBRARY)
    lib = __import__(name)
    cache = tmp_path / "cache"
    lazy = lazytrace.trace_graph(lib.blur, cache=cache)
    for _ in range(2):
        x = torch.rand(16)
        assert _same(lazy(x), lib.blur(x))
    traced = lazy.graphs[0]
    gc.collect()
    assert lazy.stats.stored == 1 and view.layout(traced).boxes
    result = run_fresh_python(f"""
        import gc, json, sys, torch, lazytrace
        from lazytrace import view
        sys.path.insert(0, {str(folder)!r})
        import {name} as lib
    """, f"""
        lazy = lazytrace.trace_graph(lib.blur, cache={str(cache)!r})
        ok = []
        for _ in range(3):
            x = torch.rand(16)
            a, b = lazy(x), lib.blur(x)
            gc.collect()
            ok.append(all(torch.equal(p, q) for p, q in zip(a[:2], b[:2])) and type(a[2]) is torch.Size
                      and a[2] == b[2])
        g = lazy.graphs[0]
        hover = [" ".join(b.details) for b in view.layout(g).boxes if b.kind == "constant"]
        print(json.dumps({{"ok": ok, "loaded": lazy.stats.loaded, "traces": lazy.stats.traces,
                          "dropped": g.dropped, "hover": hover, "dot": len(g.to_dot()), "source": g.source}}))
    """)
    assert result["ok"] == [True] * 3 and result["loaded"] == 1 and result["traces"] == 0
    assert result["dropped"] == traced.dropped and result["source"] == traced.source
    assert result["hover"] and result["dot"]


def test_a_loaded_graph_dropped_leaves_no_cyclic_garbage(temp_library, tmp_path):
    """A graph loaded from the persistent cache holds no Node <-> Value cycle either (codec.decode
    makes its calls' Values without the back reference, as TraceSession.unlink leaves a traced one)."""
    name, folder = temp_library(LIBRARY)
    lib = __import__(name)
    cache = tmp_path / "cache"
    lazy = lazytrace.trace_graph(lib.blur, cache=cache)
    lazy(torch.rand(16))
    assert lazy.stats.stored == 1
    result = run_fresh_python(f"""
        import gc, json, sys, torch, lazytrace
        sys.path.insert(0, {str(folder)!r})
        import {name} as lib
    """, f"""
        x = torch.rand(16)
        for warm in (True, False):
            lazy = lazytrace.trace_graph(lib.blur, cache={str(cache)!r})
            lazy(x)
            lazy(x)
            loaded = lazy.stats.loaded
            linked = sum(v.node is not None for n in lazy.graphs[0].nodes for v in n.outputs)
            if warm:
                del lazy
                gc.collect()
                gc.disable()
        kept = gc.collect()
        del lazy
        dropped = gc.collect()
        print(json.dumps({{"loaded": loaded, "linked": linked, "kept": kept, "dropped": dropped}}))
    """)
    assert result == {"loaded": 1, "linked": 0, "kept": 0, "dropped": 0}

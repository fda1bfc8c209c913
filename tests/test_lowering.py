"""torch's Python wrappers (F.pad, F.interpolate ...) replay as the C calls they make
(backends/torch_lowering.py): same results and gradients as eager on new inputs, the wrapper
still honoured when replaced after the trace, stored graphs reload, keyed branches retrace."""
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch.nn.functional import pad as imported_pad

from conftest import calls, run_fresh_python

import lazytrace
from lazytrace.backends import torch_lowering


def _img(*shape, grad=False):
    return torch.rand(*shape, dtype=torch.float64, requires_grad=grad)


def _theta():
    return (torch.eye(2, 3, dtype=torch.float64) + 0.1 * torch.rand(2, 2, 3, dtype=torch.float64)).requires_grad_()


#: name -> (function of its inputs, input makers, the C function the graph must call)
CASES = {
    "pad constant": (lambda x: F.pad(x, [1, 2, 0, 1], mode="constant", value=0.5), [lambda: _img(1, 2, 5, 6)],
                     torch._C._nn.pad),
    "pad reflect": (lambda x: F.pad(x, (2, 2, 1, 1), "reflect"), [lambda: _img(1, 2, 5, 6)], torch._C._nn.pad),
    "pad replicate": (lambda x: F.pad(x, (1, 1), mode="replicate"), [lambda: _img(2, 3, 7)], torch._C._nn.pad),
    "interpolate bilinear size": (lambda x: F.interpolate(x, size=(4, 9), mode="bilinear"),
                                  [lambda: _img(1, 2, 6, 6)], torch._C._nn.upsample_bilinear2d),
    "interpolate bilinear align": (lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),
                                   [lambda: _img(1, 2, 6, 6)], torch._C._nn.upsample_bilinear2d),
    "interpolate antialias": (lambda x: F.interpolate(x, size=3, mode="bilinear", antialias=True),
                              [lambda: _img(1, 2, 8, 8)], torch._C._nn._upsample_bilinear2d_aa),
    "interpolate nearest": (lambda x: F.interpolate(x, scale_factor=(0.5, 2.0)), [lambda: _img(1, 2, 6, 6)],
                            torch._C._nn.upsample_nearest2d),
    "interpolate nearest 1d": (lambda x: F.interpolate(x, size=11), [lambda: _img(2, 3, 5)],
                               torch._C._nn.upsample_nearest1d),
    "interpolate bicubic": (lambda x: F.interpolate(x, size=[7, 5], mode="bicubic", align_corners=False),
                            [lambda: _img(1, 1, 4, 4)], torch._C._nn.upsample_bicubic2d),
    "interpolate trilinear": (lambda x: F.interpolate(x, scale_factor=2, mode="trilinear"),
                              [lambda: _img(1, 1, 2, 3, 3)], torch._C._nn.upsample_trilinear3d),
    "grid_sample": (lambda x, g: F.grid_sample(x, g, mode="bilinear", padding_mode="border", align_corners=False),
                    [lambda: _img(1, 2, 6, 6, grad=True), lambda: (_img(1, 4, 5, 2) * 2 - 1).requires_grad_()],
                    torch.grid_sampler),
    "affine_grid": (lambda t: F.affine_grid(t, [2, 3, 5, 4], align_corners=False), [_theta],
                    torch.affine_grid_generator),
    "affine + grid_sample": (lambda x, t: F.grid_sample(x, F.affine_grid(t, list(x.shape), False), align_corners=False),
                             [lambda: _img(2, 3, 6, 6, grad=True), _theta], torch.grid_sampler),
    "max_pool2d": (lambda x: F.max_pool2d(x, 3, stride=1, padding=1), [lambda: _img(1, 2, 6, 6, grad=True)],
                   torch.max_pool2d),
    "max_pool2d indices": (lambda x: F.max_pool2d(x, 2, return_indices=True), [lambda: _img(1, 2, 6, 6, grad=True)],
                           torch._C._nn.max_pool2d_with_indices),
    "unfold": (lambda x: F.unfold(x, 3, padding=1), [lambda: _img(1, 2, 5, 5, grad=True)], torch._C._nn.im2col),
    "fold": (lambda x: F.fold(x, (4, 5), (2, 2)), [lambda: _img(1, 8, 12, grad=True)], torch._C._nn.col2im),
    "group_norm": (lambda x, w: F.group_norm(x, 2, w, None, 1e-3), [lambda: _img(2, 4, 3, 3, grad=True),
                                                                    lambda: _img(4, grad=True)], torch.group_norm),
    "layer_norm": (lambda x: F.layer_norm(x, [3, 3]), [lambda: _img(2, 4, 3, 3, grad=True)], torch.layer_norm),
    "batch_norm eval": (lambda x, m, v: F.batch_norm(x, m, v, eps=1e-3),
                        [lambda: _img(2, 4, 3, grad=True), lambda: _img(4), lambda: _img(4) + 0.5], torch.batch_norm),
    "einsum": (lambda x, y: torch.einsum("bchw,bc->bhw", x, y), [lambda: _img(2, 3, 4, 4, grad=True),
                                                              lambda: _img(2, 3, grad=True)], torch._VF.einsum),
    "einsum list": (lambda x, y: torch.einsum("ij,jk", [x, y]), [lambda: _img(3, 4, grad=True),
                                                              lambda: _img(4, 2, grad=True)], torch._VF.einsum),
    "dropout eval": (lambda x: F.dropout(x, 0.3, training=False) * 2, [lambda: _img(3, 4, grad=True)],
                     torch.dropout),
    "relu": (lambda x: F.relu(x - 0.5), [lambda: _img(3, 4, grad=True)], torch.relu),
    "relu inplace": (lambda x: F.relu(x * 2 - 1, inplace=True), [lambda: _img(3, 4, grad=True)], torch.relu_),
    "silu": (lambda x: F.silu(x), [lambda: _img(3, 4, grad=True)], torch._C._nn.silu),
    "leaky_relu": (lambda x: F.leaky_relu(x - 0.5, 0.2), [lambda: _img(3, 4, grad=True)], torch._C._nn.leaky_relu),
    "hardtanh inplace": (lambda x: F.hardtanh(x * 3, -1.5, 2.0, inplace=True), [lambda: _img(3, 4, grad=True)],
                         torch._C._nn.hardtanh_),
    "elu": (lambda x: F.elu(x - 0.5, alpha=0.7), [lambda: _img(3, 4, grad=True)], torch._C._nn.elu),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, (None, 3)), [lambda: _img(1, 2, 5, 7, grad=True)],
                            torch._C._nn.adaptive_avg_pool2d),
}


def _outputs(result):
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _grads(fn, inputs):
    outs = [o for o in _outputs(fn(*inputs)) if o.is_floating_point()]
    leaves = [x for x in inputs if x.requires_grad]
    if not leaves or not any(o.requires_grad for o in outs):
        return []
    return torch.autograd.grad(sum((o * torch.linspace(0.5, 2, o.numel(), dtype=o.dtype).view_as(o)).sum()
                                   for o in outs if o.requires_grad), leaves, allow_unused=True)


@pytest.mark.parametrize("name", CASES)
def test_a_lowered_wrapper_names_its_c_call_and_matches_eager(name):
    fn, makers, target = CASES[name]
    lazy = lazytrace.trace_graph(fn)
    lazy(*[make() for make in makers])
    inputs = [make() for make in makers]            # new values, same signature: a replay
    out = lazy(*inputs)
    assert lazy.stats.hits == 1 and lazy.stats.traces == 1
    graph = lazy.graphs[0]
    assert target in [n.target for n in calls(graph)]
    alias = next(a for a, f in graph.fn.__globals__.items() if f is target)
    assert f" {alias}(" in graph.source                     # readable: the C call, by its alias
    for got, want in zip(_outputs(out), _outputs(fn(*inputs)), strict=True):
        assert torch.equal(got, want)
    for got, want in zip(_grads(lazy, inputs), _grads(fn, inputs), strict=True):
        assert (got is None and want is None) or torch.equal(got, want)


def test_the_check_of_the_wrapper_is_in_the_source():
    graph = lazytrace.trace_graph(lambda x: F.pad(x, [1, 1]), args=(torch.rand(2, 3),))
    assert "# pad = torch._C._nn.pad" in graph.source
    assert "# pad_1 = torch.nn.functional.pad" in graph.source      # the wrapper, checked by identity:
    assert any(line.lstrip().startswith("if _globals") and "is not pad_1" in line for line in graph.source.splitlines())


def _padded(x):
    return F.pad(x, [1, 1], mode="constant", value=0.0) * 2


def _padded_by_name(x):
    return imported_pad(x, [1, 1]) * 2


def _marked_pad(x, pad, mode="constant", value=None):
    return torch.full((1,), -7.0)


def test_a_wrapper_replaced_after_the_trace_is_called_as_in_eager(monkeypatch):
    lazy = lazytrace.trace_graph(_padded)
    x = torch.rand(2, 3)
    assert torch.equal(lazy(x), _padded(x))
    assert torch._C._nn.pad in [n.target for n in calls(lazy.graphs[0])]
    monkeypatch.setattr(torch.nn.functional, "pad", _marked_pad)      # F is the same module
    assert torch.equal(lazy(x), torch.full((1,), -14.0))
    monkeypatch.undo()
    assert torch.equal(lazy(x), _padded(x))


def test_a_wrapper_imported_by_name_and_replaced_is_called_as_in_eager(monkeypatch):
    lazy = lazytrace.trace_graph(_padded_by_name)
    x = torch.rand(2, 3)
    assert torch.equal(lazy(x), _padded_by_name(x)) and torch.equal(lazy(x), _padded_by_name(x))
    monkeypatch.setitem(globals(), "imported_pad", _marked_pad)       # `from torch.nn.functional import pad`
    assert torch.equal(lazy(x), torch.full((1,), -14.0))


def test_mc_dropout_by_replacing_f_dropout_after_the_trace(monkeypatch):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).eval()
    lazytrace.trace_graph(model)
    x = torch.rand(8, 4)
    assert torch.equal(model(x), model(x)) and model.forward.stats.hits == 1
    assert torch.dropout in [n.target for n in calls(model.forward.graphs[0])]
    original = F.dropout
    monkeypatch.setattr(F, "dropout", lambda x, p=0.5, training=True, inplace=False: original(x, p, True, inplace))
    draws = [model(x) for _ in range(3)]
    assert any((d == 0).any() for d in draws) and not torch.equal(draws[0], draws[1])


def test_dropout_in_training_stays_a_random_node():
    lazy = lazytrace.trace_graph(lambda x: F.dropout(x, 0.5) + 1)
    x = torch.ones(64)
    first, second = lazy(x), lazy(x)
    assert lazy.stats.hits == 1 and not torch.equal(first, second)
    torch.manual_seed(3)
    replayed = lazy(x)
    torch.manual_seed(3)
    assert torch.equal(replayed, F.dropout(x, 0.5) + 1)       # the same draws as eager


def test_a_branch_on_an_argument_value_or_a_shape_retraces():
    lazy = lazytrace.trace_graph(lambda x, mode: F.interpolate(x, size=8, mode=mode))
    for shape, mode, target in (((1, 2, 4), "nearest", torch._C._nn.upsample_nearest1d),
                                ((1, 2, 4, 4), "nearest", torch._C._nn.upsample_nearest2d),
                                ((1, 2, 4, 4), "bilinear", torch._C._nn.upsample_bilinear2d),
                                ((1, 2, 4, 4), "bicubic", torch._C._nn.upsample_bicubic2d)):
        x = torch.rand(*shape)
        lazy(x, mode)
        x = torch.rand(*shape)
        assert torch.equal(lazy(x, mode), F.interpolate(x, size=8, mode=mode))
        assert target in [n.target for n in calls(lazy.graph_for(x, mode))]
    assert lazy.stats.traces == 4 and lazy.stats.hits == 4


@pytest.mark.parametrize("fn, makers", [
    (lambda x: F.pad(x[x > 0.5].reshape(1, 1, -1), [1, 1]), [lambda: torch.rand(4, 4)]),    # data-dependent shape
    (lambda x: torch.einsum("ij,jk,kl->il", x, x, x), [lambda: torch.rand(3, 3)]),   # an opt_einsum path
    (lambda x: F.interpolate(x, scale_factor=1.5, recompute_scale_factor=True), [lambda: torch.rand(1, 1, 4, 4)]),
    (lambda x: F.interpolate(x, size=(2, 2), mode="area"), [lambda: torch.rand(1, 1, 4, 4)]),
])
def test_calls_whose_branches_a_graph_does_not_fix_keep_the_wrapper(fn, makers):
    lazy = lazytrace.trace_graph(fn)
    lazy(*[make() for make in makers])
    inputs = [make() for make in makers]
    assert torch.equal(lazy(*inputs), fn(*inputs))
    assert lazy.graphs and not [n for g in lazy.graphs for n in calls(g) if n.target in torch_lowering.TARGETS]


class _Seen(torch.overrides.TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.append(getattr(func, "__name__", ""))
        return func(*args, **(kwargs or {}))


def test_under_a_user_torch_function_mode_the_wrapper_is_kept():
    lazy = lazytrace.trace_graph(lambda x: F.interpolate(x, size=6, mode="nearest") + 1)
    x = torch.rand(1, 1, 3, 3)
    with _Seen() as outer:
        lazy(x)
        lazy(x)
    assert outer.names.count("interpolate") == 2            # eager's call, seen at the replay too
    assert lazy.stats.hits == 1
    with torch.device("cpu"):                           # the default device's mode: lowered
        lazy(x)
        lazy(x)
        assert torch._C._nn.upsample_nearest2d in [n.target for g in lazy.graphs for n in calls(g)]


def test_batch_norm_in_training_updates_running_stats_as_eager():
    def fn(x, mean, var):
        return F.batch_norm(x, mean, var, training=True, momentum=0.2)
    lazy = lazytrace.trace_graph(fn)
    stats = [torch.zeros(4), torch.ones(4)]
    eager_stats = [torch.zeros(4), torch.ones(4)]
    for _ in range(3):
        x = torch.rand(5, 4, 3)
        assert torch.equal(lazy(x, *stats), fn(x, *eager_stats))
        assert all(torch.equal(a, b) for a, b in zip(stats, eager_stats))
    assert lazy.stats.hits == 2 and torch.batch_norm in [n.target for n in calls(lazy.graphs[0])]


def test_an_output_size_given_as_torch_size_is_lowered():
    graph = lazytrace.trace_graph(lambda x, y: F.interpolate(x, size=y.shape[2:]), args=(torch.rand(1, 1, 2, 2),
                                                                                         torch.rand(1, 1, 5, 3)))
    assert torch._C._nn.upsample_nearest2d in [n.target for n in calls(graph)]
    x = torch.rand(1, 1, 2, 2)
    assert torch.equal(graph(x, torch.rand(1, 1, 5, 3)), F.interpolate(x, size=(5, 3)))


class _Tagged(torch.Tensor):
    pass


def test_a_tensor_subclass_keeps_the_wrapper():
    x = torch.rand(1, 1, 3, 3).as_subclass(_Tagged)
    graph = lazytrace.trace_graph(lambda x: F.pad(x, [1, 1]), args=(x,))
    assert torch._C._nn.pad not in [n.target for n in calls(graph)]


def test_an_unreviewed_torch_release_lowers_nothing(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    assert F.pad not in torch_lowering.Lowering()
    monkeypatch.undo()
    assert F.pad in torch_lowering.Lowering()


def test_lowered_calls_compile():
    def fn(x, t):
        y = F.grid_sample(F.pad(x, [1, 1, 1, 1], mode="reflect"), F.affine_grid(t, [1, 2, 5, 5], False),
                          align_corners=False)
        return F.interpolate(y, size=(8, 8), mode="bilinear")
    compiled = lazytrace.trace_graph(fn, return_backend_traced_fn=True)
    x, t = torch.rand(1, 2, 6, 6), torch.eye(2, 3).unsqueeze(0)
    compiled(x, t)
    x, t = torch.rand(1, 2, 6, 6), torch.eye(2, 3).unsqueeze(0) + 0.05
    assert torch.allclose(compiled(x, t), fn(x, t), atol=1e-6)
    assert compiled.stats.hits == 1


LIBRARY = '''
import torch
import torch.nn.functional as F

def resized(x):
    y = F.interpolate(F.pad(x, [1, 1, 1, 1], mode="reflect"), size=(5, 7), mode="bilinear")
    return F.dropout(y, 0.5, training=False) + torch.einsum("bchw,bc->bhw", y, x[:, :, 0, 0]).unsqueeze(1)
'''


def test_a_stored_graph_with_lowered_calls_reloads_in_a_fresh_process(temp_library, tmp_path):
    name, folder = temp_library(LIBRARY)
    lib = __import__(name)
    cache = tmp_path / "cache"
    lazy = lazytrace.trace_graph(lib.resized, cache=cache)
    lazy(torch.rand(1, 2, 4, 4))
    assert lazy.stats.stored == 1
    assert torch._C._nn.upsample_bilinear2d in [n.target for n in calls(lazy.graphs[0])]
    prelude = f"""
        import json, sys, torch, lazytrace
        sys.path.insert(0, {str(folder)!r})
        import {name} as lib
    """
    result = run_fresh_python(prelude, textwrap.dedent(f"""
        lazy = lazytrace.trace_graph(lib.resized, cache={str(cache)!r})
        x = torch.rand(1, 2, 4, 4)
        ok = [torch.equal(lazy(x), lib.resized(x))]
        targets = [getattr(n.target, "__name__", "") for n in lazy.graphs[0].nodes]
        torch.nn.functional.pad = lambda *a, **k: torch.zeros(1, 2, 6, 6)      # replaced after loading
        ok.append(torch.equal(lazy(x), lib.resized(x)) and lazy(x).abs().sum().item() == 0)
        print(json.dumps({{"ok": ok, "targets": targets, **lazy.stats.as_dict()}}))
    """))
    assert result["ok"] == [True, True]
    assert result["loaded"] == 1 and result["traces"] == 1          # a retrace after the replacement only
    assert {"upsample_bilinear2d", "pad", "einsum", "dropout"} <= set(result["targets"])


def test_a_wrapper_the_user_put_in_torch_nn_functional_before_lazytrace_loaded_torch():
    """`F.pad = logged(F.pad)` (a profiling wrapper taking *args, **kwargs) set before lazytrace's
    torch backend is loaded: torch hands the wrapper to the trace's mode (its pad dispatches by
    the name torch.nn.functional.pad); lowering bound it by torch's signature and raised KeyError."""
    prelude = """
        import json, torch, torch.nn.functional as F
        original = F.pad
        def logged(*args, **kwargs):
            return original(*args, **kwargs)
        F.pad = logged
        import lazytrace
    """
    result = run_fresh_python(prelude, """
        def f(x):
            return F.pad(x, (1, 2), value=0.5) * 3.0

        lazy = lazytrace.trace_graph(f)
        ok = []
        for _ in range(3):
            x = torch.rand(2, 3)
            ok.append(torch.equal(lazy(x), f(x)))
        print(json.dumps({"ok": ok, "stats": lazy.stats.as_dict()}))
    """)
    assert result["ok"] == [True, True, True], result
    assert result["stats"]["traces"] == 1 and result["stats"]["eager"] == 0, result


def test_a_replacement_of_a_torch_wrapper_that_changes_the_result():
    """torch's F.pad dispatches by the name torch.nn.functional.pad: under any function mode, a
    replacement put there is handed to the mode from inside the original it called. The trace
    records the original (which the replacement holds), so the replacement applies once, in the
    first call and in the graph."""
    prelude = """
        import functools, json, torch, torch.nn.functional as F
        original = F.pad
        F.pad = lambda *args, **kwargs: original(*args, **kwargs) + 100.0
        original_interpolate = F.interpolate
        F.interpolate = functools.partial(original_interpolate, mode="nearest")   # holds it as .func
        import lazytrace
    """
    result = run_fresh_python(prelude, """
        def f(x):
            return F.pad(x, (1, 1)) * 3.0 + F.interpolate(x[None], size=8)[0, :, :4].sum()

        lazy = lazytrace.trace_graph(f)
        ok = []
        for _ in range(3):
            x = torch.rand(2, 3)
            ok.append(torch.equal(lazy(x), f(x)))
        print(json.dumps({"ok": ok, "stats": lazy.stats.as_dict(), "source": lazy.graphs[0].source}))
    """)
    assert result["ok"] == [True, True, True], result
    assert result["stats"]["traces"] == 1 and result["stats"]["eager"] == 0 and result["stats"]["hits"] == 2, result
    assert "<lambda>" not in result["source"], result["source"]


def test_a_replacement_of_a_torch_function_that_does_not_hold_the_original_runs_eagerly():
    """A replacement that reaches the original some way lazytrace cannot follow (here a dict in
    another module's global, and two functions sharing the original's code, so no single one is
    found): the call runs eagerly, with the reason, never with the replacement applied twice."""
    prelude = """
        import json, types, torch, torch.nn.functional as F
        originals = {"pad": F.pad}
        twin = types.FunctionType(F.pad.__code__, F.pad.__globals__, "pad", F.pad.__defaults__)
        F.pad = lambda *args, **kwargs: originals["pad"](*args, **kwargs) + 100.0
        import lazytrace
    """
    result = run_fresh_python(prelude, """
        def f(x):
            return F.pad(x, (1, 1)) * 3.0

        lazy = lazytrace.trace_graph(f)
        ok = []
        for _ in range(3):
            x = torch.rand(2, 3)
            ok.append(torch.equal(lazy(x), f(x)))
        print(json.dumps({"ok": ok, "stats": lazy.stats.as_dict(), "reasons": list(lazy.stats.reasons)}))
    """)
    assert result["ok"] == [True, True, True], result
    assert result["stats"]["eager"] == 3 and result["stats"]["hits"] == 0, result
    assert any("replacement of a torch function" in r for r in result["reasons"]), result


def test_a_librarys_own_dispatch_through_handle_torch_function_is_recorded_as_its_function():
    """A library function dispatching itself (`handle_torch_function(my_op, ...)` inside `my_op`, and
    through a helper it passes itself to) is not taken for a replacement."""
    from torch.overrides import handle_torch_function, has_torch_function

    def dispatch(op, x, scale):
        if has_torch_function((x,)):
            return handle_torch_function(op, (x,), x, scale)
        return None

    def my_op(x, scale):
        if has_torch_function((x,)):
            return handle_torch_function(my_op, (x,), x, scale)
        return x * scale + 1.0

    def my_other_op(x, scale):
        out = dispatch(my_other_op, x, scale)
        return x * scale - 1.0 if out is None else out

    def f(x):
        return my_op(x, 2.0) + my_other_op(x, 3.0)

    lazy = lazytrace.trace_graph(f)
    for _ in range(3):
        x = torch.rand(4)
        assert torch.equal(lazy(x), f(x))
    assert lazy.stats.traces == 1 and lazy.stats.hits == 2 and lazy.stats.eager == 0

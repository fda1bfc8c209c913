"""Red team 9: a user's training loop and module code (lazy modules, a traced model's class
swapped, activation checkpointing of a traced function), compared with eager on new inputs."""
import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import lazytrace


def _rand(*shape, seed, **kwargs):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed), **kwargs)


def _lazy_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.LazyLinear(3), nn.ReLU(), nn.LazyLinear(2))


def test_a_traced_model_with_lazy_modules_runs_its_first_call_eagerly_then_traces():
    plain, model = _lazy_model(), _lazy_model()
    lazytrace.trace_graph(model)
    for seed in range(4):
        x = _rand(2, 4, seed=seed)
        torch.manual_seed(seed)
        expected, state = plain(x), torch.get_rng_state()
        torch.manual_seed(seed)
        assert torch.equal(model(x), expected)          # (the first call materializes the parameters)
        assert torch.equal(torch.get_rng_state(), state)
    stats = model.forward.stats
    assert stats.eager == 1 and "uninitialized parameter" in next(iter(stats.reasons))
    assert stats.traces == 1 and stats.hits == 2


def test_a_function_calling_a_lazy_module_runs_eagerly_while_it_materializes_then_traces():
    plain, held = _lazy_model(), _lazy_model()
    step = lazytrace.trace_graph(lambda x: held(x) * 2)
    for seed in range(4):
        x = _rand(2, 4, seed=seed)
        torch.manual_seed(seed)
        expected = plain(x) * 2
        torch.manual_seed(seed)
        assert torch.equal(step(x), expected)
    assert step.stats.eager == 1 and "cannot describe" in next(iter(step.stats.reasons))
    assert step.stats.traces == 2 and step.stats.hits == 2     # traced again once materialized


class _Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x).relu()


class _Other(_Model):
    def forward(self, x):
        return self.lin(x) - 1


def test_a_traced_model_whose_class_is_swapped_runs_the_new_class_forward():
    torch.manual_seed(0)
    model, plain = _Model(), _Model()
    plain.load_state_dict(model.state_dict())
    lazytrace.trace_graph(model)
    for seed in range(2):
        assert torch.equal(model(_rand(2, 4, seed=seed)), plain(_rand(2, 4, seed=seed)))
    model.__class__ = plain.__class__ = _Other
    for seed in range(2, 5):
        x = _rand(2, 4, seed=seed)
        assert torch.equal(model(x), plain(x))
    assert model.forward.stats.traces == 2


@pytest.mark.parametrize("module", [False, True])
def test_non_reentrant_checkpoint_of_a_traced_function_recomputes_and_gives_eager_gradients(module):
    torch.manual_seed(0)
    if module:
        fn, traced = nn.Sequential(nn.Linear(4, 5), nn.Tanh()), nn.Sequential(nn.Linear(4, 5), nn.Tanh())
        traced.load_state_dict(fn.state_dict())
        lazytrace.trace_graph(traced)
    else:
        def fn(x):
            return (x * 3).sin() @ torch.ones(4, 5)
        traced = lazytrace.trace_graph(fn)
    for seed in range(5):
        if seed == 2:           # a call outside checkpoint traces; the calls under it then replay
            assert torch.equal(traced(_rand(3, 4, seed=9, requires_grad=True)), fn(_rand(3, 4, seed=9)))
        x = _rand(3, 4, seed=seed, requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        y = checkpoint(fn, x, use_reentrant=False).pow(2).sum()
        y2 = checkpoint(traced, x2, use_reentrant=False).pow(2).sum()
        y.backward()
        y2.backward()       # recomputed: it must save what the forward saved; it stops by raising
        assert torch.equal(y, y2) and torch.equal(x.grad, x2.grad)
    stats = traced.stats if not module else traced.forward.stats
    assert stats.traces == 1 and stats.eager == 4 and stats.hits >= 3      # (a recomputation may stop early)
    assert "saved-tensor hooks" in next(iter(stats.reasons))


def test_a_framework_alias_given_as_to_names_the_same_backend():
    np = pytest.importorskip("numpy")
    for alias, array in (("pytorch", torch.ones(2)), ("np", np.ones(2))):
        double = lazytrace.trace_graph(lambda x: x * 2, to=alias)
        for value in (1.0, 2.0, 3.0):
            out = double(np.full(2, value) if alias == "pytorch" else torch.full((2,), value))
            assert type(out) is type(array) and (out == 2 * value).all()
        assert double.stats.eager == 0 and double.stats.traces == 1 and double.stats.hits == 2


def test_what_a_converted_function_wrote_before_raising_reaches_the_callers_array():
    pytest.importorskip("numpy")

    def bump_then_fail(x):
        x += 1
        raise ValueError("checked after the update")
    traced = lazytrace.trace_graph(bump_then_fail, to="numpy")
    for calls in range(1, 4):
        t = torch.zeros(3)
        with pytest.raises(ValueError, match="checked after the update"):
            traced(t)
        assert torch.equal(t, torch.ones(3))           # as bump_then_fail(t.numpy()) leaves it
    frozen = torch.zeros(3, requires_grad=True)
    with pytest.raises(ValueError, match="checked after the update") as info:   # the function's own error
        traced(frozen)
    assert "requires grad" in "".join(getattr(info.value, "__notes__", []))


class _Scale(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = s

    def forward(self, x):
        return x * self.s

    def __eq__(self, other):            # equal by configuration class, as some user modules define it
        return type(other) is type(self)

    __hash__ = nn.Module.__hash__


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.scale = nn.Linear(4, 3), _Scale(2.0)

    def forward(self, x):
        return self.scale(self.lin(x))


class _Helped(nn.Module):
    """A module held in a plain list attribute: not registered, reached through the attribute."""

    def __init__(self):
        super().__init__()
        self.helpers = [nn.Linear(4, 3)]

    def forward(self, x):
        return self.helpers[0](x)


@pytest.mark.parametrize("make, change, eager", [
    (_Scaled, lambda m: setattr(m, "scale", _Scale(5.0)), 0),       # an equal (by __eq__) other submodule
    (_Helped, lambda m: setattr(m.helpers[0], "weight", nn.Parameter(torch.ones(3, 4))), 0),
    (_Helped, lambda m: m.helpers[0].register_forward_hook(lambda mod, args, out: out * 3), 3),  # a hook: eager
])
def test_a_submodule_or_held_module_changed_after_the_trace_is_seen(make, change, eager):
    torch.manual_seed(0)
    model = make()
    torch.manual_seed(0)
    plain = make()
    lazytrace.trace_graph(model)
    for seed in range(2):
        assert torch.equal(model(_rand(2, 4, seed=seed)), plain(_rand(2, 4, seed=seed)))
    change(model)
    change(plain)
    for seed in range(2, 5):
        x = _rand(2, 4, seed=seed)
        assert torch.equal(model(x), plain(x))
    assert model.forward.stats.traces == 2 and model.forward.stats.eager == eager


@pytest.mark.parametrize("wrap", [lambda v: v, lambda v: (v, 1.0)], ids=["scalar", "in a tuple"])
def test_static_numpy_scalars_are_keyed_with_their_zero_sign_and_nan(wrap):
    np = pytest.importorskip("numpy")

    def inverse(x, cfg):
        s = cfg[0] if isinstance(cfg, tuple) else cfg
        return x * 0 + 1 / torch.tensor(float(s))
    traced = lazytrace.trace_graph(inverse, static_argnums=1)
    values = [np.float32(-0.0), np.float32(0.0), np.float32(-0.0), np.float64("nan"), np.float64("nan"),
              np.float32(0.0)]
    for seed, value in enumerate(values):
        x = _rand(3, seed=seed)
        assert torch.allclose(traced(x, wrap(value)), inverse(x, wrap(value)), equal_nan=True)
    assert traced.stats.traces == 3 and traced.stats.hits == 3


_GATE = {}


class _Gated(nn.Module):
    """Its trace waits until the test lets it go (replays run no Python of forward)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        _GATE["entered"].release()
        _GATE["release"].wait(10)
        return self.lin(x)


def test_a_call_in_another_thread_while_a_model_traces_waits_for_that_trace():
    import threading
    _GATE.update(entered=threading.Semaphore(0), release=threading.Event())
    torch.manual_seed(0)
    model = _Gated()
    lazytrace.trace_graph(model)
    x = _rand(2, 4, seed=0)
    results = []
    first = threading.Thread(target=lambda: results.append(model(x)))
    first.start()
    assert _GATE["entered"].acquire(timeout=10)        # the trace runs (the module's class is a recorder now)
    second = threading.Thread(target=lambda: results.append(model(x)))
    second.start()
    traced_twice = _GATE["entered"].acquire(timeout=1)   # a second trace would enter forward too
    _GATE["release"].set()
    first.join(10)
    second.join(10)
    assert not traced_twice and model.forward.stats.traces == 1
    assert len(results) == 2 and all(torch.equal(r, model.lin(x)) for r in results)


def _encoder_layers():
    torch.manual_seed(0)
    plain = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, dropout=0.0).eval()
    torch.manual_seed(0)
    return plain, nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, dropout=0.0).eval()


def test_transformer_fast_path_first_call_is_bitwise_eager():
    # nn.TransformerEncoderLayer's inference fast path checks has_torch_function, which the trace's
    # TorchFunctionMode makes true: a trace would take the other path (equal to ~2e-7, not bitwise)
    plain, model = _encoder_layers()
    lazytrace.trace_graph(model)
    with torch.no_grad():
        for seed in range(3):
            x = _rand(2, 5, 16, seed=seed)
            assert torch.equal(model(x), plain(x))
    assert model.forward.stats.traces == 0 and "fast path" in next(iter(model.forward.stats.reasons))
    x = _rand(2, 5, 16, seed=4, requires_grad=True)      # with autograd eager takes the other path: traced
    for _ in range(2):
        out, expected = model(x), plain(x)
        assert torch.equal(out, expected)
        assert torch.equal(torch.autograd.grad(out.sum(), x)[0], torch.autograd.grad(expected.sum(), x)[0])
    assert model.forward.stats.traces == 1 and model.forward.stats.hits == 1


def test_transformer_traced_with_its_fast_path_off_runs_eagerly_once_it_is_on():
    plain, model = _encoder_layers()
    lazytrace.trace_graph(model)
    x = _rand(2, 5, 16, seed=0)
    with torch.no_grad():
        torch.backends.mha.set_fastpath_enabled(False)
        try:
            for _ in range(2):
                assert torch.equal(model(x), plain(x))
        finally:
            torch.backends.mha.set_fastpath_enabled(True)
        assert torch.equal(model(x), plain(x))
    assert model.forward.stats.traces == 1 and model.forward.stats.hits == 1 and model.forward.stats.eager == 1


_GLOBAL_ENCODER = {}


def _uses_global_encoder(x):
    return _GLOBAL_ENCODER["layer"](x) + 1


def test_a_function_reaching_a_transformer_in_eval_runs_eagerly_where_its_fast_path_would_run():
    plain, _GLOBAL_ENCODER["layer"] = _encoder_layers()
    traced = lazytrace.trace_graph(_uses_global_encoder)
    with torch.no_grad():
        torch.backends.mha.set_fastpath_enabled(False)      # traced with the fast path off ...
        try:
            x = _rand(2, 5, 16, seed=1)
            for _ in range(2):
                assert torch.equal(traced(x), plain(x) + 1)
        finally:
            torch.backends.mha.set_fastpath_enabled(True)
        for seed in range(2):                               # ... and on: eager
            x = _rand(2, 5, 16, seed=seed)
            assert torch.equal(traced(x), plain(x) + 1)
    assert traced.stats.hits == 1 and traced.stats.eager == 2     # (the second trace stopped before it ran)
    assert "fast path" in next(iter(traced.stats.reasons))


def _parametrized(seed=0):
    import torch.nn.utils.parametrize as P

    class Symmetric(nn.Module):
        def forward(self, w):
            return w.triu() + w.triu(1).t()
    torch.manual_seed(seed)
    m = nn.Linear(4, 4)
    P.register_parametrization(m, "weight", Symmetric())
    return m


def _bump(*modules):
    with torch.no_grad():       # inside cached(), eager keeps the weight the block's first call made
        for m in modules:
            m.parametrizations.weight.original.add_(1)


def test_calls_inside_parametrize_cached_run_eagerly_until_a_graph_exists():
    import torch.nn.utils.parametrize as P
    plain, model = _parametrized(), _parametrized()
    lazytrace.trace_graph(model)
    with P.cached():
        for seed in range(3):
            _bump(plain, model)
            x = _rand(2, 4, seed=seed)
            assert torch.equal(model(x), plain(x))
    assert model.forward.stats.traces == 0 and "parametrize.cached" in next(iter(model.forward.stats.reasons))


def test_a_graph_replayed_inside_parametrize_cached_reads_its_cache():
    # a graph traced outside the block would recompute the parametrization where eager reuses
    # the block's cached weight: inside it, the module runs eagerly
    import torch.nn.utils.parametrize as P
    plain, model = _parametrized(), _parametrized()
    lazytrace.trace_graph(model)
    model(_rand(2, 4, seed=9))
    plain(_rand(2, 4, seed=9))
    with P.cached():
        for seed in range(3):
            _bump(plain, model)
            x = _rand(2, 4, seed=seed)
            assert torch.equal(model(x), plain(x))
    assert model.forward.stats.hits == 0 and "parametrize.cached" in next(iter(model.forward.stats.reasons))


_GLOBAL_PARAMETRIZED = {}


def _uses_global_parametrized(x):
    return _GLOBAL_PARAMETRIZED["model"](x) * 2


def test_a_function_reaching_a_parametrized_model_runs_eagerly_inside_parametrize_cached():
    # the model is a global the function reaches (not trace_graph(model)): torch's own code reads
    # parametrize's cache switch around it (Backend.model_state_reads), so the graph checks it
    import torch.nn.utils.parametrize as P
    plain = _parametrized()
    _GLOBAL_PARAMETRIZED["model"] = _parametrized()
    traced = lazytrace.trace_graph(_uses_global_parametrized)
    for seed in (7, 8):
        x = _rand(2, 4, seed=seed)
        assert torch.equal(traced(x), plain(x) * 2)
    with P.cached():
        for seed in range(3):
            _bump(plain, _GLOBAL_PARAMETRIZED["model"])
            x = _rand(2, 4, seed=seed)
            assert torch.equal(traced(x), plain(x) * 2)
    _bump(plain, _GLOBAL_PARAMETRIZED["model"])
    x = _rand(2, 4, seed=5)
    assert torch.equal(traced(x), plain(x) * 2)         # outside the block the graph replays again
    assert traced.stats.traces == 1 and traced.stats.hits == 2 and traced.stats.eager == 3


class _AutocastNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.out = nn.Linear(8, 8), nn.Linear(8, 2)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.lin(x)
        return self.out(y.float().relu())


def test_autocast_inside_forward_sees_the_parameters_an_optimizer_step_changed():
    """autocast caches the casts of parameters until its outermost block ends; a graph replaying
    the block must drop them as eager does, or the next call computes with the old weights."""
    losses, weights = [], []
    for traced in (False, True):
        torch.manual_seed(0)
        net = _AutocastNet()
        if traced:
            lazytrace.trace_graph(net)
        opt = torch.optim.SGD(net.parameters(), lr=0.5)
        run = []
        for step in range(5):
            x, y = _rand(4, 8, seed=step), torch.arange(4) % 2
            loss = nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            run.append(loss.detach())
        losses.append(torch.stack(run))
        weights.append(net.lin.weight.detach().clone())
        stats = net.forward.stats if traced else None
    assert torch.equal(losses[0], losses[1]) and torch.equal(weights[0], weights[1])
    assert stats.hits == 4 and stats.eager == 0


def test_autocast_in_a_function_sees_a_global_weight_updated_in_place():
    torch.manual_seed(0)
    weight = torch.randn(4, 4, requires_grad=True)

    def project(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return x @ weight
    traced = lazytrace.trace_graph(project)
    for step in range(4):
        with torch.no_grad():
            weight.add_(1.0)
        x = _rand(2, 4, seed=step)
        out = traced(x)             # (an eager call in between would drop autocast's cache itself)
        assert torch.equal(out, x.bfloat16() @ weight.bfloat16())
    assert traced.stats.hits == 3


def test_torch_compile_of_a_traced_module():
    """dynamo runs lazytrace's own frames as they are (it inlined the tracer and raised
    RecursionError): a compiled model whose forward is traced gives eager's results."""
    torch.manual_seed(0)
    model, plain = nn.Sequential(nn.Linear(4, 3), nn.ReLU()), nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    plain.load_state_dict(model.state_dict())
    lazytrace.trace_graph(model)
    compiled = torch.compile(model, backend="eager")
    for seed in range(3):
        x = _rand(2, 4, seed=seed)
        assert torch.equal(compiled(x), plain(x))
    assert model.forward.stats.traces == 1 and model.forward.stats.hits == 2


@pytest.mark.parametrize("reached", ["traced model", "global model"])
def test_activations_a_forward_hook_stores_are_those_of_each_call(reached):
    """Feature extraction: a hook on a submodule stores its output at every call (a graph would
    leave the first call's there): such a model runs eagerly, with the reason."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    stored = {}
    model[0].register_forward_hook(lambda module, args, out: stored.__setitem__("features", out.detach()))
    call, stats = _traced_or_reached(model, reached)
    for seed in range(4):
        x = _rand(1, 4, seed=seed)
        call(x)
        assert torch.equal(stored["features"], model[0](x))
    assert stats.hits == 0 and "module hook" in next(iter(stats.reasons))


_MODELS = {}


def _through_global(x):
    return _MODELS["net"](x) * 2


def _traced_or_reached(model, reached):
    """(what to call, its stats): the model traced by trace_graph(model), or a traced function
    reaching it through a global."""
    if reached == "traced model":
        lazytrace.trace_graph(model)
        return model, model.forward.stats
    _MODELS["net"] = model
    call = lazytrace.trace_graph(_through_global)
    return call, call.stats


_KEPT = []


class _Sliced(nn.Module):
    def __init__(self, keep=False):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.Tanh())
        self.n, self.keep = 2, keep

    def forward(self, x):
        head = self.body[:self.n]       # a new Sequential, made by self.__class__(...)
        if self.keep:
            _KEPT.append(head)
        return head(x)


def test_a_slice_of_a_submodule_made_in_forward_replays():
    torch.manual_seed(0)
    model, plain = _Sliced(), _Sliced()
    plain.load_state_dict(model.state_dict())
    lazytrace.trace_graph(model)
    for seed in range(5):
        if seed == 3:
            model.n = plain.n = 3
        x = _rand(2, 4, seed=seed)
        assert torch.equal(model(x), plain(x))
    stats = model.forward.stats         # (each slice's own attribute reads were once recorded: eager)
    assert stats.traces == 2 and stats.hits == 3 and stats.eager == 0


def test_an_object_made_by_self_class_under_a_trace_is_of_the_plain_class():
    import pickle
    model = _Sliced(keep=True)
    lazytrace.trace_graph(model)
    model(_rand(2, 4, seed=0))
    assert type(_KEPT[0]) is nn.Sequential      # not the recording subclass the trace gave model.body
    pickle.dumps(_KEPT.pop())


class _WithTorchScript(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.jit.trace(nn.Linear(4, 3), torch.zeros(2, 4))

    def forward(self, x):
        return self.lin(x) * 2


@pytest.mark.parametrize("reached", ["traced model", "global model"])
def test_a_model_holding_a_torchscript_module_runs_eagerly_and_stays_intact(reached):
    model, plain = _WithTorchScript(), _WithTorchScript()
    call, stats = _traced_or_reached(model, reached)
    for seed in range(3):
        x = _rand(2, 4, seed=seed)
        expected = plain(x) if reached == "traced model" else plain(x) * 2
        assert torch.equal(call(x), expected)
    assert torch.equal(model.lin(x), plain.lin(x)) and model.lin.training      # left as it was
    assert stats.hits == 0 and "TorchScript" in next(iter(stats.reasons))


class _Multiplier:
    def __init__(self):
        self.k = 2.0

    def __call__(self, x):
        return x * self.k


def test_a_callable_stateful_argument_is_called_with_its_reads_recorded():
    def apply(x, transform):
        return transform(x) + 1
    traced = lazytrace.trace_graph(apply, arg_stateful_idxs=[1])
    transform = _Multiplier()
    for seed in range(4):
        if seed == 2:
            transform.k = 5.0
        x = _rand(3, seed=seed)
        assert torch.equal(traced(x, transform), apply(x, transform))
    assert traced.stats.traces == 2 and traced.stats.hits == 2


def test_a_model_passed_as_a_stateful_argument_runs_eagerly_with_the_reason():
    def apply(x, model):
        return model(x) * 2
    traced = lazytrace.trace_graph(apply, arg_stateful_idxs=[1])
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3))
    for seed in range(3):
        if seed == 2:
            model[0].weight = nn.Parameter(torch.ones(3, 4))
        x = _rand(2, 4, seed=seed)
        assert torch.equal(traced(x, model), apply(x, model))
    assert traced.stats.eager == 3 and "trace_graph(model)" in next(iter(traced.stats.reasons))


@pytest.mark.parametrize("compile_", [torch.jit.script, lambda m: torch.jit.trace(m, torch.zeros(2, 4))],
                         ids=["script", "trace"])
def test_trace_graph_of_a_torchscript_module_says_why_it_cannot(compile_):
    module = compile_(nn.Linear(4, 3))
    with pytest.raises(TypeError, match="TorchScript module"):
        lazytrace.trace_graph(module)
    x = _rand(2, 4, seed=0)
    assert torch.equal(module(x), module.forward(x))        # left as it was

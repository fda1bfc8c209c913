"""PyTorch specifics: autograd, global state, nn.Module, torch.compile."""
import contextlib
import sys

import pytest
import torch

import lazytrace


def test_gradients_equal_eager():
    w = torch.randn(4, 4, requires_grad=True)

    def fn(x, b):
        h = torch.tanh(x @ w + b)
        return (h * h).sum(dim=1)

    lazy = lazytrace.trace_graph(fn)
    x = torch.randn(3, 4, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    lazy(x, b)                                     # trace
    for _ in range(2):
        x2 = torch.randn(3, 4, requires_grad=True)
        out = lazy(x2, b)
        ref_x = x2.detach().clone().requires_grad_(True)
        ref = fn(ref_x, b)
        assert out.requires_grad and torch.allclose(out, ref)
        gx, gb, gw = torch.autograd.grad(out.sum(), (x2, b, w))
        rx, rb, rw = torch.autograd.grad(ref.sum(), (ref_x, b, w))
        assert torch.allclose(gx, rx) and torch.allclose(gb, rb) and torch.allclose(gw, rw)
    assert lazy.stats.hits == 2


def test_requires_grad_is_part_of_the_signature():
    lazy = lazytrace.trace_graph(lambda x: x * 2)
    a = torch.ones(2)
    assert not lazy(a).requires_grad
    out = lazy(torch.ones(2, requires_grad=True))
    assert out.requires_grad and lazy.stats.traces == 2


def test_no_grad_inside_the_function_is_replayed():
    def fn(x):
        with torch.no_grad():
            y = x * 2
        return y + x

    lazy = lazytrace.trace_graph(fn)
    x = torch.ones(3, requires_grad=True)
    lazy(x)
    out = lazy(x)
    assert lazy.stats.hits == 1 and torch.is_grad_enabled()
    out.sum().backward()
    assert torch.equal(x.grad, torch.ones(3))      # only the `+ x` path carries gradient


def test_grad_mode_around_the_call_is_keyed():
    lazy = lazytrace.trace_graph(lambda x: x * 2)
    x = torch.ones(2, requires_grad=True)
    assert lazy(x).requires_grad
    with torch.no_grad():
        assert not lazy(x).requires_grad
    assert lazy(x).requires_grad
    assert lazy.stats.traces == 2


def test_default_dtype_is_keyed():
    lazy = lazytrace.trace_graph(lambda x: x.shape[0] * torch.ones(3))
    x = torch.ones(2)
    assert lazy(x).dtype == torch.float32
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        assert lazy(x).dtype == torch.float64
    finally:
        torch.set_default_dtype(old)
    assert lazy.stats.traces == 2


def test_module_forward_is_traced_and_parameters_are_live():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Dropout(0.5))
    returned = lazytrace.trace_graph(model)
    assert returned is model
    model.eval()
    x = torch.randn(64, 4)     # 192 outputs: some positive after the ReLU, for dropout to drop below
    first = model(x)
    assert torch.equal(first, model(x)) and model.forward.stats.hits == 1
    with torch.no_grad():
        model[0].weight.mul_(2)                      # in-place update: seen
    assert torch.allclose(model(x), torch.relu(x @ model[0].weight.T + model[0].bias))
    model[0].bias = torch.nn.Parameter(torch.zeros(3))   # rebinding: seen
    assert torch.allclose(model(x), torch.relu(x @ model[0].weight.T))
    model.train()                                    # dropout now active: another graph
    outs = [model(x) for _ in range(4)]
    assert any(not torch.equal(outs[0], o) for o in outs[1:])


def test_module_gradients_reach_parameters():
    model = torch.nn.Linear(3, 2)
    ref = torch.nn.Linear(3, 2)
    ref.load_state_dict(model.state_dict())
    lazytrace.trace_graph(model)
    x = torch.randn(5, 3)
    model(x)
    model(x).pow(2).sum().backward()
    ref(x).pow(2).sum().backward()
    assert torch.allclose(model.weight.grad, ref.weight.grad)


def test_eager_graph_of_a_module():
    model = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    returned = lazytrace.trace_graph(model, args=(x,))
    assert returned is model and isinstance(model.forward, lazytrace.Graph)
    assert torch.allclose(model(torch.ones(4, 3)), torch.ones(4, 3) @ model.weight.T + model.bias)


def test_generator_objects_are_live_inputs():
    def fn(x, gen):
        return x + torch.rand(x.shape, generator=gen)

    lazy = lazytrace.trace_graph(fn)
    x = torch.zeros(3)
    lazy(x, torch.Generator().manual_seed(1))
    a = lazy(x, torch.Generator().manual_seed(7))
    b = fn(x, torch.Generator().manual_seed(7))
    assert lazy.stats.hits == 1 and torch.equal(a, b)


def test_return_backend_traced_fn_uses_the_torch_compilers():
    def fn(x):
        return torch.sin(x) * 2 + 1

    graph = lazytrace.trace_graph(fn, args=(torch.randn(8),), return_backend_traced_fn=True)
    assert graph.fn.direct                                    # plain graph: inductor, called directly
    x = torch.randn(8)
    assert torch.allclose(graph(x), fn(x))
    assert graph.fn.choice in ("inductor", "python")          # whichever ran faster

    def branchy(x):
        return x * 2 if x.sum() > 0 else x - 1

    guarded = lazytrace.trace_graph(branchy, args=(torch.ones(8),), return_backend_traced_fn=True)
    assert not guarded.fn.direct                              # control flow: torch.compile
    assert torch.allclose(guarded(torch.full((8,), 3.0)), torch.full((8,), 6.0))
    assert guarded.fn.choice in ("torch.compile", "python")


def test_a_compiler_failure_is_not_retried_at_every_call(monkeypatch, caplog):
    import torch._inductor.compile_fx as compile_fx
    attempts = []

    def failing(*args, **kwargs):
        attempts.append(1)
        raise RuntimeError("a compiler failure")
    monkeypatch.setattr(compile_fx, "compile_fx", failing)

    def fn(x):
        return torch.cos(x) * 3 - 1
    lazy = lazytrace.trace_graph(fn, return_backend_traced_fn=True)
    with caplog.at_level("WARNING", logger="lazytrace"):
        for _ in range(4):
            x = torch.randn(5)
            assert torch.equal(lazy(x), fn(x))
    compiled = lazy.graphs[0].fn
    assert len(attempts) == 1 and compiled.choice == "python" and isinstance(compiled.error, RuntimeError)
    assert lazy.stats.hits == 3 - 1      # the first replay raised (the original ran), the next two hit
    assert "a compiler failure" in caplog.text


def test_bad_input_error_is_the_original_one():
    def fn(x):
        if (x < 0).any():
            raise ValueError("x must be non-negative")
        return x.sqrt()

    lazy = lazytrace.trace_graph(fn)
    lazy(torch.ones(3))
    with pytest.raises(ValueError, match="non-negative"):
        lazy(-torch.ones(3))
    assert torch.equal(lazy(torch.full((3,), 4.0)), torch.full((3,), 2.0))


def test_strides_are_keyed():
    lazy = lazytrace.trace_graph(lambda x: x.contiguous().view(-1) if not x.is_contiguous() else x.view(-1))
    x = torch.arange(6.0).reshape(2, 3)
    for arg in (x, x.t(), x, x.t()):
        assert torch.equal(lazy(arg), arg.reshape(-1))
    assert lazy.stats.traces == 2 and lazy.stats.hits == 2


def test_shape_of_an_external_array_is_guarded():
    table = torch.ones(3)

    def fn(x):
        return x[: table.shape[0]] * 2

    lazy = lazytrace.trace_graph(fn)
    x = torch.arange(5.0)
    lazy(x)
    table.resize_(4)                      # the closure's array changes shape in place
    assert torch.equal(lazy(x), fn(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_number_operands_replayed_as_tensors_are_bit_identical(dtype):
    import operator

    numbers = [2, -3, 0, 0.5, 1e-8, -0.0, 0.0, 3.0e38, float("inf"), float("nan"), 6.283185307179586, 1 / 3]
    ops = [operator.add, operator.sub, operator.mul, operator.truediv, operator.mod, operator.eq, operator.lt,
           operator.ge, lambda x, s: s - x, lambda x, s: s / x, lambda x, s: s * x,
           torch.add, torch.sub, torch.mul, torch.div, torch.remainder, torch.gt, torch.ne]
    x = torch.cat([torch.randn(64, dtype=dtype) * 1e3, torch.tensor([0.0, -0.0, 1.0, float("inf"),
                                                                     float("nan")], dtype=dtype)])
    for op in ops:
        for number in numbers:
            graph = lazytrace.trace_graph(lambda t: op(t, number), args=(x,))
            got, expected = graph(x), op(x, number)
            assert got.dtype == expected.dtype
            assert torch.equal(got.view(-1).view(torch.uint8 if got.dtype == torch.bool else torch.int64
                                                 if dtype == torch.float64 else torch.int32),
                               expected.view(-1).view(torch.uint8 if got.dtype == torch.bool else torch.int64
                                                      if dtype == torch.float64 else torch.int32)), (op, number)


def test_traced_module_deepcopies_and_saves():
    import copy
    import io
    import inspect

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())
    lazytrace.trace_graph(model)
    x = torch.randn(2, 3)
    model(x), model(x)
    clone = copy.deepcopy(model)
    with torch.no_grad():
        clone[0].weight.add_(1.0)                      # the copy has its own parameters...
    assert torch.allclose(clone(x), torch.relu(x @ clone[0].weight.T + clone[0].bias))
    assert not torch.allclose(clone(x), model(x))      # ...and its own graphs
    assert isinstance(clone.forward, lazytrace.LazyGraph) and clone.forward.stats.traces == 1
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert torch.allclose(loaded(x), model(x)) and loaded.forward.stats.hits == 0
    assert list(inspect.signature(model.forward).parameters) == ["input"]


def test_failed_guard_inside_no_grad_restores_grad_mode():
    def fn(x):
        with torch.no_grad():
            positive = bool(x.sum() > 0)
        return x * 2 if positive else x * 3

    lazy = lazytrace.trace_graph(fn)
    x = torch.ones(2, requires_grad=True)
    lazy(x), lazy(x)                          # traced, then served by the compiled fast path
    out = lazy(-x.detach().requires_grad_(True))   # the guard fails inside the no_grad block
    assert torch.is_grad_enabled() and out.requires_grad
    assert torch.equal(out, -torch.ones(2) * 3)


def test_metadata_only_calls_fold_only_for_keyed_metadata():
    table = torch.zeros(3)
    lazy = lazytrace.trace_graph(lambda x: x.sum() + torch.ones_like(x) + torch.ones_like(table).sum())
    x = torch.ones(2)
    lazy(x)
    assert lazy(x).tolist() == [6.0, 6.0]
    graph = lazy.graph_for(x)
    assert sum(n.target.__name__ == "ones_like" for n in graph.nodes) == 1   # x's folded, table's kept
    table.resize_(5)
    assert lazy(x).tolist() == [8.0, 8.0]


def test_metadata_only_arguments_are_per_position():
    # full_like reads x's metadata but t's value: t must stay an input, never be baked
    lazy = lazytrace.trace_graph(lambda x, t: torch.full_like(x, t) + x)
    x = torch.zeros(2)
    assert lazy(x, torch.tensor(2.0)).tolist() == [2.0, 2.0]
    assert lazy(x, torch.tensor(5.0)).tolist() == [5.0, 5.0]
    # k.to(x) reads only x's dtype and device, which are keyed: folded into a constant
    cast = lazytrace.trace_graph(lambda x: torch.tensor([1.0, 2.0]).to(x) * x)
    for dtype in (torch.float32, torch.float64):
        y = torch.rand(2, dtype=dtype)
        cast(y)
        assert torch.equal(cast(y), torch.tensor([1.0, 2.0]).to(y) * y) and cast(y).dtype == dtype
        assert [n.target.__name__ for n in cast.graph_for(y).nodes] == ["mul"]


def test_autocast_switched_inside_the_function_is_replayed():
    # torch.autocast inside a function never reaches a TorchFunctionMode: the tracer sees the state
    # change before the next call and records it, so the graph switches autocast as eager did
    def mixed(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ x
            if y.sum() > 0:
                y = y * 2
        return y.float() + x

    lazy = lazytrace.trace_graph(mixed)
    x = torch.rand(4, 4)
    for _ in range(3):
        y = torch.rand(4, 4)
        assert torch.equal(lazy(y), mixed(y)) and not torch.is_autocast_enabled("cpu")
    assert lazy.stats.hits == 2
    assert torch.equal(lazy(-x), mixed(-x))          # a guard fails inside the autocast region ...
    assert not torch.is_autocast_enabled("cpu")      # ... and autocast is put back


def test_kornia_under_an_outer_autocast_replays_its_inner_switches():
    import kornia

    # kornia switches autocast off around some stacks when it is on (kornia.core.ops)
    lazy = lazytrace.trace_graph(kornia.color.rgb_to_hsv)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for seed in range(3):
            img = torch.rand(1, 3, 8, 8, generator=torch.Generator().manual_seed(seed))
            got, want = lazy(img), kornia.color.rgb_to_hsv(img)
            assert torch.equal(got, want) and got.dtype == want.dtype
        assert torch.is_autocast_enabled("cpu")
    assert lazy.stats.hits == 2


def test_default_dtype_changed_inside_the_function_runs_eagerly():
    def default64(x):
        torch.set_default_dtype(torch.float64)
        try:
            return torch.ones(2) + x
        finally:
            torch.set_default_dtype(torch.float32)

    lazy = lazytrace.trace_graph(default64)
    for _ in range(3):
        y = torch.rand(2, dtype=torch.float64)
        assert torch.equal(lazy(y), default64(y))
    assert lazy.stats.hits == 0 and "set_default_dtype" in lazy.eager_signatures[0]


def test_autocast_around_the_call_is_keyed_with_its_dtype():
    lazy = lazytrace.trace_graph(lambda a: a @ a)
    y = torch.rand(3, 3)
    dtypes = []
    for dtype in (torch.bfloat16, torch.float16, torch.bfloat16, None):
        with torch.autocast("cpu", dtype=dtype or torch.float16, enabled=dtype is not None):
            dtypes.append(lazy(y).dtype)
    assert dtypes == [torch.bfloat16, torch.float16, torch.bfloat16, torch.float32]
    assert lazy.stats.traces == 3


def test_reseeding_inside_the_function_runs_eagerly():
    def global_seed(x):
        torch.manual_seed(0)
        return x + torch.rand(3)

    def input_seed(x, gen):
        gen.manual_seed(5)
        return x + torch.rand(3, generator=gen)

    def seed_after(x):
        y = x + torch.rand(3)
        torch.manual_seed(7)
        return y

    x = torch.zeros(3)
    for fn, extra in ((global_seed, ()), (input_seed, (torch.Generator(),)), (seed_after, ())):
        lazy = lazytrace.trace_graph(fn)
        outs = []
        for _ in range(3):
            torch.manual_seed(1)
            outs.append((lazy(x, *extra), torch.rand(1)))
            torch.manual_seed(1)
            want = (fn(x, *extra), torch.rand(1))      # the RNG state after the call matters too
            assert all(torch.equal(a, b) for a, b in zip(outs[-1], want))
        assert lazy.stats.hits == 0 and "reseeded" in lazy.eager_signatures[0]


def test_draws_from_an_input_generator_replay_fresh():
    lazy = lazytrace.trace_graph(lambda x, gen: x + torch.rand(3, generator=gen))
    gen, ref = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    x = torch.zeros(3)
    for _ in range(3):
        assert torch.equal(lazy(x, gen), x + torch.rand(3, generator=ref))
    assert lazy.stats.hits == 2


def test_a_caught_framework_exception_makes_the_signature_eager():
    def chol(x):
        try:
            return torch.linalg.cholesky(x)
        except RuntimeError:
            return x * 0

    lazy = lazytrace.trace_graph(chol)
    lazy(-torch.eye(2))
    good = torch.eye(2) * 4
    assert torch.equal(lazy(good), chol(good))
    assert lazy.stats.hits == 0 and "raised during the trace" in lazy.eager_signatures[0]


def test_calls_that_returned_their_input_are_skipped_only_when_the_key_says_so():
    def fn(x):
        y = x.contiguous().to(torch.float32)
        y.requires_grad_()            # returns self too, but changes it: kept
        return y * 2

    lazy = lazytrace.trace_graph(fn)
    lazy(torch.rand(4, 3))            # y is x itself: x now requires grad
    assert [n.target.__name__ for n in lazy.graph_for(torch.rand(4, 3)).nodes] == ["requires_grad_", "mul"]
    t = torch.rand(3, 4).t()          # other strides: another signature, where contiguous copies
    out = lazy(t)
    assert out.is_contiguous() and torch.equal(out, fn(t.clone())) and not t.requires_grad
    assert "contiguous" in [n.target.__name__ for n in lazy.graph_for(torch.rand(3, 4).t()).nodes]
    y = torch.rand(4, 3)
    out = lazy(y)
    assert y.requires_grad and out.requires_grad and torch.equal(out, y * 2)


def test_compiled_graphs_match_eager_and_keep_autograd():
    import kornia

    lazy = lazytrace.trace_graph(kornia.color.rgb_to_hsv, return_backend_traced_fn=True)
    x = torch.rand(1, 3, 8, 8)
    lazy(x), lazy(x)
    assert lazy.graph_for(x).fn.choice in ("inductor", "python")
    for seed in range(2):
        y = torch.rand(1, 3, 8, 8, generator=torch.Generator().manual_seed(seed))
        assert torch.allclose(lazy(y), kornia.color.rgb_to_hsv(y), atol=1e-5)
    pair = lazytrace.trace_graph(lambda a: (a * 2, {"s": a.sum()}), return_backend_traced_fn=True)
    a = torch.rand(4)
    pair(a)
    out = pair(a)
    assert isinstance(out, tuple) and isinstance(out[1], dict) and torch.allclose(out[1]["s"], a.sum())
    w = torch.rand(4, requires_grad=True)                 # needs autograd: torch.compile instead
    grad_fn = lazytrace.trace_graph(lambda a: (a * w).sum(), return_backend_traced_fn=True)
    grad_fn(a)
    grad_fn(a).backward()
    assert torch.allclose(w.grad, a) and grad_fn.graph_for(a).fn.choice in ("torch.compile", "python")

    def writes_input(t):
        t.add_(1)
        return t * 2

    inplace = lazytrace.trace_graph(writes_input, return_backend_traced_fn=True)
    b = torch.zeros(3)
    inplace(b), inplace(b)
    assert torch.equal(b, torch.full((3,), 2.0))          # the write happened once per call
    assert inplace.graph_for(b).fn.choice == "torch.compile" and not inplace.graph_for(b).fn.repeatable


def test_read_back_after_a_random_draw_names_the_property_read():
    """The eager reason names the property (`shape`), not the descriptor machinery behind it."""
    def fn(x):
        kept = torch.nonzero(torch.rand(4) > 0.5)
        return x * kept.shape[0]

    lazy = lazytrace.trace_graph(fn)
    torch.manual_seed(0)
    expected = fn(torch.ones(2))
    torch.manual_seed(0)
    assert torch.equal(lazy(torch.ones(2)), expected)
    (reason,) = lazy.stats.reasons
    assert "TensorBase.shape" in reason and "random numbers" in reason


def test_guards_on_arrays_the_function_holds_run_before_its_random_draws():
    """kornia's augmentations read the dtype of tensors they hold after drawing their parameters:
    such a guard is checked at the start of the graph, so the signature still replays."""
    held = torch.ones(2)

    def fn(x):
        r = torch.rand(x.shape[0])
        return x * r * held.shape[0]

    lazy = lazytrace.trace_graph(fn)
    x = torch.rand(3)
    for seed in (0, 1, 2):
        torch.manual_seed(seed)
        expected = fn(x)
        torch.manual_seed(seed)
        assert torch.equal(lazy(x), expected)
    assert lazy.stats.hits == 2 and not lazy.stats.reasons
    held.resize_(4)                      # the guard fails before anything is drawn: traced again
    torch.manual_seed(3)
    expected = fn(x)
    torch.manual_seed(3)
    assert torch.equal(lazy(x), expected)
    assert lazy.stats.guard_failures == 1


def test_module_attributes_written_by_forward_are_replayed():
    import copy

    import kornia.augmentation as KA

    # kornia's augmentations store the sampled parameters on the module (transform_matrix): a graph
    # must set them on every call, not only on the call that traced
    for make in (lambda: KA.RandomAffine(degrees=30.0, p=1.0), lambda: KA.RandomHorizontalFlip(p=0.5),
                 lambda: KA.RandomRotation(degrees=45.0, p=1.0)):
        module = make()
        reference = copy.deepcopy(module)
        traced = lazytrace.trace_graph(module)
        x = torch.rand(2, 3, 16, 16)
        for seed in range(4):
            torch.manual_seed(seed)
            got = traced(x)
            torch.manual_seed(seed)
            want = reference(x)
            assert torch.equal(got, want)
            assert torch.equal(traced.transform_matrix, reference.transform_matrix)
        assert traced.forward.stats.hits == 3, traced.forward.explain()


def test_module_attributes_read_by_forward_are_guarded():
    import kornia.augmentation as KA

    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.factor, self.shift = 2.0, torch.zeros(1)

        def forward(self, x):
            return x * self.factor + self.shift

    module = lazytrace.trace_graph(Scale())
    x = torch.ones(3)
    assert module(x).tolist() == [2.0] * 3 and module(x).tolist() == [2.0] * 3
    module.factor = 5.0                       # a Python value: compared when the graph runs
    assert module(x).tolist() == [5.0] * 3
    module.shift = torch.ones(1)              # another tensor object: compared by identity
    assert module(x).tolist() == [6.0] * 3

    aug = lazytrace.trace_graph(KA.RandomAffine(degrees=30.0, p=1.0))
    aug(x.new_ones(1, 3, 8, 8)), aug(x.new_ones(1, 3, 8, 8))
    aug.p = 0.0                               # never apply: the input comes back
    img = torch.rand(1, 3, 8, 8)
    assert torch.equal(aug(img), img)


def test_objects_read_from_a_module_are_recorded_too():
    class Config:
        def __init__(self):
            self.scale, self.offsets = 2.0, {"a": 1.0}

    class Apply(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = Config()

        def forward(self, x):
            return x * self.config.scale + self.config.offsets["a"]

    module = lazytrace.trace_graph(Apply())
    x = torch.ones(2)
    assert module(x).tolist() == [3.0, 3.0] and module(x).tolist() == [3.0, 3.0]
    module.config.scale = 4.0               # same Config object, new value inside: checked
    assert module(x).tolist() == [5.0, 5.0]
    module.config.offsets["a"] = 0.5        # same dict, new content: compared by value
    assert module(x).tolist() == [4.5, 4.5]
    assert type(module.config) is Config    # the recording class was put back


def test_arrays_in_a_module_dict_are_read_live_and_rebinding_is_noticed():
    import kornia.augmentation as KA
    from kornia.enhance import normalize

    norm = KA.Normalize(mean=torch.tensor([0.5, 0.5, 0.5]), std=torch.tensor([0.2, 0.2, 0.2]))
    traced = lazytrace.trace_graph(norm)
    img = torch.rand(1, 3, 8, 8)
    traced(img), traced(img)
    assert traced.forward.stats.hits == 1
    norm.flags["mean"] = torch.tensor([0.1, 0.2, 0.3])       # another tensor in the same dict
    assert torch.equal(traced(img), normalize(img, norm.flags["mean"], norm.flags["std"]))
    norm.flags["std"].fill_(0.5)                              # the same tensor, written in place
    assert torch.equal(traced(img), normalize(img, norm.flags["mean"], norm.flags["std"]))


def test_work_handed_to_another_thread_is_not_baked():
    # torch calls made by another thread (a thread pool inside the function) do not reach the tracing
    # thread's TorchFunctionMode: their result, a tensor nothing reached, makes the signature eager
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        def threaded(x):
            return pool.submit(lambda: x * 2).result() + 1

        def handed_back(x):
            return x + 1, pool.submit(torch.sin, x).result()

        lazy, back = lazytrace.trace_graph(threaded), lazytrace.trace_graph(handed_back)
        for _ in range(3):
            x = torch.rand(3)
            assert torch.equal(lazy(x), x * 2 + 1)
            plus, sin = back(x)
            assert torch.equal(plus, x + 1) and torch.equal(sin, torch.sin(x))
    for traced in (lazy, back):
        assert traced.stats.hits == 0 and traced.stats.traces == 1
        assert any("made by a call lazytrace does not see" in reason for reason in traced.stats.reasons)


def test_tensor_type_with_a_dtype_is_a_recorded_conversion():
    """`x.type()` reads the type name (metadata), `x.type(torch.float64)` converts: the callable
    was classified once by its name as metadata, so the conversion was not recorded and its
    result was baked as a constant (the trace's values at every call)."""
    def converted(x):
        return x.type(torch.float64) * 2, x.type(), x.type(dtype=torch.float16)

    lazy = lazytrace.trace_graph(converted)
    for _ in range(3):
        x = torch.rand(3)
        doubled, name, half = lazy(x)
        assert torch.equal(doubled, x.double() * 2) and name == "torch.FloatTensor" and torch.equal(half, x.half())
    assert lazy.stats.hits == 2


def _relu_plus_sin(x):
    return torch.nn.functional.relu(x) + torch.sin(x)


@pytest.mark.parametrize("replaced", ["torch.nn.functional.relu", "torch.sin"])
def test_a_framework_function_replaced_after_the_trace_is_called_as_eager_calls_it(replaced, monkeypatch):
    """A graph calls the functions it recorded; eager calls what the module holds now: a function
    monkeypatched after the trace (`torch.sin = my_sin`) makes the graph's first check fail, and
    the signature traces again with the new one; putting the old one back hits the first graph."""
    lazy = lazytrace.trace_graph(_relu_plus_sin)
    for _ in range(2):
        x = torch.randn(5)
        assert torch.equal(lazy(x), _relu_plus_sin(x))
    module_name, _, name = replaced.rpartition(".")
    module = sys.modules[module_name]
    original = getattr(module, name)
    once = lazytrace.trace_graph(_relu_plus_sin)
    once(torch.randn(5))            # traced, not replayed yet: its code is generated after the patch
    with monkeypatch.context() as patch:
        patch.setattr(module, name, lambda t, *args, **kwargs: t * 0 + 100)
        for _ in range(3):
            x = torch.randn(5)
            assert torch.equal(lazy(x), _relu_plus_sin(x)) and torch.equal(once(x), _relu_plus_sin(x))
        assert lazy.stats.traces == 2
        # (the line names the functions checked in that module: F.relu is lowered to torch.relu)
        assert any("code the traced function read was replaced: " in line and replaced in line.split(": ")[-1].split(", ")
                   for line in lazy.explain().splitlines())
    assert getattr(module, name) is original
    x = torch.randn(5)
    assert torch.equal(lazy(x), _relu_plus_sin(x))
    assert lazy.stats.traces == 2 and lazy.stats.hits == 4


from torch import cos as _imported_cos     # noqa: E402  (what `from torch import cos` binds, read by the function)


def _public_aliases(x):
    return torch.special.expm1(x) + torch.linalg.vector_norm(x) + _imported_cos(x)


@pytest.mark.parametrize("replaced", [f"{__name__}._imported_cos", "torch.special.expm1", "torch.linalg.vector_norm"])
def test_a_function_replaced_where_the_code_found_it_is_seen(replaced, monkeypatch):
    """torch.special.expm1 is torch._C._special.special_expm1 and `from torch import cos` binds the
    function in the user's module: replacing it there (not where its __module__ says) is seen too
    (Backend.other_homes, plan.code_globals): the graph replayed the trace's function."""
    lazy = lazytrace.trace_graph(_public_aliases)
    for _ in range(2):
        x = torch.randn(5)
        assert torch.equal(lazy(x), _public_aliases(x))
    module_name, _, name = replaced.rpartition(".")
    with monkeypatch.context() as patch:
        patch.setattr(sys.modules[module_name], name, lambda t, *args, **kwargs: t * 0 + 100)
        for _ in range(3):
            x = torch.randn(5)
            assert torch.equal(lazy(x), _public_aliases(x))
        assert lazy.stats.traces == 2
        # (the line names the functions checked in that module: F.relu is lowered to torch.relu)
        assert any("code the traced function read was replaced: " in line and replaced in line.split(": ")[-1].split(", ")
                   for line in lazy.explain().splitlines())
    x = torch.randn(5)
    assert torch.equal(lazy(x), _public_aliases(x))
    assert lazy.stats.traces == 2 and lazy.stats.hits == 4


def _denormal_scaled(x):
    return x * torch.exp(torch.full((3,), -100.0))     # a folded constant: 3.7e-44, a denormal float32


def test_flush_denormal_is_part_of_the_key():
    """torch.set_flush_denormal(True) (no getter: read through the CPU flags Python's floats obey)
    makes a constant folded at the trace differ from what eager computes now: keyed."""
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU has no flush-denormal mode")
    lazy = lazytrace.trace_graph(_denormal_scaled)
    try:
        for flush in (True, True, False, False, True):
            torch.set_flush_denormal(flush)
            x = torch.rand(3) + 1
            expected = _denormal_scaled(x)
            assert bool(expected.ne(0).all()) is not flush      # the two modes tell apart here
            assert torch.equal(lazy(x), expected)
    finally:
        torch.set_flush_denormal(False)
    assert lazy.stats.traces == 2 and lazy.stats.hits == 3
    assert "torch.set_flush_denormal" in lazy.explain()

    def switching(x):       # set inside: no call shows it, a graph could not replay it
        torch.set_flush_denormal(True)
        try:
            return _denormal_scaled(x)
        finally:
            torch.set_flush_denormal(False)

    lazy = lazytrace.trace_graph(switching)
    for _ in range(3):
        x = torch.rand(3) + 1
        assert torch.equal(lazy(x), switching(x))
    assert lazy.stats.hits == 0 and any("set_flush_denormal" in r for r in lazy.stats.reasons)


def _by_deterministic(x):
    return x * (2 if torch.are_deterministic_algorithms_enabled() else 3)


def _by_mkldnn(x):        # kornia's ssim chooses its path so
    return x * (2 if torch.backends.mkldnn.enabled else 3)


def _by_threads(x):
    return x * torch.get_num_threads()


def _by_imported_reader(x):
    from torch import is_anomaly_enabled
    return x * (2 if is_anomaly_enabled() else 3)


@contextlib.contextmanager
def _deterministic():
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)


@contextlib.contextmanager
def _one_more_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(before + 1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class _Backends:
    def use_mkldnn(self):           # no framework call: no stack at a call shows this method
        return torch.backends.mkldnn.enabled


_BACKENDS = _Backends()


def _by_a_method_of_a_global_object(x):
    return x + 1 if _BACKENDS.use_mkldnn() else x - 1


def _by_a_literal_getattr(x):
    return x + 1 if getattr(torch.backends.mkldnn, "enabled") else x - 1


@pytest.mark.parametrize("fn, switched", [
    (_by_deterministic, _deterministic), (_by_mkldnn, lambda: torch.backends.mkldnn.flags(enabled=False)),
    (_by_threads, _one_more_thread), (_by_imported_reader, lambda: torch.autograd.set_detect_anomaly(True)),
    (_by_a_method_of_a_global_object, lambda: torch.backends.mkldnn.flags(enabled=False)),
    (_by_a_literal_getattr, lambda: torch.backends.mkldnn.flags(enabled=False))])
def test_framework_state_read_in_python_is_checked(fn, switched):
    # no call shows these reads to a TorchFunctionMode: the trace's branch was replayed
    lazy = lazytrace.trace_graph(fn)
    for _ in range(2):
        x = torch.rand(3)
        assert torch.equal(lazy(x), fn(x))
        with switched():
            assert torch.equal(lazy(x), fn(x))
    assert lazy.stats.traces == 2 and lazy.stats.hits == 2


def test_a_function_setting_the_framework_state_it_reads_runs_eagerly():
    def toggles(x):
        before = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(not before)
        return x * (2 if before else 3)

    lazy = lazytrace.trace_graph(toggles)
    try:
        for _ in range(4):
            x = torch.rand(3)
            expected = x * (2 if torch.are_deterministic_algorithms_enabled() else 3)
            assert torch.equal(lazy(x), expected)
    finally:
        torch.use_deterministic_algorithms(False)
    assert lazy.stats.hits == 0


class _Scaled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 10 * x


def test_a_custom_autograd_function_keeps_its_backward():
    # its forward runs with grad mode off, which no call shows: the graph replayed the forward's calls
    # under autograd, and backward differentiated them (2 * x instead of the Function's 10 * x)
    def fn(x):
        return _Scaled.apply(x * 2) + 1

    lazy = lazytrace.trace_graph(fn)
    for _ in range(3):
        x = torch.rand(3, requires_grad=True)
        lazy(x).sum().backward()
        assert torch.equal(x.grad, 10 * (x.detach() * 2) * 2)
    assert lazy.stats.hits == 0 and any("autograd.Function" in reason for reason in lazy.stats.reasons)
    with torch.no_grad():       # no grad mode switch to see: traced and replayed
        for _ in range(3):
            x = torch.rand(3)
            assert torch.equal(lazy(x), (x * 2) ** 2 + 1)
    assert lazy.stats.hits == 2


def test_a_constant_set_as_an_inputs_grad_is_a_new_tensor_at_every_call():
    # `x.grad = torch.ones(3)` handed the graph's one cached constant to every caller: backward
    # accumulated into it, so later calls started from the earlier calls' sums
    def fn(x):
        x.grad = torch.ones(3)
        return x * 2

    lazy = lazytrace.trace_graph(fn)
    for _ in range(3):
        x = torch.rand(3, requires_grad=True)
        lazy(x).sum().backward()
        assert torch.equal(x.grad, torch.full((3,), 3.0))
    assert lazy.stats.hits == 2


def _seed_of(g):
    return g.initial_seed()


@pytest.mark.parametrize("read", [lambda g: g.initial_seed(), lambda g: _seed_of(g),
                                  lambda g: int(g.get_state()[:8].sum())],
                         ids=["initial_seed", "through_a_helper", "get_state"])
def test_values_a_passed_generator_gives_in_python_are_not_baked(read):
    """A torch.Generator passed in is handed to the function as itself (torch's argument parsing
    takes no proxy), so its methods that draw nothing reach no function mode: code naming them
    runs eagerly, with the reason."""
    def fn(x, g):
        return x + read(g)

    lazy = lazytrace.trace_graph(fn)
    for seed in range(3):
        x = torch.rand(3)
        assert torch.equal(lazy(x, torch.Generator().manual_seed(seed)), fn(x, torch.Generator().manual_seed(seed)))
    assert lazy.stats.hits == 0 and lazy.stats.eager == 3
    assert any("RNG generator is passed in" in reason for reason in lazy.stats.reasons)


class _SeedReader:
    def read(self, g):
        return g.initial_seed()


def test_a_passed_generator_read_by_a_method_of_another_object_is_not_baked():
    # the method makes no framework call, so no stack the trace sees shows it: the methods of the
    # objects the function reaches are looked through too
    reader = _SeedReader()

    def fn(x, g):
        return x + reader.read(g)

    lazy = lazytrace.trace_graph(fn)
    for seed in range(3):
        x = torch.rand(3)
        assert torch.equal(lazy(x, torch.Generator().manual_seed(seed)), fn(x, torch.Generator().manual_seed(seed)))


def test_a_passed_generator_only_drawn_from_still_gives_a_graph():
    def fn(x, g):
        return x + torch.rand(3, generator=g)

    lazy = lazytrace.trace_graph(fn)
    for seed in range(3):
        x = torch.rand(3)
        assert torch.equal(lazy(x, torch.Generator().manual_seed(seed)), fn(x, torch.Generator().manual_seed(seed)))
    assert lazy.stats.hits == 2 and lazy.stats.eager == 0


def test_a_module_hit_takes_the_fast_path_and_still_sees_every_change_of_the_module():
    """A traced module's hit checks its parameters, buffers, submodules, modes and hooks in its
    compiled fast path (no general key): each change below must reach the next call."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Dropout(0.5))
    model.eval()
    lazytrace.trace_graph(model)
    lazy = vars(model)["forward"]
    x = torch.randn(8, 4)
    model(x), model(x)
    assert lazy._fast is not None and "extra_key" in lazy._fast[0].source

    def check(**tolerance):
        eager = torch.nn.Sequential.forward(model, x)
        out = model(x)
        assert out.shape == eager.shape and torch.allclose(out, eager, **tolerance)

    check()
    model[0].weight = torch.nn.Parameter(torch.randn(3, 4))          # another parameter object
    check()
    model[0] = torch.nn.Linear(4, 3)                                 # a submodule replaced
    check()
    model[1].running_mean.add_(1.0)                                  # a buffer updated in place
    check()
    model[0].weight.requires_grad_(False)                           # requires_grad of a parameter
    check()
    out = model(x)
    assert not model[0].weight.requires_grad and out.requires_grad   # (the bias still requires it)
    handle = model[0].register_forward_hook(lambda m, args, result: result * 10.0)   # a hook
    check()
    handle.remove()
    check()
    model[0] = torch.nn.Linear(4, 5)                                 # another shape: another signature
    model[1] = torch.nn.BatchNorm1d(5).eval()
    check()
    model.train()                                                    # the mode
    assert any(not torch.equal(model(x), model(x)) for _ in range(4))


def test_the_live_inputs_of_a_module_are_what_its_own_methods_walk():
    """ModuleLiveInputs walks modules, parameters and buffers without torch's generators: the
    same ones, in the same order (shared submodules and tied parameters once), and a module
    class with its own named_parameters is walked by it."""
    from lazytrace.backends.torch import ModuleLiveInputs, _named_modules, _named_tensors

    shared = torch.nn.Linear(2, 2)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Sequential(torch.nn.Linear(3, 3), shared, torch.nn.BatchNorm1d(3))
            self.b = shared
            self.c = None
            self.p = torch.nn.Parameter(torch.ones(2))
            self.tied = self.p
            self.register_buffer("z", torch.ones(1))
            self.d = torch.nn.ModuleDict({"x": torch.nn.Conv2d(1, 1, 1), "y": self.a})

    class Hiding(torch.nn.Linear):
        def named_parameters(self, *args, **kwargs):       # hides its bias
            return ((n, p) for n, p in super().named_parameters(*args, **kwargs) if n != "bias")

    for module in (Net(), Hiding(2, 2), torch.nn.Sequential(Hiding(2, 2), torch.nn.ReLU())):
        _, tensors = ModuleLiveInputs(module)()
        expected = tuple(module.parameters()) + tuple(module.buffers())
        assert len(tensors) == len(expected) and all(a is b for a, b in zip(tensors, expected))
        named, walked = _named_modules(module)
        assert [(n, id(m)) for n, m in named] == [(n, id(m)) for n, m in module.named_modules()]
        pairs = _named_tensors(module, named, walked)
        reference = [*module.named_parameters(), *module.named_buffers()]
        assert [(n, id(t)) for n, t in pairs] == [(n, id(t)) for n, t in reference]


def _scaled_by_version(x):
    return x.sum() + x._version             # an input's version counter: what the caller did to it before


def _version_of_a_made_tensor(x):
    y = x * 2
    y.add_(1)
    return y * y._version                   # the graph's own write: 1 at every call


def test_the_version_counter_of_an_input_is_guarded_and_of_a_made_tensor_fixed():
    """`_version` is in no key: read from an input it is checked at every replay (was baked: a
    tensor written once before the call got the trace's count); read from a tensor the function
    made, the graph's own writes fix it and the graph replays without a guard."""
    lazy = lazytrace.trace_graph(_scaled_by_version)
    for writes in (0, 0, 2, 2, 1):
        x = torch.rand(3)
        for _ in range(writes):
            x.add_(0)
        assert torch.equal(lazy(x), _scaled_by_version(x))
    assert lazy.stats.hits == 2 and lazy.stats.traces == 3
    made = lazytrace.trace_graph(_version_of_a_made_tensor)
    for seed in range(3):
        x = torch.rand(3, generator=torch.Generator().manual_seed(seed))
        assert torch.equal(made(x), _version_of_a_made_tensor(x))
    assert made.stats.hits == 2 and made.stats.guard_failures == 0


def test_a_trace_lets_go_of_the_arrays_it_saw_when_it_ends():
    """The intermediate arrays of a traced call are freed when the call returns, not when the
    cyclic garbage collector next finds the trace's session, which lives on in reference cycles
    (a 1x3x512x512 kornia call's ~100 intermediates of 3 MB stayed alive with it)."""
    import gc

    def chain(x):
        return ((x * 2 + 1) * 3).sum()

    def alive():
        return sum(1 for o in gc.get_objects() if type(o) is torch.Tensor and o.shape == (123, 457))

    x = torch.rand(123, 457)
    gc.collect()
    gc.disable()
    try:
        before = alive()
        lazy = lazytrace.trace_graph(chain)
        assert torch.equal(lazy(x), chain(x))
        assert alive() == before and lazy.stats.traces == 1
    finally:
        gc.enable()

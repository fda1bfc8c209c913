"""What a replay must reproduce, found by red-teaming the core: aliasing and in-place effects
(results that are cached constants, the same array passed twice, writes a TorchFunctionMode cannot
see), tensor flags the key must hold, and state no call shows (torch.func, np.errstate, hooks)."""
import numpy as np
import pytest
import torch

import lazytrace


def _ones_and_double(x):
    return torch.ones(3), x * 2


@pytest.mark.parametrize("xp", ["torch", "numpy"])
def test_writing_into_a_returned_constant_does_not_change_later_calls(xp):
    def fn(x):
        if xp == "torch":
            return torch.ones(3), x * 2
        return np.ones(3) + 0, x * 2     # np.ones is not seen: `+ 0` is folded into a constant

    lazy = lazytrace.trace_graph(fn)
    make = (lambda: torch.rand(3)) if xp == "torch" else (lambda: np.random.rand(3))
    for _ in range(3):                  # the first call (trace) too
        ones, _ = lazy(make())
        assert (ones == 1).all()
        ones += 10                      # the caller writes into what it got
    assert lazy.stats.hits == 2


def test_a_constant_returned_twice_is_one_array_as_in_eager():
    def fn(x):
        c = torch.arange(3.0)
        return c, c, x + c

    lazy = lazytrace.trace_graph(fn)
    for _ in range(3):
        a, b, _ = lazy(torch.rand(3))
        assert a is b
        a += 1                          # seen through b, as in eager
        assert torch.equal(b, torch.arange(3.0) + 1)
    assert lazy.stats.hits == 2
    a, b, _ = lazy(torch.rand(3))
    assert torch.equal(a, torch.arange(3.0))


def test_a_returned_view_of_a_constant_keeps_eager_strides():
    def fn(x):
        return torch.arange(6.0).reshape(2, 3)[:, 1:], x + 1

    lazy = lazytrace.trace_graph(fn)
    expected = fn(torch.rand(3))[0]
    for _ in range(3):
        got = lazy(torch.rand(3))[0]
        assert got.stride() == expected.stride() and torch.equal(got, expected)
    assert lazy.stats.hits == 2


def _write_first_read_second(x, y):
    x.add_(1)
    return y * 2


def test_the_same_tensor_passed_twice_is_keyed_apart_from_two_tensors():
    lazy = lazytrace.trace_graph(_write_first_read_second)
    t = torch.rand(3)
    a, b = t.clone(), t.clone()
    out = lazy(a, a)                                     # traced with x is y: y sees the write
    assert torch.equal(out, (t + 1) * 2)
    for _ in range(2):
        x, y = torch.rand(3), torch.rand(3)
        xe, ye = x.clone(), y.clone()
        expected = _write_first_read_second(xe, ye)
        assert torch.equal(lazy(x, y), expected) and torch.equal(x, xe) and torch.equal(y, ye)
    a = torch.rand(3)
    ae = a.clone()
    assert torch.equal(lazy(a, a), _write_first_read_second(ae, ae)) and torch.equal(a, ae)
    assert lazy.stats.traces == 2 and lazy.stats.hits == 2
    assert "(the same object as args[0])" in lazy.explain()


def test_a_set_that_no_call_shows_makes_the_signature_eager():
    def fn(x, y):
        x.set_(y)               # Tensor.set_ does not reach a TorchFunctionMode
        return x + 1

    lazy = lazytrace.trace_graph(fn)
    for _ in range(3):
        x, y = torch.rand(3), torch.rand(4)
        xe = x.clone()
        expected = fn(xe, y)
        assert torch.equal(lazy(x, y), expected) and torch.equal(x, xe)
    assert lazy.stats.hits == 0
    assert any("does not see" in reason for reason in lazy.stats.reasons)


def test_requires_grad_set_on_an_input_is_replayed():
    def fn(x):
        x.requires_grad_()
        return torch.zeros(2) + 1

    lazy = lazytrace.trace_graph(fn)
    for _ in range(3):
        x = torch.rand(3)
        lazy(x)
        assert x.requires_grad
    assert lazy.stats.hits == 2


def test_a_leaf_requiring_grad_made_inside_is_made_at_every_call():
    def fn(x):
        w = torch.ones(3, requires_grad=True)
        return x * w, w

    lazy = lazytrace.trace_graph(fn)
    seen = []
    for _ in range(3):
        x = torch.rand(3)
        out, w = lazy(x)
        out.sum().backward()
        assert torch.equal(w.grad, x) and w.requires_grad and w.is_leaf
        seen.append(w)
    assert seen[0] is not seen[1] is not seen[2]
    assert lazy.stats.hits == 2


GLOBAL_TABLE = np.arange(3.0)


def _table_and_double(x):
    return GLOBAL_TABLE, x * 2


def test_a_global_array_returned_is_the_global_itself():
    lazy = lazytrace.trace_graph(_table_and_double)
    for _ in range(3):
        assert lazy(np.random.rand(3))[0] is GLOBAL_TABLE
    assert lazy.stats.hits == 2


# ---- what the key must hold, found by red-teaming --------------------------------------------------


def test_is_leaf_of_an_input_is_part_of_the_key():
    def fn(x):
        return x * 2 if x.is_leaf else x * 3

    lazy = lazytrace.trace_graph(fn)
    calls = [torch.rand(3, requires_grad=True), torch.rand(3, requires_grad=True) * 1,
             torch.rand(3, requires_grad=True) * 1, torch.rand(3, requires_grad=True)]
    for x in calls:
        assert torch.equal(lazy(x), fn(x))
    assert lazy.stats.traces == 2 and lazy.stats.hits == 2


@pytest.mark.parametrize("case", ["is_view", "is_inference", "retains_grad"])
def test_tensor_flags_outside_the_key_are_guarded(case):
    def fn(x):
        flag = {"is_view": x._is_view, "is_inference": x.is_inference,
                "retains_grad": lambda: x.retains_grad}[case]()
        return x * 2 if flag else x * 3

    def plain():
        return torch.rand(3, requires_grad=case == "retains_grad") * 1

    def flagged():
        if case == "is_view":
            return torch.rand(2, 3)[0]
        if case == "is_inference":
            with torch.inference_mode():
                return torch.rand(3)
        t = torch.rand(3, requires_grad=True) * 1
        t.retain_grad()
        return t

    lazy = lazytrace.trace_graph(fn)
    for make in (plain, flagged, plain, flagged):
        x = make()
        assert torch.equal(lazy(x), fn(x))


@pytest.mark.parametrize("xp", ["torch", "numpy"])
def test_numpy_scalar_arguments_minus_zero_and_zero_are_keyed_apart(xp):
    def fn(x, s):
        return x / s

    lazy = lazytrace.trace_graph(fn)
    x = torch.ones(3) if xp == "torch" else np.ones(3)
    for s in (np.float32(0.0), np.float32(-0.0), np.float64(-0.0), np.float64(0.0)):
        got, expected = lazy(x, s), fn(x, s)
        assert (got == expected).all()
    assert lazy.stats.traces == 4


@pytest.mark.parametrize("where", ["inputs", "calls"])
def test_inference_mode_and_inference_tensors_are_traced(where):
    def fn(x):
        y = x * 2
        y[0] = 5.0                      # a write into an inference tensor: no version counter
        c = torch.zeros(3)
        c.copy_(y)                      # written by input data: not folded
        return torch.nn.functional.relu(c, inplace=True) + 1

    lazy = lazytrace.trace_graph(fn)
    for _ in range(3):
        with torch.inference_mode():
            x = torch.randn(3)
            if where == "calls":
                out = lazy(x)
        if where == "inputs":
            out = lazy(x)
        assert torch.equal(out, fn(x))
    assert lazy.stats.hits == 2


@pytest.mark.parametrize("where", ["positional", "keyword-only"])
def test_a_default_value_changed_in_place_is_seen(where):
    if where == "positional":
        def fn(x, scale=[2.0], table={"shift": 1.0}):
            return x * scale[0] + table["shift"]
    else:
        def fn(x, *, scale=[2.0], table={"shift": 1.0}):
            return x * scale[0] + table["shift"]

    lazy = lazytrace.trace_graph(fn)
    x = torch.rand(3)
    lazy(x)
    lazy(x)
    defaults = fn.__defaults__ or tuple(fn.__kwdefaults__.values())
    defaults[0][0] = 5.0
    assert torch.equal(lazy(x), fn(x))
    defaults[1]["shift"] = -1.0
    assert torch.equal(lazy(x), fn(x))
    assert lazy.stats.traces == 3 and lazy.stats.hits == 1
    assert "default value" in lazy.explain()


def test_literal_defaults_add_no_check():
    def fn(x, scale=2.0, mode="a", size=(3, 3)):
        return x * scale

    lazy = lazytrace.trace_graph(fn)
    lazy(torch.rand(3))
    assert "default" not in lazy.graphs[0].source


# ---- state and computation no call shows -----------------------------------------------------------


@pytest.mark.parametrize("number", [2 ** 60 + 2 ** 36 + 1, -(2 ** 62 + 2 ** 38 + 1), 16777217, 3])
def test_large_int_operands_round_as_in_eager(number):
    def fn(x, n):
        return x + n, x * n, x < n

    lazy = lazytrace.trace_graph(fn)
    x = torch.tensor([1.0, 2.0 ** 40, -3.0])
    for _ in range(3):
        for got, expected in zip(lazy(x, number), fn(x, number)):
            assert torch.equal(got, expected)
    assert lazy.stats.hits == 2


def test_a_torch_func_transform_inside_runs_eagerly():
    def fn(x):
        return torch.func.grad(lambda t: (t ** 2 * x.sum()).sum())(x)

    lazy = lazytrace.trace_graph(fn)
    for _ in range(3):
        x = torch.randn(3)
        assert torch.equal(lazy(x), fn(x))
    assert lazy.stats.hits == 0
    assert any("torch.func" in reason for reason in lazy.stats.reasons)


def test_torch_func_grad_of_a_lazy_graph():
    def fn(t):
        return (t.sin() * torch.arange(3.0)).sum()

    lazy = lazytrace.trace_graph(fn)
    for _ in range(3):
        x = torch.randn(3)
        assert torch.equal(torch.func.grad(lazy)(x), torch.func.grad(fn)(x))
    assert lazy.stats.hits == 2


def _doubled_unless_transformed(x):
    # kornia's morphology and ssim choose their path this way
    return x * (3 if torch._C._are_functorch_transforms_active() else 2)


def test_vmap_of_a_lazy_graph_after_a_plain_call_of_the_per_sample_shape():
    # vmap hands per-sample tensors of the plain call's shape: the key matched and the plain graph replayed
    lazy = lazytrace.trace_graph(_doubled_unless_transformed)
    lazy(torch.randn(3))
    for _ in range(3):
        x = torch.randn(4, 3)
        assert torch.equal(torch.func.vmap(lazy)(x), x * 3)
        y = torch.randn(3)
        assert torch.equal(lazy(y), y * 2)
    assert lazy.stats.traces == 2 and lazy.stats.hits == 5


def _tangent_kept_only_when_dual(x):
    if torch.autograd.forward_ad.unpack_dual(x).tangent is None:
        return x.detach() * 2
    return x * 2


def test_forward_ad_tangents_are_part_of_the_key():
    # a dual tensor was keyed as a plain one: the plain call's graph replayed, dropping the tangent
    import torch.autograd.forward_ad as fwad
    lazy = lazytrace.trace_graph(_tangent_kept_only_when_dual)
    for _ in range(3):
        x, tangent = torch.randn(3), torch.randn(3)
        assert torch.equal(lazy(x), x * 2)
        with fwad.dual_level():
            out = fwad.unpack_dual(lazy(fwad.make_dual(x, tangent)))
            assert torch.equal(out.primal, x * 2) and torch.equal(out.tangent, tangent * 2)
            # a plain tensor inside the dual level is its own signature again
            assert fwad.unpack_dual(lazy(x)).tangent is None
    assert lazy.stats.traces == 3 and lazy.stats.hits == 6


def test_a_hook_registered_inside_is_registered_once_per_call():
    seen = []

    def fn(x):
        x.register_hook(lambda g: seen.append(1) or g * 2)
        return (x * 3).sum()

    lazy = lazytrace.trace_graph(fn)
    for _ in range(3):
        x = torch.randn(3, requires_grad=True)
        seen.clear()
        lazy(x).backward()
        assert len(seen) == 1 and torch.equal(x.grad, torch.full((3,), 6.0))


def test_np_errstate_inside_the_function_is_kept():
    def fn(x, y):
        with np.errstate(divide="raise"):
            return x / y

    lazy = lazytrace.trace_graph(fn)
    assert np.array_equal(lazy(np.ones(3), np.full(3, 2.0)), np.full(3, 0.5))
    with pytest.raises(FloatingPointError):
        lazy(np.ones(3), np.zeros(3))
    assert np.array_equal(lazy(np.ones(3), np.full(3, 4.0)), np.full(3, 0.25))


# ---- models ---------------------------------------------------------------------------------------

MODELS = {}


def _through_global_dict(x):
    return MODELS["net"](x)


def test_a_model_held_in_a_global_dict_is_recorded():
    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.5))
    MODELS["net"] = net
    lazy = lazytrace.trace_graph(_through_global_dict)
    x = torch.rand(2, 3)
    net.eval()
    assert torch.equal(lazy(x), net(x))
    net.train()             # dropout active again: eager output changes with the RNG
    torch.manual_seed(0)
    got = lazy(x)
    torch.manual_seed(0)
    assert torch.equal(got, net(x))
    assert not torch.equal(got, net.eval()(x))


@pytest.mark.parametrize("reached", ["bound", "global"])
def test_a_hook_added_to_a_submodule_after_the_trace_is_seen(reached):
    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())
    MODELS["net"] = net
    call = lazytrace.trace_graph(net) if reached == "bound" else lazytrace.trace_graph(_through_global_dict)
    x = torch.rand(2, 3)
    call(x)
    call(x)
    handle = net[0].register_forward_hook(lambda module, args, out: out * 2)
    assert torch.equal(call(x), torch.relu(net[0](x)))          # net[0](x) runs the hook: doubled
    handle.remove()
    assert torch.equal(call(x), net(x))


# ---- stateful objects ---------------------------------------------------------------------------


class _Holder:
    pass


def test_an_attribute_set_to_a_constant_is_a_new_array_at_every_call():
    def fn(x, holder):
        holder.kernel = torch.ones(3)
        return x * 2

    lazy = lazytrace.trace_graph(fn, arg_stateful_idxs=[1])
    holder = _Holder()
    for _ in range(3):
        lazy(torch.rand(3), holder)
        assert torch.equal(holder.kernel, torch.ones(3))
        holder.kernel.add_(5)           # the caller writes into what it finds
    assert lazy.stats.hits == 2


def test_an_attribute_set_before_a_call_that_raises_is_set_as_in_eager():
    def fn(x, y, holder):
        holder.total = x.sum()
        return torch.linalg.cholesky(y)

    lazy = lazytrace.trace_graph(fn, arg_stateful_idxs=[2])
    for _ in range(2):
        lazy(torch.rand(3), torch.eye(2), _Holder())
    holder, x = _Holder(), torch.rand(3)
    with pytest.raises(torch.linalg.LinAlgError):
        lazy(x, -torch.eye(2), holder)
    assert torch.equal(holder.total, x.sum())


# ---- values read back from arrays ---------------------------------------------------------------


@pytest.mark.parametrize("xp", ["torch", "numpy"])
def test_a_read_back_minus_zero_is_told_from_zero(xp):
    def fn(x):
        return x * 0 + float(x[0])

    lazy = lazytrace.trace_graph(fn)
    make = torch.tensor if xp == "torch" else np.array
    for first in (0.0, -0.0, -0.0, 0.0):
        x = make([first, 1.0])
        got, expected = lazy(x), fn(x)
        assert (np.signbit(np.asarray(got)) == np.signbit(np.asarray(expected))).all()
    assert lazy.stats.traces == 2 and lazy.stats.hits == 2


def test_a_read_back_nan_is_replayed():
    def fn(x):
        return x + (1.0 if float(x.max()) != float(x.max()) else 2.0)

    lazy = lazytrace.trace_graph(fn)
    for _ in range(3):
        x = torch.tensor([float("nan"), 1.0])
        assert torch.equal(lazy(x).nan_to_num(), fn(x).nan_to_num())
    assert lazy.stats.traces == 1 and lazy.stats.hits == 2


SIGNED = 0.0


def _times_signed(x):
    return x * SIGNED


def test_a_global_changed_from_zero_to_minus_zero_is_seen():
    global SIGNED
    lazy = lazytrace.trace_graph(_times_signed)
    x = torch.ones(2)
    lazy(x)
    lazy(x)
    SIGNED = -0.0
    try:
        assert torch.signbit(lazy(x)).all()
    finally:
        SIGNED = 0.0
    assert not torch.signbit(lazy(x)).any()


def test_a_tensor_without_strides_runs_eagerly_instead_of_raising():
    def fn(x):
        return x * 2

    lazy = lazytrace.trace_graph(fn)
    x = torch.eye(3).to_sparse_csr()
    assert torch.equal(lazy(x).to_dense(), fn(x).to_dense())
    assert any("cannot be described" in reason for reason in lazy.stats.reasons)


def test_complex_arguments_with_signed_zero_parts_are_keyed_and_replayed_exactly():
    def fn(x, c):
        return torch.view_as_real(x * c)

    lazy = lazytrace.trace_graph(fn)
    x = torch.tensor([1 + 1j], dtype=torch.complex128)
    for c in (0j, complex(-0.0, -0.0), complex(-0.0, -0.0), 0j, complex(-0.0, -0.0)):
        assert torch.equal(torch.signbit(lazy(x, c)), torch.signbit(fn(x, c)))
    assert lazy.stats.traces == 2 and lazy.stats.hits == 3


@pytest.mark.parametrize("make", [lambda: np.matrix([[1.0, 2.0], [3.0, 4.0]]),
                                  lambda: np.ma.masked_array([[1.0, 2.0], [3.0, 4.0]], mask=[[0, 1], [0, 0]])],
                         ids=["matrix", "masked"])
def test_ndarray_subclasses_keep_their_own_operators(make):
    def fn(a):
        return (a * a).sum()

    lazy = lazytrace.trace_graph(fn)
    for _ in range(3):
        assert lazy(make()) == fn(make())
    assert lazy.stats.hits == 0


GLOBAL_GENERATOR = torch.Generator().manual_seed(1)


def _draw_from_global_generator(x):
    return x + torch.rand(3, generator=GLOBAL_GENERATOR)


def test_a_generator_made_inside_runs_eagerly_and_a_global_one_is_replayed():
    def fn(x):
        g = torch.Generator().manual_seed(0)        # the same numbers at every eager call
        return x + torch.rand(3, generator=g)

    lazy = lazytrace.trace_graph(fn)
    for _ in range(3):
        assert torch.equal(lazy(torch.zeros(3)), fn(torch.zeros(3)))
    assert lazy.stats.hits == 0

    lazy = lazytrace.trace_graph(_draw_from_global_generator)
    GLOBAL_GENERATOR.manual_seed(1)
    got = [lazy(torch.zeros(3)) for _ in range(3)]
    GLOBAL_GENERATOR.manual_seed(1)
    assert all(torch.equal(a, _draw_from_global_generator(torch.zeros(3))) for a in got)
    assert lazy.stats.hits == 2


def test_grad_mode_is_restored_when_a_graph_with_effects_raises():
    def fn(x, y):
        x.add_(1)                               # a visible effect: the graph's own error is raised
        with torch.no_grad():
            return torch.linalg.cholesky(y)

    lazy = lazytrace.trace_graph(fn)
    for _ in range(2):
        lazy(torch.zeros(2), torch.eye(2))
    with pytest.raises(torch.linalg.LinAlgError):
        lazy(torch.zeros(2), -torch.eye(2))
    assert torch.is_grad_enabled()


def test_a_write_into_an_inputs_grad_is_replayed():
    def fn(x):
        x.grad.zero_()
        return x.detach() * 2

    lazy = lazytrace.trace_graph(fn)
    for _ in range(3):
        x = torch.randn(3, requires_grad=True)
        x.grad = torch.ones(3)
        lazy(x)
        assert torch.equal(x.grad, torch.zeros(3))
    assert lazy.stats.hits == 2


@pytest.mark.parametrize("make", [
    lambda y: y.as_subclass(torch.Tensor),
    lambda y: torch.nn.Parameter(y, requires_grad=False),       # Tensor._make_subclass
    lambda y: torch.Tensor(y),
    lambda y: torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(y))])
def test_a_tensor_made_by_a_call_no_mode_sees_is_not_baked(make):
    # no TorchFunctionMode call shows these: the tensor they return was taken for an external one
    # (a global's, read live) and its trace-time values replayed
    def fn(x):
        return make(x * 2) + 1

    lazy = lazytrace.trace_graph(fn)
    for _ in range(3):
        x = torch.rand(3)
        assert torch.equal(lazy(x), x * 2 + 1)
    assert lazy.stats.hits == 0 and lazy.stats.eager == 3


class _Settings:
    def __init__(self, size):
        self.xp = torch                         # a module: not looked through for held arrays
        self.scale = 1.0
        self.table = [object() for _ in range(size)]    # more than _held_arrays looks through


@pytest.mark.parametrize("size", [0, 30000], ids=["holding-a-module", "too-much-to-look-through"])
def test_a_tensor_made_unseen_is_not_baked_when_a_read_global_holds_much(size, monkeypatch):
    # the function reads a global object holding a module (or a long list): _held_arrays gave up
    # (None) and the unseen tensor was taken for a held one, its trace-time values replayed
    monkeypatch.setitem(globals(), "_SETTINGS", _Settings(size))

    def fn(x):
        p = torch.nn.Parameter(x * 2, requires_grad=False)      # made by no call a mode sees
        return p * _SETTINGS.scale + len(_SETTINGS.table)
    lazy = lazytrace.trace_graph(fn)
    for _ in range(3):
        x = torch.rand(3)
        assert torch.equal(lazy(x), fn(x))
    assert lazy.stats.hits == 0 and lazy.stats.eager == 3


@pytest.mark.parametrize("fn", [
    lambda x: torch.nested.as_nested_tensor([x * 2, x[:2]]).to_padded_tensor(0.0) + 1,     # recorded calls
    lambda x: torch.nested.nested_tensor([x * 2, x[:2]])])                                 # made unseen
def test_nested_tensors_made_inside(fn):
    # a nested tensor has no single shape: describing the call's output raised at the first call,
    # where eager returns a result
    lazy = lazytrace.trace_graph(fn)
    for _ in range(3):
        x = torch.rand(3)
        got, expected = lazy(x), fn(x)
        if expected.is_nested:
            assert all(torch.equal(a, b) for a, b in zip(got.unbind(), expected.unbind()))
        else:
            assert torch.equal(got, expected)


@pytest.mark.parametrize("made", [lambda x: torch.empty(0), lambda x: x * 3])
def test_a_set_into_an_array_made_inside_makes_the_signature_eager(made):
    # `set_` reaches no TorchFunctionMode: the array it filled was replayed as what made it (a constant)
    def fn(x):
        t = made(x)
        t.set_(x * 2)
        return t + 1

    lazy = lazytrace.trace_graph(fn)
    for _ in range(3):
        x = torch.rand(3)
        assert torch.equal(lazy(x), x * 2 + 1)
    assert lazy.stats.hits == 0

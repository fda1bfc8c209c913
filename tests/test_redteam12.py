"""Red team 12: what a graph baked that its key did not hold (conjugate and negative bits, a
quantized tensor's scale, a function's replaced default values ...): each test fails on 2de58c2."""
import warnings

import pytest
import torch

import lazytrace


# ---- conjugate and negative bits ---------------------------------------------------------

def test_resolve_conj_of_a_conjugate_view_passed_later_copies_as_in_eager():
    def f(x):
        return x.resolve_conj().mul_(2)       # eager: writes into a copy when x is a conjugate view

    lazy = lazytrace.trace_graph(f)
    lazy(torch.ones(2, dtype=torch.cfloat))   # traced without the bit: resolve_conj returned x itself
    base = torch.tensor([1 + 1j, 2 - 1j])
    before = base.clone()
    out = lazy(base.conj())
    assert torch.equal(base, before)          # the caller's tensor is untouched, as in eager
    assert torch.equal(out, f(before.conj()))
    assert not out.is_conj()
    plain = torch.tensor([1 + 1j, 2 - 1j])
    assert lazy(plain) is plain and torch.equal(plain, torch.tensor([2 + 2j, 4 - 2j]))   # no copy without the bit


def test_resolve_neg_of_a_negative_view_passed_later_copies_as_in_eager():
    def f(x):
        return x.resolve_neg().mul_(0)

    lazy = lazytrace.trace_graph(f)
    lazy(torch.randn(3))
    base = torch.randn(3)
    before = base.clone()
    out = lazy(torch._neg_view(base))       # (what `z.conj().imag` is for a complex z)
    assert torch.equal(base, before) and not out.is_neg()
    assert lazy.stats.traces == 1


# ---- quantized tensors --------------------------------------------------------------------

def _quantized(scale, zero_point):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # (quantized creation functions are deprecated)
        return torch.quantize_per_tensor(torch.randn(4), scale, zero_point, torch.quint8)


def test_a_tensor_made_like_a_quantized_input_has_that_inputs_scale():
    def f(q):
        like = torch.empty_like(q)           # copies q's scale and zero point, which no key holds
        return q.dequantize() + like.q_scale() + like.q_zero_point()

    lazy = lazytrace.trace_graph(f)
    lazy(_quantized(0.1, 0))
    for scale, zero_point in ((0.5, 3), (0.25, 7)):
        q = _quantized(scale, zero_point)
        assert torch.equal(lazy(q), f(q))


# ---- default values -----------------------------------------------------------------------

def test_default_values_replaced_after_the_trace_are_seen():
    def f(x, scale=2.0, *, shift=1.0):
        return x * scale + shift

    lazy = lazytrace.trace_graph(f)
    x = torch.ones(3)
    lazy(x)
    lazy(x)                                  # a hit: the fast path checks them too
    f.__defaults__ = (5.0,)
    assert torch.equal(lazy(x), f(x))
    lazy(x)
    f.__kwdefaults__ = {"shift": -1.0}
    assert torch.equal(lazy(x), f(x))
    assert lazy.stats.traces == 3
    lazy(x)
    assert lazy.stats.traces == 3 and lazy.stats.hits == 3


def test_default_values_of_a_bound_method_replaced_after_the_trace_are_seen():
    class Scaler:
        def apply(self, x, scale=2.0):
            return x * scale

    obj = Scaler()
    lazy = lazytrace.trace_graph(obj.apply)
    x = torch.ones(3)
    lazy(x)
    Scaler.apply.__defaults__ = (7.0,)
    assert torch.equal(lazy(x), x * 7.0)


# ---- to= with no array argument ------------------------------------------------------------

def test_a_call_without_arrays_traced_for_to_keys_that_frameworks_global_state():
    def make(n):
        return torch.arange(n) * 1.5          # of the default dtype

    lazy = lazytrace.trace_graph(make, to="torch")
    assert lazy(3).dtype == torch.float32
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert lazy(3).dtype == torch.float64
    finally:
        torch.set_default_dtype(previous)
    assert lazy(3).dtype == torch.float32 and lazy.stats.traces == 2 and lazy.stats.hits == 1


def test_a_call_without_arrays_traced_for_jax_keys_x64():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def make(n):
        return jnp.arange(n) * 1.5

    lazy = lazytrace.trace_graph(make, to="jax")
    assert lazy(3).dtype == jnp.float32
    jax.config.update("jax_enable_x64", True)
    try:
        assert lazy(3).dtype == make(3).dtype == jnp.float64
    finally:
        jax.config.update("jax_enable_x64", False)
    assert lazy(3).dtype == jnp.float32


def test_a_deep_copy_of_a_lazygraph_for_to_keeps_its_target():
    import copy

    def make(n):
        return torch.arange(n) * 1.5

    lazy = copy.deepcopy(lazytrace.trace_graph(make, to="torch"))
    lazy(3)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert lazy(3).dtype == torch.float64
    finally:
        torch.set_default_dtype(previous)


# ---- torch function and dispatch modes of the user's ----------------------------------------

def _scaling_function_mode():
    from torch.overrides import TorchFunctionMode

    class Scale(TorchFunctionMode):
        """Scales what torch.arange makes by its own k (a configuration keyed by type only)."""

        def __init__(self, k):
            super().__init__()
            self.k = k

        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            return out * self.k if func is torch.arange else out
    return Scale


def _shifting_dispatch_mode():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Shift(TorchDispatchMode):
        def __init__(self, k):
            super().__init__()
            self.k = k

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            return out + self.k if func.overloadpacket is torch.ops.aten.arange else out
    return Shift


def f_arange(x):
    return x + torch.arange(3.0)         # a constant without a mode


def test_a_function_mode_configured_otherwise_sees_every_call_as_in_eager():
    Scale = _scaling_function_mode()
    lazy = lazytrace.trace_graph(f_arange)
    x = torch.ones(3)
    ramp = torch.arange(3.0)
    with Scale(2):
        lazy(x)
        lazy(x)
    with Scale(3):
        assert torch.equal(lazy(x), f_arange(x))
    mode = Scale(2)
    with mode:
        lazy(x)
        mode.k = 5                          # the same mode, reconfigured
        assert torch.equal(lazy(x), x + ramp * 5)
    assert torch.equal(lazy(x), f_arange(x))       # without a mode: constants again
    assert lazy.stats.traces == 2


def test_a_dispatch_mode_is_keyed_and_sees_every_call_as_in_eager():
    Shift = _shifting_dispatch_mode()
    lazy = lazytrace.trace_graph(f_arange)
    x = torch.ones(3)
    ramp = torch.arange(3.0)
    lazy(x)
    lazy(x)                                 # the fast path too
    with Shift(10):
        assert torch.equal(lazy(x), x + ramp + 10)
        assert torch.equal(lazy(x), x + ramp + 10)
    with Shift(20):
        assert torch.equal(lazy(x), x + ramp + 20)
    assert torch.equal(lazy(x), f_arange(x))
    assert lazy.stats.traces == 2


# ---- a traced model's class forward edited after the trace ----------------------------------

def _model_class():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x, scale=2.0):
            return self.lin(x) * scale
    return Model


def test_a_model_class_forward_rebound_after_the_trace_is_what_runs():
    Model = _model_class()
    model = lazytrace.trace_graph(Model())
    x = torch.randn(2, 3)
    model(x)
    model(x)
    Model.forward = lambda self, x: self.lin(x) + 100.0
    assert torch.equal(model(x), model.lin(x) + 100.0)


def test_a_model_class_forward_edited_in_place_after_the_trace_is_what_runs():
    Model = _model_class()
    model = lazytrace.trace_graph(Model())
    x = torch.randn(2, 3)
    model(x)
    model(x)

    def edited(self, x, scale=2.0):
        return self.lin(x) - scale
    Model.forward.__code__ = edited.__code__          # as IPython's autoreload updates a class
    assert torch.equal(model(x), model.lin(x) - 2.0)
    model(x)
    Model.forward.__defaults__ = (5.0,)
    assert torch.equal(model(x), model.lin(x) - 5.0)
    assert model.forward.stats.traces == 3


def test_an_object_made_after_its_class_forward_defaults_changed_does_not_share_the_old_graphs(temp_library):
    name, _ = temp_library('''
import torch


class Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Identity()

    def forward(self, x, scale=2.0):
        return self.inner(x) * scale
''')
    original = __import__(name)
    traced = lazytrace.trace_graph(original)
    x = torch.ones(3)
    traced.Scale()(x)
    again = traced.Scale()
    assert torch.equal(again(x), x * 2.0) and again.forward.stats.shared == 1
    original.Scale.forward.__defaults__ = (5.0,)
    later = traced.Scale()
    assert torch.equal(later(x), x * 5.0)
    assert later.forward.stats.shared == 0


# ---- code a traced model runs on attribute access -------------------------------------------

SETTINGS = {"scale": 2.0}


class _PropertyModel(torch.nn.Module):
    @property
    def scale(self):
        return SETTINGS["scale"]          # a global read by code no framework call shows

    def forward(self, x):
        return x * self.scale


class _GetattrModel(torch.nn.Module):
    def __getattr__(self, name):
        if name == "gain":
            return SETTINGS["scale"]
        return super().__getattr__(name)

    def forward(self, x):
        return x * self.gain


@pytest.mark.parametrize("cls", [_PropertyModel, _GetattrModel])
def test_globals_read_by_a_models_property_or_getattr_are_checked(cls, monkeypatch):
    monkeypatch.setitem(SETTINGS, "scale", 2.0)
    model = lazytrace.trace_graph(cls())
    x = torch.ones(3)
    model(x)
    model(x)
    SETTINGS["scale"] = 3.0
    assert torch.equal(model(x), x * 3.0)
    assert torch.equal(model(x), x * 3.0) and model.forward.stats.traces == 2


def _gain():
    return SETTINGS["scale"]


class _MethodModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.held = _gain                   # a function held in an attribute

    def gain(self):
        return SETTINGS["scale"] * 1        # a method making no framework call

    def forward(self, x):
        return x * self.gain() + self.held()


def test_globals_read_by_a_models_method_or_held_function_are_checked(monkeypatch):
    monkeypatch.setitem(SETTINGS, "scale", 2.0)
    model = lazytrace.trace_graph(_MethodModel())
    x = torch.ones(3)
    model(x)
    model(x)
    SETTINGS["scale"] = 3.0
    assert torch.equal(model(x), x * 3.0 + 3.0)


# ---- Python attributes of a tensor passed in --------------------------------------------------

def test_python_attributes_of_a_tensor_argument_are_keyed():
    def f(x):
        return x * 2.0 if getattr(x, "flag", False) else x * 3.0

    lazy = lazytrace.trace_graph(f)
    plain = torch.ones(3)
    lazy(plain)
    lazy(plain)                             # the fast path too
    flagged = torch.ones(3)
    flagged.flag = True
    assert torch.equal(lazy(flagged), f(flagged))
    flagged.flag = False
    assert torch.equal(lazy(flagged), f(flagged))
    assert torch.equal(lazy(plain), plain * 3.0)
    flagged.flag = [1]                      # unhashable: the call runs eagerly, with the reason
    assert torch.equal(lazy(flagged), f(flagged))
    assert any("Python attributes" in reason for reason in lazy.stats.reasons)


def _flagged(x):
    return x * (2.0 if getattr(x, "flag", False) else 3.0)


def test_a_jax_array_carrying_python_attributes_runs_eagerly():
    jnp = pytest.importorskip("jax.numpy")
    lazy = lazytrace.trace_graph(_flagged)
    flagged = jnp.ones(3)
    flagged.flag = True
    assert bool((lazy(flagged) == _flagged(flagged)).all())      # the first call too: the tracer has none
    plain = jnp.ones(3)
    lazy(plain)
    lazy(plain)                              # the fast path too
    assert bool((lazy(flagged) == flagged * 2.0).all())
    assert lazy.stats.traces == 1


def test_a_tensorflow_tensor_carrying_python_attributes_runs_eagerly():
    tf = pytest.importorskip("tensorflow")
    lazy = lazytrace.trace_graph(_flagged)
    plain = tf.ones(3)
    lazy(plain)
    lazy(plain)
    flagged = tf.ones(3)
    flagged.flag = True
    assert bool(tf.reduce_all(lazy(flagged) == flagged * 2.0))
    zeros = tf.zeros(3)                      # (TensorFlow's own `_is_zeros_tensor`: still traced)
    lazy(zeros)
    assert lazy.stats.traces == 1 and lazy.stats.hits >= 2


def test_a_tensor_subclass_keeping_its_own_state_in_its_dict_still_hits():
    from torch.masked import masked_tensor

    def f(m):
        return m * 2.0

    lazy = lazytrace.trace_graph(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for mask in ([True, False, True], [False, True, True]):
            m = masked_tensor(torch.arange(3.0), torch.tensor(mask))
            out = lazy(m)
            assert torch.equal(out.get_mask(), torch.tensor(mask))
    assert lazy.stats.eager == 0 and lazy.stats.traces == 1 and lazy.stats.hits == 1

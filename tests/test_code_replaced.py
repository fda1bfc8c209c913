"""Code the traced function reached, replaced after the trace (a test's monkeypatch, a plugin
swapping a helper): a module global holding a helper or a class, a helper of a helper in another
module, a method replaced on its class (reached through a global object, a class, an object made
inside the call, a method's own helpers). Each case returned the traced code's result before
session 20 (silently wrong); now the graph checks each place holding code by identity
(homes.function_homes) and the signature traces again."""
import sys
import types

import numpy as np
import pytest

import lazytrace
from conftest import replacement_retraces, stored_once

torch = pytest.importorskip("torch")

HELPERS = '''
import numpy as np

def inner(x):
    return x * 2.0

def outer(x):
    return inner(x) + 1.0

def factor():
    return 2.0

class Scaler:
    def scale(self, x):
        return np.sin(x) * 3.0

    @staticmethod
    def static(x):
        return np.cos(x) * 3.0

    @classmethod
    def klass(cls, x):
        return np.cos(x) * 4.0

    def gain(self):
        return factor()         # no framework call: no stack shows it

SCALER = Scaler()

def through_helpers(x):
    return outer(np.sin(x))

def through_object(x):
    return SCALER.scale(x)

def through_class(x):
    return Scaler.static(x) + Scaler.klass(x)

def made_inside(x):
    return Scaler().scale(x)

def gained(x):
    return np.sin(x) * SCALER.gain()

def _make():
    class Made:
        def scale(self, x):
            return np.sin(x) * 2.0
    return Made

MADE = _make()()

def made_class(x):
    return MADE.scale(x)
'''


def _times(k):
    return lambda x: x * k


REPLACEMENTS = {
    "a helper's helper": ("through_helpers", lambda lib: setattr(lib, "inner", _times(5.0))),
    "a helper": ("through_helpers", lambda lib: setattr(lib, "outer", _times(-1.0))),
    "a method of a global object": ("through_object",
                                    lambda lib: setattr(lib.Scaler, "scale", lambda self, x: np.cos(x))),
    "a method set on the object": ("through_object", lambda lib: setattr(lib.SCALER, "scale", _times(2.0))),
    "a static method": ("through_class", lambda lib: setattr(lib.Scaler, "static", staticmethod(_times(7.0)))),
    "a class method": ("through_class",
                       lambda lib: setattr(lib.Scaler, "klass", classmethod(lambda cls, x: x * 8.0))),
    "a class global": ("through_class", lambda lib: setattr(lib, "Scaler", type("Scaler", (), {
        "static": staticmethod(_times(2.0)), "klass": classmethod(lambda cls, x: x)}))),
    "a method of an object made in the call": ("made_inside",
                                               lambda lib: setattr(lib.Scaler, "scale", lambda self, x: x * 0)),
    "a helper of a method making no call": ("gained", lambda lib: setattr(lib, "factor", lambda: 9.0)),
    "a method making no call": ("gained", lambda lib: setattr(lib.Scaler, "gain", lambda self: 4.0)),
}


@pytest.fixture
def helpers_lib(temp_library):
    name, _ = temp_library(HELPERS)
    return __import__(name)


@pytest.mark.parametrize("case", REPLACEMENTS)
def test_code_replaced_after_the_trace_traces_again(case, helpers_lib):
    replacement_retraces(helpers_lib, *REPLACEMENTS[case])


def _doubled(x):
    return x * 2


def _uses_helper(x):
    return _doubled(x) + 1


def test_a_torch_helper_replaced_by_monkeypatch_is_seen_and_the_old_graph_is_taken_again_after_undo(monkeypatch):
    """A test's monkeypatch of a helper, then its undo: each state gets its graph, both replayed."""
    lazy = lazytrace.trace_graph(_uses_helper)
    x = torch.rand(3)
    assert torch.equal(lazy(x), _uses_helper(x)) and torch.equal(lazy(x), _uses_helper(x))
    with monkeypatch.context() as patch:
        patch.setattr(sys.modules[__name__], "_doubled", lambda t: t * 3)
        for _ in range(2):
            x = torch.rand(3)
            assert torch.equal(lazy(x), _uses_helper(x))
    for _ in range(2):
        x = torch.rand(3)
        assert torch.equal(lazy(x), _uses_helper(x))
    assert lazy.stats.traces == 2 and lazy.stats.eager == 0, lazy.stats
    # the reason names what was replaced, not every place the check covers
    assert f"read was replaced: {__name__}._doubled\n" in lazy.explain(), lazy.explain()


_LATER = None


def _installs_a_helper(x):
    global _LATER
    _LATER = _doubled if _LATER is None else _LATER     # a cache being filled at the first call
    return _LATER(x)


def _swaps_its_helper(x):
    global _SWAPPED
    result = _SWAPPED(x)
    _SWAPPED = _doubled if _SWAPPED is not _doubled else _tripled
    return result


def _tripled(x):
    return x * 3


_SWAPPED = _tripled


def test_a_function_rebinding_a_helper_it_calls_runs_eagerly_with_the_reason():
    """Each call picks the other helper: the graph of one call would be wrong at the next."""
    lazy = lazytrace.trace_graph(_swaps_its_helper)
    reference = _SWAPPED
    results = []
    for _ in range(4):
        x = torch.ones(2)
        results.append(lazy(x))
    assert [float(r[0]) for r in results] == [3.0, 2.0, 3.0, 2.0], (reference, results)
    assert lazy.stats.hits == 0 and lazy.stats.eager >= 2
    assert any("'_SWAPPED'" in reason for reason in lazy.stats.reasons), lazy.stats.reasons


def test_a_helper_installed_once_at_the_first_call_is_traced_at_the_second():
    lazy = lazytrace.trace_graph(_installs_a_helper)
    for _ in range(4):
        x = torch.rand(2)
        assert torch.equal(lazy(x), x * 2)
    assert lazy.stats.hits >= 1


def test_a_kornia_helper_monkeypatched_after_the_trace_is_seen(monkeypatch):
    """kornia's gaussian_blur2d builds its kernel through module helpers: one patched after the
    trace (its kernel doubled) changes eager's result, and the graph's."""
    kornia = pytest.importorskip("kornia")
    gaussian = sys.modules["kornia.filters.gaussian"]
    lazy = lazytrace.trace_graph(kornia.filters.gaussian_blur2d)
    x = torch.rand(1, 3, 16, 16)
    before = kornia.filters.gaussian_blur2d(x, (5, 5), (1.5, 1.5))
    for _ in range(2):
        assert torch.equal(lazy(x, (5, 5), (1.5, 1.5)), before)
    original = gaussian.get_gaussian_kernel1d
    monkeypatch.setattr(gaussian, "get_gaussian_kernel1d", lambda *a, **k: original(*a, **k) * 2)
    monkeypatch.setattr(gaussian, "get_gaussian_kernel2d",
                        lambda *a, **k: sys.modules["kornia.filters.kernels"].get_gaussian_kernel2d(*a, **k) * 2)
    expected = kornia.filters.gaussian_blur2d(x, (5, 5), (1.5, 1.5))
    assert not torch.allclose(expected, before), "the patch changes nothing"
    assert torch.equal(lazy(x, (5, 5), (1.5, 1.5)), expected)
    assert lazy.stats.traces == 2


def test_a_graph_checking_methods_is_stored_and_its_checks_hold_after_loading(helpers_lib, tmp_path):
    """A class attribute holding code (Scaler.static, Scaler.klass) is stored by its class's name;
    loaded by a new LazyGraph, the graph hits, and traces again once the method is replaced."""
    lib = helpers_lib
    cache = tmp_path / "cache"
    stored_once(lib, "through_class", cache)
    again = lazytrace.trace_graph(lib.through_class, cache=cache)
    assert again.stats.loaded == 1
    x = np.random.rand(2)
    np.testing.assert_array_equal(again(x), lib.through_class(x))
    assert again.stats.hits == 1
    lib.Scaler.static = staticmethod(_times(7.0))
    x = np.random.rand(2)
    np.testing.assert_array_equal(again(x), lib.through_class(x))
    assert again.stats.traces == 1


def test_a_method_replaced_before_the_load_misses_the_stored_graph(helpers_lib, tmp_path):
    lib = helpers_lib
    cache = tmp_path / "cache"
    stored_once(lib, "through_class", cache)
    lib.Scaler.static = staticmethod(lib.inner)     # a function with a stable name
    again = lazytrace.trace_graph(lib.through_class, cache=cache)
    x = np.random.rand(2)
    np.testing.assert_array_equal(again(x), lib.through_class(x))
    assert again.stats.loaded == 0 and again.stats.traces == 1


def test_a_method_of_a_class_its_name_does_not_find_is_not_stored_and_says_which(helpers_lib, tmp_path):
    lib = helpers_lib
    lazy = lazytrace.trace_graph(lib.made_class, cache=tmp_path / "cache")
    x = np.random.rand(2)
    np.testing.assert_array_equal(lazy(x), lib.made_class(x))
    assert lazy.stats.stored == 0
    assert any("_make.<locals>.Made" in reason for reason in lazy.stats.not_stored), lazy.stats.not_stored
    type(lib.MADE).scale = lambda self, x: x * 0
    np.testing.assert_array_equal(lazy(x), lib.made_class(x))


def test_a_module_namespace_type_is_not_taken_for_a_class():
    """types.SimpleNamespace holding functions (an object, checked by its attributes)."""
    ns = types.SimpleNamespace(act=_doubled)

    def f(x):
        return ns.act(x)
    lazy = lazytrace.trace_graph(f)
    x = torch.rand(2)
    assert torch.equal(lazy(x), f(x)) and torch.equal(lazy(x), f(x))
    ns.act = _tripled
    assert torch.equal(lazy(x), f(x))


class _Activation:
    def apply(self, x):
        return x * 2


_ACTIVATION = _Activation()


def _jax_uses_helper(x):
    import jax.numpy as jnp
    return jnp.sin(_doubled(x)) + _ACTIVATION.apply(x)


def _tf_uses_helper(x):
    import tensorflow as tf
    return tf.sin(_doubled(x)) + _ACTIVATION.apply(x)


@pytest.mark.parametrize("framework", ["jax", "tensorflow"])
@pytest.mark.parametrize("what", ["helper", "method"])
def test_jax_and_tensorflow_graphs_see_code_replaced(framework, what, monkeypatch):
    """The checks are the backends' shared code (homes.function_homes): JAX and TensorFlow
    graphs see a helper or a method replaced after the trace too."""
    pytest.importorskip(framework)
    if framework == "jax":
        import jax.numpy as jnp
        fn, make = _jax_uses_helper, lambda: jnp.asarray(np.random.rand(3).astype(np.float32))
    else:
        import tensorflow as tf
        fn, make = _tf_uses_helper, lambda: tf.constant(np.random.rand(3).astype(np.float32))
    lazy = lazytrace.trace_graph(fn)
    for _ in range(2):
        x = make()
        np.testing.assert_array_equal(np.asarray(lazy(x)), np.asarray(fn(x)))
    if what == "helper":
        monkeypatch.setattr(sys.modules[__name__], "_doubled", lambda t: t * 3)
    else:
        monkeypatch.setattr(_Activation, "apply", lambda self, t: t * 5)
    for _ in range(2):
        x = make()
        np.testing.assert_array_equal(np.asarray(lazy(x)), np.asarray(fn(x)))
    assert lazy.stats.traces == 2 and lazy.stats.hits == 2, lazy.stats


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_compiled_graph_sees_code_replaced(framework, monkeypatch):
    """return_backend_traced_fn=True hands the graph to torch.compile / jax.jit, which bake in the
    code they compile: the places holding it are checked in Python before the compiled body
    (codegen.Checked). A helper replaced after the trace returned the traced helper's result."""
    pytest.importorskip(framework)
    if framework == "jax":
        import jax.numpy as jnp
        fn, make = _jax_uses_helper, lambda: jnp.asarray(np.random.rand(3).astype(np.float32))
    else:
        fn, make = _uses_helper, lambda: torch.rand(3)
    lazy = lazytrace.trace_graph(fn, return_backend_traced_fn=True)
    for _ in range(2):
        x = make()
        np.testing.assert_allclose(np.asarray(lazy(x)), np.asarray(fn(x)), rtol=1e-6)
    monkeypatch.setattr(sys.modules[__name__], "_doubled", lambda t: t * 3)
    for _ in range(2):
        x = make()
        np.testing.assert_allclose(np.asarray(lazy(x)), np.asarray(fn(x)), rtol=1e-6)
    assert lazy.stats.traces == 2 and lazy.stats.hits == 2, lazy.stats


MANY = '''
import numpy as np

class EqualMeta(type):
    def __eq__(cls, other):         # every class of this metaclass equals every other
        return isinstance(other, EqualMeta)
    __hash__ = type.__hash__

class Gain(metaclass=EqualMeta):
    K = 2.0

def h0(x): return x + 0.0
def h1(x): return x + 1.0
def h2(x): return x + 2.0
def h3(x): return x + 3.0
def h4(x): return x + 4.0
def h5(x): return x + 5.0
def h6(x): return x + 6.0

def many(x):
    return h6(h5(h4(h3(h2(h1(h0(np.sin(x)))))))) * Gain.K
'''


@pytest.mark.parametrize("replace", ["h3", "Gain"])
def test_many_helpers_of_a_module_checked_together(replace, temp_library):
    """Six or more places of one module are read by one itemgetter and compared as a tuple (==, in
    C); a class whose metaclass makes == answer True for another class is checked by `is`."""
    name, _ = temp_library(MANY)

    def replace_it(lib):
        if replace == "h3":
            lib.h3 = lambda x: x * 0.0
        else:
            old, lib.Gain = lib.Gain, lib.EqualMeta("Gain", (), {"K": 7.0})
            assert lib.Gain == old          # (a tuple comparison would take it for the same)
    lazy = replacement_retraces(__import__(name), "many", replace_it)
    source = lazy.graph_for(np.random.rand(3)).source
    assert "_get" in source and "['Gain'] is not" in source, source
    assert f"read was replaced: {name}.{replace}\n" in lazy.explain(), lazy.explain()

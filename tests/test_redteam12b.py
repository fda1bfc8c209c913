"""Red team 12b: NumPy, JAX and TensorFlow replays that differed from eager without saying so."""
import functools
import random

import numpy as np
import pytest
from numpy.random import get_state

import lazytrace

try:
    import tensorflow as tf
except ImportError:
    tf = None


def _draws(fn, make):
    lazy = lazytrace.trace_graph(fn)
    results = [lazy(make()) for _ in range(3)]
    return lazy, results


def test_a_numpy_generator_made_unseeded_inside_draws_anew_at_every_call():
    def noise(x):
        return x + np.random.default_rng().random(x.shape)

    lazy, results = _draws(noise, lambda: np.zeros(4))
    assert not np.array_equal(results[1], results[2])     # a graph baked one draw
    assert lazy.stats.eager == 3 and "entropy" in next(iter(lazy.stats.reasons))


def test_a_python_random_made_unseeded_inside_draws_anew_at_every_call():
    def jitter(x):
        return x * random.Random().random()

    lazy, results = _draws(jitter, lambda: np.ones(3))
    assert not np.array_equal(results[1], results[2])
    assert lazy.stats.eager == 3


def test_a_function_without_fresh_generators_still_replays():
    def scale(x, rng):
        return x * 2 + rng.random(x.shape)

    lazy = lazytrace.trace_graph(scale)
    for seed in range(3):
        np.testing.assert_array_equal(lazy(np.ones(3), np.random.default_rng(seed)),
                                      scale(np.ones(3), np.random.default_rng(seed)))
    assert lazy.stats.hits == 2 and lazy.stats.eager == 0


def test_jax_device_get_gives_numpy_arrays_as_in_eager():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def to_host(x):
        return jax.device_get(x * 2), x + 1

    lazy = lazytrace.trace_graph(to_host)
    for i in range(3):
        x = jnp.arange(3.0) + i
        host, dev = lazy(x)
        expected = to_host(x)
        assert type(host) is type(expected[0]) is np.ndarray
        np.testing.assert_array_equal(host, expected[0])
        np.testing.assert_array_equal(dev, expected[1])
    assert lazy.stats.eager == 3 and "device_get" in next(iter(lazy.stats.reasons))


def _print_precision(x):
    return np.round(x, np.get_printoptions()["precision"] - 6)


def _raises_on_divide(x):
    return x * (np.geterr()["divide"] == "raise")


def _first_state_word(x):
    return x + np.random.get_state()[1][0]


def _buffer_size(x):
    return x * np.getbufsize()


@pytest.mark.parametrize("fn, change", [
    (_print_precision, lambda: np.printoptions(precision=7)),
    (_raises_on_divide, lambda: np.errstate(divide="raise")),
    (_first_state_word, lambda: _seeded(5)),
    (_buffer_size, lambda: _bufsize(16384)),
])
def test_numpy_state_read_by_the_code_is_checked(fn, change):
    lazy = lazytrace.trace_graph(fn)
    x = np.arange(4.0) / 3
    lazy(x), lazy(x)
    with change():
        np.testing.assert_array_equal(lazy(x), fn(x))
    np.testing.assert_array_equal(lazy(x), fn(x))


class _seeded:
    def __init__(self, seed):
        self.seed = seed

    def __enter__(self):
        self.state = np.random.get_state()
        np.random.seed(self.seed)

    def __exit__(self, *exc):
        np.random.set_state(self.state)


class _bufsize:
    def __init__(self, size):
        self.size = size

    def __enter__(self):
        self.old = np.setbufsize(self.size)

    def __exit__(self, *exc):
        np.setbufsize(self.old)


def _wraps(x):
    return x + np.int8(100) * np.int8(2)


def _floor_divides_by_zero(x):
    return x + np.arange(3) // 0


@pytest.mark.parametrize("fn", [_wraps, _floor_divides_by_zero])
def test_an_integer_constant_computed_with_an_error_raises_under_errstate_as_in_eager(fn):
    lazy = lazytrace.trace_graph(fn)
    with np.errstate(all="ignore"):
        x = np.arange(3, dtype=np.int8)
        lazy(x), lazy(x)
        assert lazy.stats.hits == 1
    with np.errstate(over="raise", divide="raise"):
        with pytest.raises(FloatingPointError):
            fn(x)
        with pytest.raises(FloatingPointError):
            lazy(x)


def test_jax_legacy_prng_key_mode_is_part_of_the_key():
    jax = pytest.importorskip("jax")

    def noise(key, x):
        return jax.random.normal(key, x.shape) + x

    lazy = lazytrace.trace_graph(noise)
    key, x = jax.random.PRNGKey(0), jax.numpy.ones(3)
    lazy(key, x), lazy(key, x)
    old = jax.config.jax_legacy_prng_key
    jax.config.update("jax_legacy_prng_key", "error")
    try:
        with pytest.raises(ValueError, match="Legacy uint32 key"):
            noise(key, x)
        with pytest.raises(ValueError, match="Legacy uint32 key"):
            lazy(key, x)
        np.testing.assert_array_equal(lazy(jax.random.key(1), x), noise(jax.random.key(1), x))
    finally:
        jax.config.update("jax_legacy_prng_key", old)


def _tf32_scale(x):
    return x * (2.0 if tf.config.experimental.tensor_float_32_execution_enabled() else 3.0)


@pytest.mark.skipif(tf is None, reason="needs tensorflow")
def test_tensorflow_settings_read_by_the_code_are_checked():
    lazy = lazytrace.trace_graph(_tf32_scale)
    x = tf.ones(2)
    lazy(x), lazy(x)
    old = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(not old)
    try:
        np.testing.assert_array_equal(lazy(x), _tf32_scale(x))
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(old)
    np.testing.assert_array_equal(lazy(x), _tf32_scale(x))


def test_state_read_through_a_module_in_a_closure_is_checked():
    # (a framework module held in a closure cell, `import numpy` in an enclosing function: followed
    # since session 17, reads.attribute_chains)
    import numpy as closure_np

    def precision(x):
        return np.round(x, closure_np.get_printoptions()["precision"] - 6)

    lazy = lazytrace.trace_graph(precision)
    x = np.arange(4.0) / 3
    lazy(x), lazy(x)
    with np.printoptions(precision=7):
        np.testing.assert_array_equal(lazy(x), precision(x))


@pytest.mark.xfail(strict=True, reason="text of an array no call shows (a constant made by np.arange, a NumPy "
                   "scalar literal) depends on np.printoptions, which is not keyed")
def test_text_of_a_constant_follows_the_print_options():
    def width(x):
        return x * len(np.array2string(np.arange(3.0) / 3))

    lazy = lazytrace.trace_graph(width)
    x = np.ones(2)
    lazy(x), lazy(x)
    with np.printoptions(precision=3):
        np.testing.assert_array_equal(lazy(x), width(x))


def test_the_global_rng_state_read_through_an_imported_name_is_checked():
    lazy = lazytrace.trace_graph(_first_word_by_name)
    x = np.arange(4.0)
    lazy(x), lazy(x)
    with _seeded(5):
        np.testing.assert_array_equal(lazy(x), _first_word_by_name(x))


def _first_word_by_name(x):
    return x + get_state()[1][0]


def _scaled_by_a_draw(x, rng):
    return x * rng.random()


def _shifted_by_an_integer_draw(x, rng):
    return x + rng.integers(0, 1000)


def _shifted_by_the_generator_state(x, rng):
    return x + rng.bit_generator.state["state"]["state"] % 7


def _shifted_by_the_legacy_state(x, rng):
    return x + rng.get_state()[1][0] % 7


@pytest.mark.parametrize("fn, make", [
    (_scaled_by_a_draw, np.random.default_rng),
    (_shifted_by_an_integer_draw, np.random.default_rng),
    (_shifted_by_the_generator_state, np.random.default_rng),
    (_shifted_by_the_legacy_state, np.random.RandomState),
])
def test_python_values_from_a_generator_passed_in_are_those_of_each_call(fn, make):
    lazy = lazytrace.trace_graph(fn)
    for seed in (0, 0, 1, 2):
        np.testing.assert_array_equal(lazy(np.arange(3.0), make(seed)), fn(np.arange(3.0), make(seed)))


@pytest.mark.parametrize("repeat", [lambda x: [0] * x.argmax(), lambda x: x.argmax() * (1,),
                                    lambda x: "ab" * x.argmax(), lambda x: [0] * x.sum().astype(int),
                                    lambda x: [0] * x.sum()])
def test_a_sequence_repeated_by_a_numpy_scalar_is_a_sequence_as_in_eager(repeat):
    lazy = lazytrace.trace_graph(repeat)
    for values in ([0.0, 2.0, 1.0], [0.0, 2.0, 1.0], [3.0, 0.0, 0.0]):
        try:
            expected = repeat(np.array(values))
        except TypeError:
            with pytest.raises(TypeError):
                lazy(np.array(values))
            continue
        got = lazy(np.array(values))
        assert type(got) is type(expected) and got == expected


@pytest.mark.xfail(strict=True, reason="a NumPy scalar tracer handed to C code that takes only ints "
                   "(SeedSequence) raises TypeError under the trace, which is not recognised as caused by it")
def test_a_seed_drawn_from_a_generator_passed_in_seeds_a_new_one_as_in_eager():
    def reseeded(x, rng):
        return x + np.random.Generator(np.random.PCG64(rng.integers(100))).random(3)

    lazy = lazytrace.trace_graph(reseeded)
    np.testing.assert_array_equal(lazy(np.arange(3.0), np.random.default_rng(0)),
                                  reseeded(np.arange(3.0), np.random.default_rng(0)))


def _config_module_in_a_cell(cfg_name):
    import importlib
    cfg = importlib.import_module(cfg_name)

    def scaled(x):
        return x * cfg.SCALE + cfg.inner.OFFSET     # a user module imported in the enclosing function
    return scaled


@pytest.mark.parametrize("attribute", ["SCALE", "inner.OFFSET"])
def test_a_global_of_a_module_held_in_a_closure_variable_is_checked(attribute, monkeypatch):
    # session 17: silently wrong before (cfg.SCALE of a module in a closure cell was baked)
    import sys
    import types
    cfg, inner = types.ModuleType("lt_s17_cfg"), types.ModuleType("lt_s17_cfg.inner")
    cfg.SCALE, inner.OFFSET, cfg.inner = 2.0, 1.0, inner
    monkeypatch.setitem(sys.modules, "lt_s17_cfg", cfg)
    monkeypatch.setitem(sys.modules, "lt_s17_cfg.inner", inner)
    f = _config_module_in_a_cell("lt_s17_cfg")
    lazy = lazytrace.trace_graph(f)
    x = np.arange(3.0)
    lazy(x), lazy(x)
    holder, name = (inner, "OFFSET") if attribute == "inner.OFFSET" else (cfg, "SCALE")
    setattr(holder, name, 7.0)
    np.testing.assert_array_equal(lazy(x), f(x))
    assert lazy.stats.hits == 1 and lazy.stats.traces == 2


def _class_in_a_cell(nested):
    class Config:
        GAIN = 2.0

    def scaled(x):
        return x * Config.GAIN

    def scaled_in_a_lambda(x):
        return (lambda y: y * Config.GAIN)(x)      # (read in code nested in the traced function)
    return (scaled_in_a_lambda if nested else scaled), Config


@pytest.mark.parametrize("nested", [False, True], ids=["in the function", "in a nested lambda"])
def test_a_class_attribute_of_a_class_held_in_a_closure_variable_is_checked(nested):
    # session 17: silently wrong before (Config.GAIN of a class made in an enclosing function was baked)
    f, config = _class_in_a_cell(nested)
    lazy = lazytrace.trace_graph(f)
    x = np.arange(3.0)
    lazy(x), lazy(x)
    config.GAIN = 5.0
    np.testing.assert_array_equal(lazy(x), f(x))
    assert lazy.stats.traces == 2


class _Settings:
    pass


def _bound_by(how, cfg_module, settings, klass):
    """A function reading a module, a plain object and a class bound other than by globals."""
    def read(x, m, s, c):
        return x * m.SCALE + s.k * c.GAIN
    if how == "defaults":
        def f(x, m=cfg_module, s=settings, c=klass):
            return x * m.SCALE + s.k * c.GAIN
        return f
    if how == "keyword-only defaults":
        def f(x, *, m=cfg_module, s=settings, c=klass):
            return x * m.SCALE + s.k * c.GAIN
        return f
    return functools.partial(read, m=cfg_module, s=settings, c=klass)


@pytest.mark.parametrize("how", ["defaults", "keyword-only defaults", "partial keywords"])
@pytest.mark.parametrize("change", ["module global", "object attribute", "class attribute"])
def test_values_bound_by_defaults_or_partial_keywords_are_checked(how, change, monkeypatch):
    # session 17: silently wrong before (a default `cfg=CONFIG` object's attribute, a module's
    # global or a class attribute read through a default or a partial's keyword kept the traced value)
    import types
    cfg = types.ModuleType("lt_s17_bound")
    cfg.SCALE = 2.0
    settings = _Settings()
    settings.k = 3.0
    klass = type("Config", (), {"GAIN": 4.0})
    f = _bound_by(how, cfg, settings, klass)
    lazy = lazytrace.trace_graph(f)
    x = np.arange(3.0)
    lazy(x), lazy(x)
    holder, name = {"module global": (cfg, "SCALE"), "object attribute": (settings, "k"),
                    "class attribute": (klass, "GAIN")}[change]
    setattr(holder, name, 7.0)
    np.testing.assert_array_equal(lazy(x), f(x))
    assert lazy.stats.hits == 1 and lazy.stats.traces == 2


class _Gain:
    k = 2.0

    @classmethod
    def get(cls):
        return cls.k

    @staticmethod
    def doubled():
        return _Gain.k * 2


class _Holder:
    def __init__(self):
        self.k = 2.0

    def scale(self):
        return self.k


def _helper():
    return 1.0


_helper.scale = 2.0
_HOLDER = _Holder()
_HELD_METHOD = _HOLDER.scale


@pytest.mark.parametrize("case", ["classmethod", "staticmethod", "held bound method", "function attribute"])
def test_values_read_through_methods_and_function_attributes_are_checked(case, monkeypatch):
    # session 17: silently wrong before (the traced value kept): a global class's classmethod or
    # staticmethod making no framework call, a bound method held by a global (`scale = CONFIG.scale`),
    # an attribute set on a function (`helper.scale = 2.0`)
    f = {"classmethod": lambda x: x * _Gain.get(), "staticmethod": lambda x: x * _Gain.doubled(),
         "held bound method": lambda x: x * _HELD_METHOD(), "function attribute": lambda x: x * _helper.scale}[case]
    holder, name = {"classmethod": (_Gain, "k"), "staticmethod": (_Gain, "k"), "held bound method": (_HOLDER, "k"),
                    "function attribute": (_helper, "scale")}[case]
    lazy = lazytrace.trace_graph(f)
    x = np.arange(3.0)
    lazy(x), lazy(x)
    monkeypatch.setattr(holder, name, 7.0)
    np.testing.assert_array_equal(lazy(x), f(x))
    assert lazy.stats.hits == 1 and lazy.stats.traces == 2


_FACTOR = 2.0


class _Settings2:
    def scale(self):
        return _FACTOR              # a module global read by a method making no framework call

    @property
    def doubled(self):
        return _FACTOR * 2


_SETTINGS2 = _Settings2()


@pytest.mark.parametrize("f", [lambda x: x * _SETTINGS2.scale(), lambda x: x * _SETTINGS2.doubled],
                         ids=["method", "property"])
def test_globals_read_by_a_global_objects_method_or_property_are_checked(f, monkeypatch):
    # session 17: a documented limit until then (baked): the method or property its class defines is
    # walked like a function called by name
    lazy = lazytrace.trace_graph(f)
    x = np.arange(3.0)
    lazy(x), lazy(x)
    monkeypatch.setitem(globals(), "_FACTOR", 7.0)
    np.testing.assert_array_equal(lazy(x), f(x))
    assert lazy.stats.hits == 1 and lazy.stats.traces == 2

"""Python values a function reaches by itself (module globals, closure variables, config objects)
are checked at every call (graph/reads.py): a change traces again, never a stale result."""
import dataclasses
import functools
import random
import sys
import types

import numpy as np
import pytest
import torch

import lazytrace

SCALE = 2.0
TABLE = {"gain": 2.0, "shift": [1.0, 2.0]}
WEIGHT = torch.ones(3)
CONFIG = types.SimpleNamespace(gain=2.0, mode="add")
CALLS = 0
BACKENDS: dict = {}


@dataclasses.dataclass
class Settings:
    gain: float = 2.0


SETTINGS = Settings()


def scaled(x):
    return x * SCALE


def tabled(x):
    return x * TABLE["gain"] + TABLE["shift"][1]


def weighted(x):
    return x * WEIGHT


def configured(x):
    out = x * CONFIG.gain
    return out + 1 if CONFIG.mode == "add" else out - 1


def with_settings(x):
    return x * SETTINGS.gain


def counting(x):
    global CALLS
    CALLS += 1
    return x * CALLS


def cached_backend(x):
    backend = BACKENDS.setdefault(type(x), "filled once")
    return x + len(backend)


METHOD_GAIN = 2.0


def helper_gain():
    return SCALE


def via_helper(x):
    return x * helper_gain()          # SCALE is read by a function the traced one calls


class Scaler:
    def apply(self, x):
        return x * METHOD_GAIN        # read by a method: seen on the stack at the multiplication


SCALER = Scaler()


def via_method(x):
    return SCALER.apply(x)


SETTINGS_MODULE = types.ModuleType("lazytrace_test_settings")     # like `from . import config`
SETTINGS_MODULE.GAIN = 2.0


def via_module(x):
    return x * SETTINGS_MODULE.GAIN


@pytest.fixture(autouse=True)
def restore_globals():
    saved = dict(SCALE=SCALE, TABLE=TABLE, WEIGHT=WEIGHT, CONFIG=CONFIG, CALLS=CALLS, SETTINGS=SETTINGS,
                 METHOD_GAIN=METHOD_GAIN, FACTOR=FACTOR, BETA=BETA)
    saved_table = {k: list(v) if isinstance(v, list) else v for k, v in TABLE.items()}
    yield
    globals().update(saved)
    TABLE.clear()
    TABLE.update(saved_table)
    CONFIG.gain, CONFIG.mode, SETTINGS.gain, SETTINGS_MODULE.GAIN = 2.0, "add", 2.0, 2.0
    BACKENDS.clear()


def test_a_rebound_global_number_is_seen(fw):
    global SCALE
    lazy = lazytrace.trace_graph(scaled)
    x = fw.rand(4)
    assert fw.equal(lazy(x), scaled(x)) and fw.equal(lazy(x), scaled(x))
    assert lazy.stats.hits == 1
    SCALE = 3.0
    assert fw.equal(lazy(x), x * 3.0)
    assert lazy.stats.guard_failures == 1 and lazy.stats.traces == 2
    assert "the global 'SCALE' changed" in lazy.explain()
    assert fw.equal(lazy(x), x * 3.0) and lazy.stats.hits == 2


def test_the_type_of_a_global_number_is_checked_too():
    global SCALE
    lazy = lazytrace.trace_graph(scaled)
    x = torch.arange(4)
    SCALE = 2
    assert lazy(x).dtype == torch.int64
    SCALE = 2.0                                   # equal as numbers, but int * 2.0 is a float tensor
    assert lazy(x).dtype == torch.float32 and torch.equal(lazy(x), scaled(x))


def test_a_global_dict_changed_in_place_is_seen(fw):
    lazy = lazytrace.trace_graph(tabled)
    x = fw.rand(4)
    assert fw.equal(lazy(x), tabled(x))
    TABLE["gain"] = 5.0
    assert fw.equal(lazy(x), tabled(x))
    TABLE["shift"][1] = -1.0                      # a list inside it
    assert fw.equal(lazy(x), tabled(x))
    assert lazy.stats.traces == 3


def test_a_global_array_is_read_live_and_rebinding_it_is_seen():
    global WEIGHT
    lazy = lazytrace.trace_graph(weighted)
    x = torch.rand(3)
    assert torch.equal(lazy(x), x)
    WEIGHT.mul_(3)                                # in place: the graph reads the same tensor
    assert torch.equal(lazy(x), x * 3) and lazy.stats.traces == 1
    WEIGHT = torch.full((3,), 7.0)                # rebound: another tensor
    assert torch.equal(lazy(x), x * 7) and lazy.stats.traces == 2


def test_config_objects_are_checked_attribute_by_attribute(fw):
    lazy = lazytrace.trace_graph(configured)
    settings = lazytrace.trace_graph(with_settings)
    x = fw.rand(4)
    assert fw.equal(lazy(x), configured(x)) and fw.equal(settings(x), with_settings(x))
    CONFIG.mode = "subtract"
    SETTINGS.gain = 4.0
    assert fw.equal(lazy(x), configured(x)) and fw.equal(settings(x), x * 4.0)
    assert lazy.stats.traces == 2 and settings.stats.traces == 2


def test_closure_variables_are_checked(fw):
    factor = 2.0

    def fn(x):
        return x * factor

    lazy = lazytrace.trace_graph(fn)
    x = fw.rand(4)
    assert fw.equal(lazy(x), x * 2.0)
    factor = 5.0                                  # the cell fn reads is rebound
    assert fw.equal(lazy(x), x * 5.0)
    assert "closure changed" in lazy.explain()


def test_a_function_changing_what_it_reads_runs_eagerly_after_one_retry():
    lazy = lazytrace.trace_graph(counting)
    x = torch.ones(2)
    outs = [lazy(x) for _ in range(4)]
    assert [o.tolist() for o in outs] == [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]]
    assert CALLS == 4                             # every call ran the function: the side effect too
    assert lazy.stats.traces == 2 and lazy.stats.hits == 0
    assert any("changes the global 'CALLS'" in r for r in lazy.stats.reasons)


def test_a_cache_filled_by_the_first_call_is_traced_again_then_replayed():
    lazy = lazytrace.trace_graph(cached_backend)
    x = np.ones(3)
    for _ in range(4):
        assert np.array_equal(lazy(x), x + len("filled once"))
    assert lazy.stats.traces == 2 and lazy.stats.hits == 2 and lazy.stats.eager == 1


def test_globals_read_by_called_functions_and_methods_are_checked(fw):
    global SCALE, METHOD_GAIN
    helper, method = lazytrace.trace_graph(via_helper), lazytrace.trace_graph(via_method)
    x = fw.rand(4)
    assert fw.equal(helper(x), x * 2.0) and fw.equal(method(x), x * 2.0)
    SCALE, METHOD_GAIN = 3.0, 4.0
    assert fw.equal(helper(x), x * 3.0) and fw.equal(method(x), x * 4.0)
    assert helper.stats.traces == 2 and method.stats.traces == 2


MODEL = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))


def use_model(x):
    return MODEL(x)


def test_a_global_model_is_recorded_eval_and_swapped_parts_are_seen():
    lazy = lazytrace.trace_graph(use_model)
    x = torch.rand(2, 4)
    with torch.no_grad():
        torch.manual_seed(0)
        first = lazy(x)
        torch.manual_seed(0)
        assert torch.equal(first, use_model(x))           # dropout on: the same draws
        MODEL.eval()                                      # a module flag read by Dropout.forward
        assert torch.equal(lazy(x), use_model(x)) and lazy.stats.traces == 2
        MODEL[0].weight.mul_(2)                            # in place: read live, no new trace
        assert torch.equal(lazy(x), use_model(x)) and lazy.stats.traces == 2
        MODEL[0].weight = torch.nn.Parameter(torch.ones(4, 4))     # another parameter object
        assert torch.equal(lazy(x), use_model(x)) and lazy.stats.traces == 3
        MODEL[0] = torch.nn.Linear(4, 4)                   # another submodule
        assert torch.equal(lazy(x), use_model(x)) and lazy.stats.traces == 4
    assert type(MODEL) is torch.nn.Sequential              # its class is given back after each trace


def test_a_global_changing_at_every_call_ends_eager_naming_it():
    global SCALE
    lazy = lazytrace.trace_graph(scaled)
    x = torch.rand(3)
    for step in range(8):
        SCALE = float(step)
        assert torch.equal(lazy(x), x * float(step))
    assert lazy.stats.traces == 4 and lazy.stats.eager >= 3
    assert any("the global 'SCALE' changed" in reason for reason in lazy.stats.reasons)


class Transform:
    def __init__(self, gain):
        self.gain = gain
        self.post = abs                 # holds code too

    def __call__(self, x):
        return self.post(x * self.gain)


TRANSFORM = Transform(2.0)


def transformed(x):
    return TRANSFORM(x)


def test_attributes_of_a_callable_object_are_checked():
    lazy = lazytrace.trace_graph(transformed)
    x = torch.rand(4) - 0.5
    assert torch.equal(lazy(x), transformed(x))
    TRANSFORM.gain = -3.0
    assert torch.equal(lazy(x), transformed(x)) and lazy.stats.traces == 2
    TRANSFORM.gain = 2.0


NESTED = types.SimpleNamespace(inner=types.SimpleNamespace(gain=2.0))


def nested(x):
    return x * NESTED.inner.gain


def test_objects_held_by_a_global_object_are_checked_too(fw):
    lazy = lazytrace.trace_graph(nested)
    x = fw.rand(4)
    assert fw.equal(lazy(x), x * 2.0)
    NESTED.inner.gain = 6.0
    assert fw.equal(lazy(x), x * 6.0) and lazy.stats.traces == 2
    NESTED.inner.gain = 2.0


def test_a_global_of_another_module_read_through_it_is_checked(fw):
    lazy = lazytrace.trace_graph(via_module)
    x = fw.rand(4)
    assert fw.equal(lazy(x), x * 2.0)
    SETTINGS_MODULE.GAIN = 5.0
    assert fw.equal(lazy(x), x * 5.0) and lazy.stats.traces == 2
    assert "the global 'GAIN' changed" in lazy.explain()


def test_compiled_graphs_keep_checking_globals_in_python():
    """jax.jit runs Python once, when it traces: the checks of globals run before the jitted body."""
    jax = pytest.importorskip("jax")
    global SCALE
    lazy = lazytrace.trace_graph(scaled, return_backend_traced_fn=True)
    x = jax.numpy.arange(4.0)
    assert np.array_equal(lazy(x), x * 2.0) and np.array_equal(lazy(x), x * 2.0)
    assert hasattr(lazy.graphs[0].fn.fn, "lower")            # the body is jitted: the check was split off
    SCALE = 3.0
    assert np.array_equal(lazy(x), x * 3.0) and lazy.stats.traces == 2


def test_attributes_of_an_imported_config_module_are_checked(temp_library):
    """`import config; x * config.SCALE` (and `from pkg import config`): the global is a module,
    which is not checked, so its attribute was baked; it is now checked like a global of that
    module, and a function it holds that the code calls is named in stored graphs."""
    config_name, _ = temp_library("SCALE = 2.0\nMODE = 'add'\n")
    lib = __import__(temp_library(f"""
import {config_name} as config

def configured(x):
    if config.MODE == "add":
        return x + config.SCALE
    return x * config.SCALE
""")[0])
    config = lib.config
    lazy = lazytrace.trace_graph(lib.configured)
    for step, (scale, mode) in enumerate([(2.0, "add"), (2.0, "add"), (3.0, "add"), (3.0, "mul"), (3.0, "mul")]):
        config.SCALE, config.MODE = scale, mode
        x = torch.rand(3) + step
        assert torch.equal(lazy(x), lib.configured(x))
    assert lazy.stats.traces == 3 and lazy.stats.hits == 2


def _package_with_settings(temp_library, source):
    """A module `config_name` (SCALE = 2.0) and a package beside it with a `settings` submodule
    (GAIN = 1.0), whose __init__ is source(config_name): (config_name, package name)."""
    config_name, folder = temp_library("SCALE = 2.0\n")
    package = f"{config_name}_pkg"
    (folder / package).mkdir()
    (folder / package / "settings.py").write_text("GAIN = 1.0\n")
    (folder / package / "__init__.py").write_text(source(config_name))
    return config_name, package


def test_modules_a_function_imports_itself_are_checked(temp_library):
    """`import config` / `from config import SCALE` / `from . import config` inside the function
    body: the module is a local variable, not a global; what the function reads from it is
    checked like `config.SCALE` read through a global (it was baked)."""
    config_name, package = _package_with_settings(temp_library, lambda config_name: f"""
def imported(x):
    import {config_name}
    return x * {config_name}.SCALE

def imported_as(x):
    import {config_name} as config
    return x * config.SCALE

def imported_from(x):
    from {config_name} import SCALE
    return x * SCALE

def relative(x):
    from . import settings
    from .settings import GAIN
    return x * settings.GAIN + GAIN
""")
    try:
        lib = __import__(package)
        config, settings = __import__(config_name), None     # settings: imported by the first call
        lazies = {name: lazytrace.trace_graph(getattr(lib, name))
                  for name in ("imported", "imported_as", "imported_from", "relative")}
        for step, value in enumerate([2.0, 2.0, 3.0, 3.0, 5.0]):
            config.SCALE = value
            if settings is not None:
                settings.GAIN = value
            x = torch.rand(3) + step
            for name, lazy in lazies.items():
                assert torch.equal(lazy(x), getattr(lib, name)(x)), (name, value)
            settings = sys.modules[f"{package}.settings"]
        # `relative` saw GAIN = 1.0 (as imported) at its first call, then 2.0: one trace more
        assert {name: (lazy.stats.traces, lazy.stats.hits) for name, lazy in lazies.items()} == {
            "imported": (3, 2), "imported_as": (3, 2), "imported_from": (3, 2), "relative": (4, 1)}
    finally:
        for name in (package, f"{package}.settings"):
            sys.modules.pop(name, None)


def test_a_module_imported_in_the_body_and_read_into_a_local_is_checked(temp_library):
    """`from . import settings` then `s = settings.GAIN` (a store after the import, before any
    other import): reading the function's imports raised IndexError at the first call."""
    config_name, package = _package_with_settings(temp_library, lambda config_name: f"""
def stored(x):
    if x.shape[0] > 100:
        import json
    from . import settings as s
    from {config_name} import SCALE
    gain = s.GAIN
    return x * gain + SCALE
""")
    try:
        lib = __import__(package)
        lazy = lazytrace.trace_graph(lib.stored)
        for step, value in enumerate([1.0, 1.0, 3.0, 3.0]):
            x = torch.rand(3)
            assert torch.equal(lazy(x), lib.stored(x))
            sys.modules[f"{package}.settings"].GAIN = value + 1
        assert lazy.stats.traces == 3 and lazy.stats.hits == 1
    finally:
        for name in (package, f"{package}.settings"):
            sys.modules.pop(name, None)


class Tuning:
    GAIN = 2.0


class FineTuning(Tuning):
    pass


def test_class_attributes_read_by_the_function_are_checked():
    """`Tuning.GAIN` (a config class): set on the class later, or on a subclass that inherited
    it, the graph traces again instead of replaying the old value."""
    def tuned(x):
        return x * Tuning.GAIN

    def fine_tuned(x):
        return x * FineTuning.GAIN

    try:
        for fn in (tuned, fine_tuned):
            Tuning.GAIN = 2.0
            lazy = lazytrace.trace_graph(fn)
            x = torch.rand(3)
            lazy(x), lazy(x)
            Tuning.GAIN = 5.0
            assert torch.equal(lazy(x), x * 5.0)
            FineTuning.GAIN = 7.0
            assert torch.equal(lazy(x), fn(x))
            assert lazy.stats.hits == (2 if fn is tuned else 1)     # the subclass's value is fine_tuned's only
            del FineTuning.GAIN
    finally:
        Tuning.GAIN = 2.0


NP_TABLE = np.ones(3, dtype=np.float32)


def test_numpy_table_copied_by_a_torch_function_is_checked_by_contents():
    """torch.tensor(NP_TABLE) copies the global NumPy array into a constant: the identity check of
    globals passed after an in-place write, and the graph kept the old values."""
    def weighted(x):
        return x * torch.tensor(NP_TABLE)

    lazy = lazytrace.trace_graph(weighted)
    x = torch.rand(3)
    try:
        for step in range(3):
            NP_TABLE[:] = step + 1
            assert torch.equal(lazy(x), weighted(x)) and torch.equal(lazy(x), weighted(x))
        assert lazy.stats.traces == 3 and lazy.stats.hits == 3
    finally:
        NP_TABLE[:] = 1


STEP = 0


def test_a_partial_does_not_check_the_callers_own_globals():
    """The stack walk ends at the trace: the script calling the graph (here this test module's
    globals, e.g. a loop counter) is not part of the function."""
    global STEP
    import functools
    lazy = lazytrace.trace_graph(functools.partial(torch.mul, other=2.0))
    x = torch.rand(3)
    for STEP in range(4):
        assert torch.equal(lazy(x), x * 2.0)
    assert lazy.stats.traces == 1 and lazy.stats.hits == 3


def _same_type_as(fw, obj, like) -> bool:
    return type(obj) is type(like) and fw.equal(obj, like)


@dataclasses.dataclass(frozen=True)
class _Frozen:
    y: object


def test_results_the_graph_cannot_rebuild_hold_arrays_not_tracers(fw):
    """A NumPy, JAX or TensorFlow trace hands the function wrapper objects: a returned closure,
    namespace or frozen dataclass must hold what eager code gives, the arrays."""
    x = fw.rand(3)
    eager_y = x * 2

    def closure(x):
        return lambda: x * 2

    def namespace(x):
        return types.SimpleNamespace(y=x * 2, items=[x * 2], pair=(x * 2, 1))

    def frozen(x):
        return _Frozen(y={"k": x * 2})

    for _ in range(2):          # the first call traces, the second runs eagerly (nothing to replay)
        assert _same_type_as(fw, lazytrace.trace_graph(closure)(x)(), eager_y)
        out = lazytrace.trace_graph(namespace)(x)
        assert all(_same_type_as(fw, y, eager_y) for y in (out.y, out.items[0], out.pair[0]))
        assert _same_type_as(fw, lazytrace.trace_graph(frozen)(x).y["k"], eager_y)


LOG: list = []


def logging_results(x):
    LOG.append(x * 2)
    return x + 1


def setting_a_new_global(x):
    global LAST_RESULT
    LAST_RESULT = x * 3
    return x + 1


def test_arrays_a_function_leaves_in_globals_are_arrays_and_each_call_leaves_its_own(fw):
    LOG.clear()
    globals().pop("LAST_RESULT", None)
    logged, setting = lazytrace.trace_graph(logging_results), lazytrace.trace_graph(setting_a_new_global)
    for i in range(4):
        x = fw.rand(3, seed=i)
        assert fw.equal(logged(x), x + 1) and fw.equal(setting(x), x + 1)
        assert _same_type_as(fw, LOG[-1], x * 2) and len(LOG) == i + 1
        assert _same_type_as(fw, LAST_RESULT, x * 3)     # not left at the first call's value
    assert logged.stats.hits == 0 and setting.stats.hits == 0
    assert any("'LAST_RESULT'" in r for r in setting.stats.reasons)


def test_a_replaced_code_object_has_its_own_globals_checked():
    """What a code object reads is worked out once per code object, by identity: a function whose
    __code__ is replaced reads the globals of its new code, which are then checked."""
    namespace = {"A": 2.0, "B": 3.0}
    exec("def f(x):\n    return x * A\n", namespace)
    exec("def g(x):\n    return x * B\n", namespace)
    f = namespace["f"]
    x = torch.rand(3)
    assert torch.equal(lazytrace.trace_graph(f)(x), x * 2.0)
    f.__code__ = namespace["g"].__code__
    lazy = lazytrace.trace_graph(f)
    assert torch.equal(lazy(x), x * 3.0)
    namespace["B"] = 5.0
    y = torch.rand(3)
    assert torch.equal(lazy(y), y * 5.0) and lazy.stats.traces == 2


def test_what_new_code_objects_read_is_never_taken_from_freed_ones():
    """Code objects made and dropped one after another may reuse one address: the reads found for
    each are its own."""
    from lazytrace.graph.reads import global_reads
    for i in range(200):
        namespace: dict = {}
        exec(f"def f(x):\n    return x * G{i}.scale + H{i}\n", namespace)
        assert global_reads(namespace.pop("f").__code__) == ((f"G{i}",), (f"G{i}", "scale"), (f"H{i}",))


FACTOR = 2.0


def _factor():
    return FACTOR           # no framework call: only the walk before the trace sees this read


def _level3():
    return _factor()


def _level2():
    return _level3()


def _level1():
    return _level2()


def deep_and_direct(x):
    return x * _level1() * _factor()


ALPHA, BETA = 2.0, 3.0


def _scaled_by_sent():
    out = None
    while True:
        x, factor = yield out
        out = x * factor            # the framework call is made from the generator's frame


class _Sender:
    """Methods are not followed by the walk before the trace: only the stack walk sees them."""

    def send_alpha(self, gen, x):
        return gen.send((x, ALPHA))

    def send_beta(self, gen, x):
        return gen.send((x, BETA))


SENDER = _Sender()


def sends_through_a_generator(x):
    gen = _scaled_by_sent()
    next(gen)
    return SENDER.send_alpha(gen, x) + SENDER.send_beta(gen, x)


@pytest.mark.parametrize("fn, name, value, expected", [
    (deep_and_direct, "FACTOR", 3.0, lambda x: x * 3.0 * 3.0),
    (sends_through_a_generator, "BETA", 5.0, lambda x: x * 2.0 + x * 5.0)])
def test_reads_found_once_per_trace_are_found_from_every_place(fn, name, value, expected):
    """Reads are handled once per trace, and a stack walk stops at a frame an earlier call
    walked from. Still checked: `_factor`, read three levels down (not followed there) and again
    by the function itself; a method resuming a generator whose frame an earlier call walked
    from another method (a generator's frame has other frames below it at each resumption)."""
    lazy = lazytrace.trace_graph(fn)
    x = torch.rand(3)
    assert torch.equal(lazy(x), fn(x))
    globals()[name] = value
    assert torch.equal(lazy(x), expected(x)) and lazy.stats.traces == 2


GLOBAL_RANDOM = random.Random(0)
GLOBAL_GENERATOR = np.random.default_rng(0)
GLOBAL_TORCH_GENERATOR = torch.Generator().manual_seed(0)


def _draw_python(x):
    return x * GLOBAL_RANDOM.random()


def _draw_numpy(x):
    return x * GLOBAL_GENERATOR.random()


def _draw_torch(x):
    return x * torch.rand(1, generator=GLOBAL_TORCH_GENERATOR).item()


def _hold_generator(x):
    return x * 2 if GLOBAL_GENERATOR is not None else x        # read, not drawn from


@pytest.mark.parametrize("draw, make", [
    (_draw_python, torch.rand), (_draw_python, np.random.rand), (_draw_numpy, torch.rand),
    (_draw_numpy, np.random.rand), (_draw_torch, np.random.rand)])
def test_draws_from_a_generator_object_held_by_a_global_are_not_baked(draw, make):
    """A random.Random, np.random.Generator (or, in a NumPy function, torch.Generator) held by a
    global is no argument and no framework's global RNG: its draws were baked as the first
    call's value. The signature runs eagerly; include_generators=False bakes as asked."""
    lazy, x = lazytrace.trace_graph(draw), make(3)
    outs = [lazy(x) for _ in range(3)]
    assert not np.array_equal(np.asarray(outs[1]), np.asarray(outs[2]))
    assert lazy.stats.hits == 0 and "lazytrace does not record" in next(iter(lazy.stats.reasons))
    baked = lazytrace.trace_graph(draw, include_generators=False)
    assert np.array_equal(np.asarray(baked(x)), np.asarray(baked(x))) and baked.stats.hits == 1
    holding = lazytrace.trace_graph(_hold_generator)
    assert [np.array_equal(np.asarray(holding(x)), np.asarray(x * 2)) for _ in range(3)] == [True] * 3
    assert holding.stats.hits == 2


def _shifted(x, shift=0.0):
    return x + shift


SHIFT = functools.partial(_shifted, shift=1.0)


def _calls_the_global_partial(x):
    return SHIFT(x) * 2


def test_a_partial_held_by_a_global_has_its_keywords_checked():
    """`SHIFT = partial(f, shift=1.0)` called by the traced function: its keywords changed in
    place (`SHIFT.keywords["shift"] = 3.0`) were baked; only a traced partial's were checked."""
    lazy = lazytrace.trace_graph(_calls_the_global_partial)
    try:
        for step, shift in enumerate([1.0, 1.0, 3.0, 3.0]):
            SHIFT.keywords["shift"] = shift
            x = torch.rand(3)
            assert torch.equal(lazy(x), (x + shift) * 2)
        assert lazy.stats.traces == 2 and lazy.stats.hits == 2
    finally:
        SHIFT.keywords["shift"] = 1.0


def _late_global(x):
    try:
        return x * LATE_SCALE        # noqa: F821 (set later by the test)
    except NameError:
        return abs(x)


def test_a_global_set_after_the_trace_is_seen():
    """A global the function read while it did not exist (a name set later, a builtin's name
    shadowed later by a module global) is checked at every call, one check per module."""
    lazy = lazytrace.trace_graph(_late_global)
    for _ in range(2):
        x = torch.rand(3) - 0.5
        assert torch.equal(lazy(x), x.abs())
    assert lazy.stats.hits == 1
    try:
        globals()["abs"] = torch.neg            # shadows the builtin for this module
        for _ in range(3):
            y = torch.rand(3) - 0.5
            assert torch.equal(lazy(y), -y)
        del globals()["abs"]
        globals()["LATE_SCALE"] = 3.0
        for _ in range(3):
            y = torch.rand(3)
            assert torch.equal(lazy(y), y * 3.0)
    finally:
        globals().pop("LATE_SCALE", None)
        globals().pop("abs", None)
    y = torch.rand(3) - 0.5
    assert torch.equal(lazy(y), y.abs())
    checks = [line for line in lazy.graph_for(y).source.splitlines() if "'LATE_SCALE' in" in line]
    assert len(checks) == 1 and "'abs' in" in checks[0]         # one line per module


class _Jitter:
    def __init__(self):
        self.rng = random.Random(3)

    def __call__(self, x):
        return x * self.rng.random()


def _draw_from(x, generator):
    if isinstance(generator, torch.Generator):
        return x * torch.rand(1, generator=generator).item()
    return x * generator.random()


@pytest.mark.parametrize("make, generator", [
    (torch.rand, lambda: np.random.default_rng(0)), (np.random.rand, lambda: torch.Generator().manual_seed(0))])
def test_another_frameworks_generator_passed_in_is_not_baked(make, generator):
    """A np.random.Generator passed to a torch function (its draws were baked), a torch.Generator
    passed to a NumPy function (handed to torch inside a proxy, which aborted the process)."""
    lazy, x, gen = lazytrace.trace_graph(_draw_from), make(3), generator()
    outs = [lazy(x, gen) for _ in range(3)]
    assert not np.array_equal(np.asarray(outs[1]), np.asarray(outs[2]))
    assert lazy.stats.hits == 0 and "passed in (another framework's)" in next(iter(lazy.stats.reasons))


def test_a_generator_held_by_a_traced_objects_attribute_is_not_baked():
    """trace_graph(obj) records obj's attributes: a random.Random it holds was read by identity
    and its draws baked."""
    lazy, x = lazytrace.trace_graph(_Jitter()), torch.rand(3)
    outs = [lazy(x) for _ in range(3)]
    assert not torch.equal(outs[1], outs[2])
    assert lazy.stats.hits == 0 and "held by attribute 'rng'" in next(iter(lazy.stats.reasons))


def test_a_global_set_through_a_module_is_a_change(temp_library):
    """`config.LAST = y` (a module imported at the top, in the body, or first imported by the
    call itself): only reads through modules were watched, so a graph replayed without the
    write and the module kept the first call's value."""
    store, _ = temp_library("LAST = None\n")
    fresh, _ = temp_library("LAST = None\n")
    lib = __import__(temp_library(f"""
import {store} as store

def at_top(x):
    store.LAST = x * 2
    return x + 1

def in_body(x):
    import {store} as again
    again.LAST = x * 3
    return x + 1

def first_import(x):
    import {fresh} as new
    new.LAST = x * 4
    return x + 1
""")[0])
    for name, factor, module in [("at_top", 2, store), ("in_body", 3, store), ("first_import", 4, fresh)]:
        lazy = lazytrace.trace_graph(getattr(lib, name))
        for _ in range(3):
            x = torch.rand(3)
            assert torch.equal(lazy(x), x + 1) and torch.equal(sys.modules[module].LAST, x * factor), name
        assert lazy.stats.hits == 0 and "'LAST'" in next(iter(lazy.stats.reasons)), name


def _make_boxed():
    box = [None]

    def helper(v):
        box[0] = v * 4
        return v
    return helper, box


_BOXED, _BOX = _make_boxed()
_LOCAL = __import__("threading").local()


def _fills_helper_closure(x):
    return _BOXED(x) + 1


def _fills_thread_local(x):
    _LOCAL.last = x * 5
    return x + 1


def _fills_default(x, history=[]):      # noqa: B006 - the mutable default is the point
    history.append(x * 6)
    return x + 1


def test_what_a_numpy_function_leaves_behind_holds_arrays_and_is_replayed_or_eager():
    """A helper's closure list filled with an array (comparing it after the trace raised
    'truth value of an array is ambiguous'), a threading.local attribute (not watched: later
    calls left the first call's tracer), a list default appended to (tracers left in it)."""
    for fn, where in [(_fills_helper_closure, lambda: _BOX[0]), (_fills_thread_local, lambda: _LOCAL.last),
                      (_fills_default, lambda: _fills_default.__defaults__[0][-1])]:
        lazy = lazytrace.trace_graph(fn)
        factor = {_fills_helper_closure: 4, _fills_thread_local: 5, _fills_default: 6}[fn]
        for seed in range(3):
            x = np.random.default_rng(seed).random(3)
            assert np.array_equal(lazy(x), x + 1)
            assert type(where()) is np.ndarray and np.array_equal(where(), x * factor), fn.__name__
        assert lazy.stats.hits == 0, fn.__name__

SIGNED = [0.0]
SIGNED_CONFIG = types.SimpleNamespace(gain=0.0)
SIGNED_TABLE = {"gain": 0.0}


@pytest.mark.parametrize("holder", ["list", "attribute", "dict"])
def test_the_sign_of_a_zero_held_in_a_container_or_attribute_is_guarded(holder):
    """0.0 == -0.0, yet 1 / (x * v) tells them apart: a float zero inside a global list or dict,
    or among an object's attributes, is compared with its sign (reads.SignedZero)."""
    def fn(x):
        return 1 / (x * (SIGNED[0] if holder == "list" else SIGNED_CONFIG.gain if holder == "attribute"
                         else SIGNED_TABLE["gain"]))

    lazy = lazytrace.trace_graph(fn)
    try:
        for value in (0.0, -0.0, -0.0, 0.0, 0.0):
            SIGNED[0] = SIGNED_CONFIG.gain = SIGNED_TABLE["gain"] = value
            x = torch.rand(3) + 1
            assert torch.equal(lazy(x), fn(x))
        assert lazy.stats.traces == 2 and lazy.stats.hits == 3      # one variant per sign
    finally:
        SIGNED[0] = SIGNED_CONFIG.gain = SIGNED_TABLE["gain"] = 0.0


COMPLEX_ZERO = 0j
COMPLEX_TABLE = [0j]


@pytest.mark.parametrize("holder", ["global", "list"])
def test_the_signs_of_a_complex_numbers_zero_parts_are_guarded(holder):
    """complex(-0.0, 0) == 0j, yet atan2(0, z.real) is pi, not 0: a complex global (or one in a
    global list) whose zero part changed sign traces again (reads._zero_sign, SignedZero)."""
    import math

    def fn(x):
        z = COMPLEX_ZERO if holder == "global" else COMPLEX_TABLE[0]
        return x + math.atan2(0.0, z.real) + math.atan2(z.imag, -1.0)

    global COMPLEX_ZERO
    lazy = lazytrace.trace_graph(fn)
    try:
        for value in (0j, complex(-0.0, 0.0), complex(-0.0, 0.0), complex(0.0, -0.0), 0j):
            COMPLEX_ZERO = COMPLEX_TABLE[0] = value
            x = torch.rand(3)
            assert torch.equal(lazy(x), fn(x)), value
        assert lazy.stats.traces == 3 and lazy.stats.hits == 2      # one variant per pair of signs
    finally:
        COMPLEX_ZERO = COMPLEX_TABLE[0] = 0j


def test_a_complex_signed_zero_is_stored_and_loaded_with_its_signs():
    from lazytrace.graph.reads import SignedZero
    from lazytrace.persist import codec
    value = SignedZero(complex(-0.0, 0.0))
    assert value == complex(-0.0, 0.0) and value != 0j and value != complex(0.0, -0.0)
    doc = codec._Encoder(None, {})([value, 1j])         # no arrays: the backend is not asked
    loaded = codec._Decoder(None, {}, {})(doc)
    assert type(loaded[0]) is SignedZero and loaded[0] == complex(-0.0, 0.0) and loaded[0] != 0j



def through_a_chain_of_helpers(x):
    return x * _level1()            # FACTOR is read four pure-Python calls below, before the framework call


def test_a_global_read_four_pure_python_calls_below_is_checked(fw):
    global FACTOR
    before = FACTOR
    lazy = lazytrace.trace_graph(through_a_chain_of_helpers)
    try:
        for factor in (before, before, before + 2.0, before + 2.0):
            FACTOR = factor
            x = fw.rand(3)
            assert fw.equal(lazy(x), through_a_chain_of_helpers(x))
        assert lazy.stats.traces == 2 and lazy.stats.hits == 2
    finally:
        FACTOR = before

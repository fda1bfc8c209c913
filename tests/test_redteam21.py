"""Red team of session 21's checks of the user's code replaced in place (homes.held_code): what a
reloader (IPython's %autoreload, jurigged, a hand-set `__code__` or `__defaults__`) changes after a
trace that a graph did not see, and what the checks cost an autoreload session."""
import importlib
import os
import textwrap

import numpy as np
import pytest
import torch

import lazytrace


def _module(temp_library, source):
    name, _ = temp_library(textwrap.dedent(source))
    importlib.invalidate_caches()
    return importlib.import_module(name)


def _equal_before_and_after(lazy, eager, change, make=lambda: np.random.rand(4)):
    """lazy(x) == eager(x) on new inputs twice, then after change() twice more: one more trace."""
    for changed in (False, True):
        if changed:
            change()
        for _ in range(2):
            x = make()
            np.testing.assert_array_equal(np.asarray(lazy(x)), np.asarray(eager(x)))
    assert lazy.stats.traces == 2 and lazy.stats.hits == 2 and lazy.stats.eager == 0, lazy.stats


DECO = '''
import functools

def deco(f):
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        return f(*args, **kwargs)
    return wrapper
'''

DECORATED = DECO + '''
import numpy as np

@deco
def helper(x):
    return x * 2.0

def run(x):
    return helper(np.sin(x))

@deco
def decorated_run(x):
    return np.sin(x) * 2.0
'''


def test_a_decorated_helpers_inner_code_replaced_is_seen(temp_library):
    """jurigged (and a hand edit) sets the code of the function the decorator wrapped: the
    wrapper's closure cell holds it, which nothing checked (the wrapper's code is the same)."""
    lib = _module(temp_library, DECORATED)
    lazy = lazytrace.trace_graph(lib.run)
    _equal_before_and_after(lazy, lib.run,
                            lambda: setattr(lib.helper.__wrapped__, "__code__", (lambda x: x * 3.0).__code__))
    assert f"{lib.__name__}.helper" in lazy.explain()


def test_a_decorated_traced_functions_inner_code_replaced_is_seen(temp_library):
    """The traced function itself decorated: LazyGraph checks the wrapper's code, not the inner one's."""
    lib = _module(temp_library, DECORATED)
    lazy = lazytrace.trace_graph(lib.decorated_run)
    _equal_before_and_after(lazy, lib.decorated_run, lambda: setattr(
        lib.decorated_run.__wrapped__, "__code__", (lambda x: np.sin(x) * 3.0).__code__))


def test_a_helper_under_torch_no_grad_has_its_code_checked(temp_library):
    """An installed decorator's wrapper (torch's, under site-packages, not checked itself) holds the
    user's function: followed through __wrapped__."""
    lib = _module(temp_library, '''
    import torch

    @torch.no_grad()
    def helper(x):
        return x * 2.0

    def run(x):
        return helper(torch.sin(x))
    ''')
    lazy = lazytrace.trace_graph(lib.run)
    _equal_before_and_after(lazy, lib.run,
                            lambda: setattr(lib.helper.__wrapped__, "__code__", (lambda x: x * 3.0).__code__),
                            make=lambda: torch.rand(4))


@pytest.mark.parametrize("holder", ["dict", "list"])
def test_a_lambda_held_in_a_global_container_has_its_code_checked(temp_library, holder):
    """`OPS["double"](x)`: the guard of OPS compares its items by identity (a copy holding them),
    which held_code did not look into."""
    lib = _module(temp_library, '''
    import numpy as np
    OPS = {"double": lambda x: x * 2.0}
    LIST = [lambda x: x * 2.0]

    def run_dict(x):
        return OPS["double"](np.sin(x))

    def run_list(x):
        for op in LIST:
            x = op(x)
        return np.sin(x)
    ''')
    fn = getattr(lib, f"run_{holder}")
    op = lib.OPS["double"] if holder == "dict" else lib.LIST[0]
    lazy = lazytrace.trace_graph(fn)
    _equal_before_and_after(lazy, fn, lambda: setattr(op, "__code__", (lambda x: x * 3.0).__code__))


def test_a_helper_bound_as_a_default_value_has_its_code_checked(temp_library):
    """`def run(x, f=helper)`: LazyGraph checks run's __defaults__ by identity, not helper's code."""
    lib = _module(temp_library, '''
    import numpy as np

    def helper(x):
        return x * 2.0

    def run(x, f=helper):
        return f(np.sin(x))
    ''')
    lazy = lazytrace.trace_graph(lib.run)
    _equal_before_and_after(lazy, lib.run, lambda: setattr(lib.helper, "__code__", (lambda x: x * 3.0).__code__))


@pytest.mark.parametrize("attribute, value", [("__defaults__", (3.0,)), ("__kwdefaults__", {"k": 3.0})])
def test_a_helpers_default_values_replaced_are_seen(temp_library, attribute, value):
    """The graph baked the helper's default (2.0) as a constant; the traced function's own
    defaults replaced were seen, a helper's were not."""
    lib = _module(temp_library, '''
    import numpy as np

    def helper(x, k=2.0):
        return x * k

    def helper_kw(x, *, k=2.0):
        return x * k

    def run(x):
        return helper(np.sin(x))

    def run_kw(x):
        return helper_kw(np.sin(x))
    ''')
    fn, helper = (lib.run, lib.helper) if attribute == "__defaults__" else (lib.run_kw, lib.helper_kw)
    lazy = lazytrace.trace_graph(fn)
    _equal_before_and_after(lazy, fn, lambda: setattr(helper, attribute, value))


def test_an_lru_cached_helpers_code_is_checked(temp_library):
    """functools.lru_cache's wrapper is C: the function it wraps (its __wrapped__) is followed."""
    lib = _module(temp_library, '''
    import functools
    import numpy as np

    @functools.lru_cache(maxsize=None)
    def gain(n):
        return float(n) * 2.0

    def run(x):
        return np.sin(x) * gain(x.shape[0])
    ''')
    lazy = lazytrace.trace_graph(lib.run)

    def edit():
        lib.gain.__wrapped__.__code__ = (lambda n: float(n) * 3.0).__code__
        lib.gain.cache_clear()
    _equal_before_and_after(lazy, lib.run, edit)


def test_a_compiled_graph_checks_a_decorated_helpers_code_and_defaults(temp_library):
    jax = pytest.importorskip("jax")
    lib = _module(temp_library, DECO + '''
import jax.numpy as jnp

@deco
def helper(x, k=2.0):
    return x * k

def run(x):
    return helper(jnp.sin(x))
''')
    make = lambda: jax.numpy.asarray(np.random.rand(4).astype(np.float32))     # noqa: E731
    lazy = lazytrace.trace_graph(lib.run, return_backend_traced_fn=True)
    _equal_before_and_after(lazy, lib.run, lambda: setattr(lib.helper.__wrapped__, "__defaults__", (3.0,)), make)
    lazy = lazytrace.trace_graph(lib.run, return_backend_traced_fn=True)
    _equal_before_and_after(lazy, lib.run, lambda: setattr(
        lib.helper.__wrapped__, "__code__", (lambda x, k: x + k).__code__), make)


HELPERS = '''
def scale(x):
    return x * {gain}
'''

PIPELINE = '''
import numpy as np
from {helpers} import scale

def run(x):
    return scale(np.sin(x))
'''


def _edit(folder, name, source):
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    stamp = os.stat(path).st_mtime + 10 * (1 + len(path.read_text()) % 7)      # a new mtime: reloaders compare it
    os.utime(path, (stamp, stamp))


def test_an_autoreload_session_editing_a_helper_many_times_keeps_replaying(temp_library):
    """Each edit (IPython's ModuleReloader) made the old graph fail at every call and added a
    variant: after MAX_VARIANTS edits the signature ran eagerly for good, and every miss tried
    each stale graph first."""
    autoreload = pytest.importorskip("IPython.extensions.autoreload")
    helpers, folder = temp_library(HELPERS.format(gain=2.0))
    pipeline, _ = temp_library(PIPELINE.format(helpers=helpers))
    importlib.invalidate_caches()
    importlib.import_module(helpers)
    lib = importlib.import_module(pipeline)
    reloader = autoreload.ModuleReloader()
    reloader.enabled = True
    reloader.check()
    lazy = lazytrace.trace_graph(lib.run)
    edits = 6
    for gain in range(edits + 1):
        if gain:
            _edit(folder, helpers, HELPERS.format(gain=float(gain + 2)))
            reloader.check()
        for _ in range(2):
            x = np.random.rand(3)
            np.testing.assert_array_equal(lazy(x), lib.run(x))
    stats = lazy.stats
    assert (stats.traces, stats.hits, stats.eager, stats.guard_failures) == (edits + 1, edits + 1, 0, edits), stats
    assert len(lazy.graphs) == 1


@pytest.mark.parametrize("change", ["code replaced in place", "global rebound"])
def test_a_variant_traced_before_a_helper_changed_is_not_stored_under_the_new_code(temp_library, tmp_path, change):
    """A key's variants are stored together: the old one was stored again with the code state of
    the store (the new code), so a new LazyGraph loaded it and replayed the old code. The helper's
    code replaced in place, or the global rebound to another named function (a monkeypatch: the
    stored code state of the old variant named the new function)."""
    helpers, _ = temp_library(HELPERS.format(gain=2.0) + "\ndef other(x):\n    return x * 5.0\n")
    pipeline, _ = temp_library(PIPELINE.format(helpers=helpers))
    importlib.invalidate_caches()
    helpers_module, lib = importlib.import_module(helpers), importlib.import_module(pipeline)
    cache = tmp_path / "cache"
    first = lazytrace.trace_graph(lib.run, cache=cache)
    first(np.random.rand(3))
    if change == "code replaced in place":
        helpers_module.scale.__code__ = (lambda x: x * 5.0).__code__
    else:
        lib.scale = helpers_module.other
    x = np.random.rand(3)
    np.testing.assert_array_equal(first(x), lib.run(x))
    assert first.stats.stored == 2 and first.stats.traces == 2
    again = lazytrace.trace_graph(lib.run, cache=cache)
    x = np.random.rand(3)
    np.testing.assert_array_equal(again(x), lib.run(x))
    assert again.stats.loaded >= 1 and again.stats.hits == 1 and again.stats.traces == 0

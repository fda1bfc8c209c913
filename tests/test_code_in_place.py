"""Code replaced in place after a trace: a reloader (IPython's %autoreload, jurigged) sets the
`__code__` of the functions it reloads, so a module that imported a helper by name, or a class
whose method was edited, still holds the same function objects; eager runs the new code. A graph
checks the code of the user's functions it ran (homes.held_code) and traces again."""
import importlib
import os
import sys
import textwrap

import numpy as np
import pytest

import lazytrace

torch = pytest.importorskip("torch")

HELPERS = '''
import numpy as np

def scale(x):
    return x * {gain}

class Norm:
    def apply(self, x):
        return x - {shift}

    @property
    def offset(self):
        return {shift}

    @staticmethod
    def clip(x):
        return np.minimum(x, {top})
'''

PIPELINE = '''
import numpy as np
from {helpers} import scale, Norm

NORM = Norm()

def run(x):
    return NORM.apply(scale(np.sin(x)))

def run_property(x):
    return np.sin(x) + NORM.offset

def run_static(x):
    return Norm.clip(np.sin(x) * 3.0)
'''


def _write(folder, name, source):
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    stamp = os.stat(path).st_mtime + 10 * (1 + len(path.read_text()) % 7)     # a new mtime: reloaders compare it
    os.utime(path, (stamp, stamp))


@pytest.fixture
def project(temp_library):
    """(helpers module, pipeline module, edit(**values)): edit rewrites the helpers' file."""
    helpers, folder = temp_library(HELPERS.format(gain=2.0, shift=1.0, top=0.5))
    pipeline, _ = temp_library(PIPELINE.format(helpers=helpers))
    importlib.invalidate_caches()
    return importlib.import_module(helpers), importlib.import_module(pipeline), \
        lambda **values: _write(folder, helpers, HELPERS.format(**{"gain": 2.0, "shift": 1.0, "top": 0.5, **values}))


def _traced(fn):
    lazy = lazytrace.trace_graph(fn)
    for _ in range(2):
        lazy(np.random.rand(4))
    assert lazy.stats.hits == 1
    return lazy


@pytest.mark.parametrize("fn, change", [
    ("run", {"gain": 5.0}),                 # a helper imported by name: the pipeline's global is the old object
    ("run", {"shift": 3.0}),                # a method of an object made at import
    ("run_property", {"shift": 3.0}),       # a property's getter
    ("run_static", {"top": 0.25}),          # a static method
])
def test_ipython_autoreload_of_a_helper_module_is_seen(project, fn, change):
    autoreload = pytest.importorskip("IPython.extensions.autoreload")
    helpers, pipeline, edit = project
    reloader = autoreload.ModuleReloader()
    reloader.enabled = True
    lazy = _traced(getattr(pipeline, fn))
    old_scale, x = pipeline.scale, np.random.rand(4)
    before = getattr(pipeline, fn)(x)
    edit(**change)
    reloader.check()
    assert pipeline.scale is old_scale          # updated in place: the same function object
    expected = getattr(pipeline, fn)(x)
    assert not np.array_equal(expected, before)     # eager runs the edited code
    np.testing.assert_array_equal(lazy(x), expected)
    assert lazy.stats.guard_failures == 1 and lazy.stats.traces == 2
    np.testing.assert_array_equal(lazy(x), expected)
    assert lazy.stats.hits == 2                 # the new graph replays


def test_the_reason_names_the_function_whose_code_was_replaced(project):
    helpers, pipeline, _ = project
    lazy = _traced(pipeline.run)
    helpers.scale.__code__ = (lambda x: x * 7.0).__code__
    x = np.random.rand(4)
    np.testing.assert_array_equal(lazy(x), pipeline.run(x))
    assert f"replaced in place (a reloader such as IPython's %autoreload): {helpers.__name__}.scale" in lazy.explain()


def test_torch_graph_sees_a_methods_code_replaced_and_gradients_follow(temp_library):
    name, _ = temp_library('''
import torch

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def act(self, x):
        return torch.relu(x)

    def forward(self, x):
        return self.act(self.lin(x))
''')
    lib = importlib.import_module(name)
    block = lib.Block()
    lazy = lazytrace.trace_graph(block)
    x = torch.randn(3, 4, requires_grad=True)
    for _ in range(2):
        lazy(x)
    lib.Block.act.__code__ = (lambda self, x: torch.tanh(x)).__code__
    got, expected = lazy(x), lib.Block.forward(block, x)   # (block.forward is the LazyGraph)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    (g_got,), (g_expected,) = torch.autograd.grad(got.sum(), x), torch.autograd.grad(expected.sum(), x)
    torch.testing.assert_close(g_got, g_expected, rtol=0, atol=0)
    assert block.forward.stats.guard_failures == 1 and "Block.act" in block.forward.explain()


def test_many_helpers_are_checked_and_the_one_replaced_is_named(temp_library):
    source = "import numpy as np\n" + "".join(f"def h{i}(x):\n    return x + {i}.0\n" for i in range(8)) + \
        "def run(x):\n    x = np.sin(x)\n" + "".join(f"    x = h{i}(x)\n" for i in range(8)) + "    return x\n"
    name, _ = temp_library(source)
    lib = importlib.import_module(name)
    lazy = _traced(lib.run)
    (graph,) = lazy.graphs
    assert graph.source.count(".__code__ is not ") == 8      # the helpers (run's own: LazyGraph checks it)
    lib.h5.__code__ = (lambda x: x * 100.0).__code__
    x = np.random.rand(4)
    np.testing.assert_array_equal(lazy(x), lib.run(x))
    assert f"{name}.h5" in lazy.explain() and f"{name}.h4" not in lazy.explain().split("replaced in place")[-1]


def test_code_of_installed_libraries_is_not_checked_at_a_hit():
    kornia = pytest.importorskip("kornia")
    lazy = lazytrace.trace_graph(kornia.filters.gaussian_blur2d)
    x = torch.rand(1, 3, 16, 16)
    for _ in range(2):
        lazy(x, (3, 3), (1.5, 1.5))
    (graph,) = lazy.graphs
    assert "_replaced_code" not in graph.source and "_get" in graph.source     # identity of its helpers only


def test_a_compiled_graph_checks_code_too(temp_library):
    jax = pytest.importorskip("jax")
    name, _ = temp_library('''
import jax.numpy as jnp

def helper(x):
    return x * 2.0

def run(x):
    return helper(jnp.sin(x))
''')
    lib = importlib.import_module(name)
    lazy = lazytrace.trace_graph(lib.run, return_backend_traced_fn=True)
    x = jax.numpy.arange(4.0)
    for _ in range(2):
        lazy(x)
    lib.helper.__code__ = (lambda x: x * 3.0).__code__
    np.testing.assert_array_equal(np.asarray(lazy(x)), np.asarray(lib.run(x)))


IMPORTS_INSIDE = '''
import numpy as np

def run(x):
    import {helpers} as h
    return h.scale(np.sin(x))
'''


@pytest.mark.parametrize("change", ["swap the module", "replace the code in place"])
def test_a_stored_graph_checks_an_imported_module_and_its_helpers_code_after_loading(temp_library, tmp_path,
                                                                                     monkeypatch, change):
    """Loaded in a new LazyGraph, the graph checks which module sys.modules holds for the import in
    the function's body, and the code of the helper it ran."""
    from conftest import stored_once
    helpers, _ = temp_library(HELPERS.format(gain=2.0, shift=1.0, top=0.5))
    other, _ = temp_library(HELPERS.format(gain=5.0, shift=1.0, top=0.5))
    name, _ = temp_library(IMPORTS_INSIDE.format(helpers=helpers))
    lib, helpers_module, other_module = map(importlib.import_module, (name, helpers, other))
    cache = tmp_path / "cache"
    stored_once(lib, "run", cache)
    again = lazytrace.trace_graph(lib.run, cache=cache)
    x = np.random.rand(2)
    np.testing.assert_array_equal(again(x), lib.run(x))
    assert again.stats.loaded == 1 and again.stats.hits == 1
    if change == "swap the module":
        monkeypatch.setitem(sys.modules, helpers, other_module)
    else:
        helpers_module.scale.__code__ = other_module.scale.__code__
    x = np.random.rand(2)
    np.testing.assert_array_equal(again(x), lib.run(x))
    assert again.stats.traces == 1 and again.stats.guard_failures == 1
    assert f"sys.modules.{helpers}" in again.explain() if change == "swap the module" else \
        f"{helpers}.scale" in again.explain()


def test_a_framework_module_imported_in_the_body_is_not_checked():
    def run(x):
        import numpy as xp
        return xp.sin(x) * 2.0
    lazy = _traced(run)
    (graph,) = lazy.graphs
    assert "sys.modules" not in graph.source

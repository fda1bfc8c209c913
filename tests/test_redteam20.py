"""Red team of session 20's checks of code replaced after the trace (commit 52e1dd9): places
holding code that were still not checked (a closure variable rebound by `nonlocal`, a function's
attribute, a class's `__init__` run by a call of the class), checks that raised instead of
missing (a method deleted from a subclass: KeyError out of the graph), checks that could never
pass (two classes of one qualified name), and what must stay storable (a decorator's closure)."""
import sys

import numpy as np
import pytest

import lazytrace
from conftest import replacement_retraces, stored_once

torch = pytest.importorskip("torch")

LIBRARY = '''
import dataclasses
import functools
import numpy as np

K = 2.0


def inner(x):
    return x * 2.0


def _make_closure():
    helper = inner
    def traced(x):
        return helper(np.sin(x)) * K
    def rebind(other):
        nonlocal helper
        helper = other
    return traced, rebind


closure_traced, closure_rebind = _make_closure()


def _make_helper():
    helper = inner
    def apply(x):
        return helper(x) + 1.0
    def rebind(other):
        nonlocal helper
        helper = other
    return apply, rebind


apply, apply_rebind = _make_helper()


def through_held_closure(x):
    return apply(np.sin(x))


def with_attribute(x):
    return with_attribute.impl(np.sin(x))


with_attribute.impl = inner


def _decorate(f):
    @functools.wraps(f)
    def wrapper(x):
        return f(x) + 1.0
    return wrapper


@_decorate
def decorated(x):
    return np.sin(x)


def through_wrapped(x):
    return decorated.__wrapped__(x)


def through_decorated(x):
    return decorated(x) * 2.0


class Net:
    def __init__(self):
        self.k = K          # no framework call: no stack shows it

    def forward(self, x):
        return np.sin(x) * self.k


def made_in_the_call(x):
    return Net().forward(x)


@dataclasses.dataclass
class Settings:
    k: float = 1.0
    SHIFT = 0.5

    def __post_init__(self):
        self.k = self.k * K + self.SHIFT


def dataclass_made_in_the_call(x):
    return np.sin(x) * Settings().k


COUNT = 0


class Counted:
    def __init__(self):
        global COUNT
        COUNT += 1          # a counter other code moves


def names_a_class(x):
    return np.sin(x) * (2.0 if isinstance(x, Counted) else 3.0)


class Helper:
    @staticmethod
    def static(x):
        return np.sin(x) * 2.0


def _get():
    return Helper()


def static_on_made(x):
    return _get().static(x)      # on the stack only, without a `self` naming its class


def _factory(k):
    class Made:
        def scale(self, x):
            return np.sin(x) * k
    return Made()


FIRST, SECOND = _factory(2.0), _factory(3.0)


def two_classes_of_one_name(x):
    return FIRST.scale(x) + SECOND.scale(x)
'''


@pytest.fixture
def lib(temp_library):
    name, _ = temp_library(LIBRARY)
    return __import__(name)


def _times(k):
    return lambda x: x * k


REPLACED = {
    "a closure variable of the traced function rebound by nonlocal":
        ("closure_traced", lambda lib: lib.closure_rebind(_times(5.0))),
    "a closure variable of a helper rebound by nonlocal":
        ("through_held_closure", lambda lib: lib.apply_rebind(_times(5.0))),
    "a function attribute holding a helper": ("with_attribute", lambda lib: setattr(lib.with_attribute, "impl",
                                                                                    _times(5.0))),
    "__wrapped__ set on a decorated function": ("through_wrapped", lambda lib: setattr(lib.decorated, "__wrapped__",
                                                                                       np.cos)),
    "__init__ of a class called in the call": ("made_in_the_call", lambda lib: setattr(
        lib.Net, "__init__", lambda self: setattr(self, "k", 5.0))),
    "a global read by __init__ of a class called in the call": ("made_in_the_call",
                                                                lambda lib: setattr(lib, "K", 5.0)),
    "a global read by a dataclass's __post_init__": ("dataclass_made_in_the_call", lambda lib: setattr(lib, "K", 5.0)),
    "a static method of an object made in the call": ("static_on_made", lambda lib: setattr(
        lib.Helper, "static", staticmethod(_times(5.0)))),
    "__post_init__ replaced": ("dataclass_made_in_the_call", lambda lib: setattr(
        lib.Settings, "__post_init__", lambda self: None)),
    "a class attribute read through self by __post_init__": ("dataclass_made_in_the_call",
                                                             lambda lib: setattr(lib.Settings, "SHIFT", 0.25)),
}


@pytest.mark.parametrize("case", REPLACED)
def test_code_replaced_after_the_trace_traces_again(case, lib):
    """Each returned the first trace's result on 07a2810 (silently wrong)."""
    assert replacement_retraces(lib, *REPLACED[case]).stats.eager == 0


def test_a_class_named_but_not_called_keeps_its_graph_when_what_its_init_reads_changes(lib):
    """Only a class the code calls has its __init__ walked: `isinstance(x, Counted)` does not
    make the graph check the counter Counted.__init__ moves."""
    lazy = lazytrace.trace_graph(lib.names_a_class)
    for _ in range(3):
        lib.Counted()
        x = np.random.rand(3)
        np.testing.assert_array_equal(lazy(x), lib.names_a_class(x))
    assert lazy.stats.traces == 1 and lazy.stats.hits == 2, lazy.stats


def test_a_closure_helper_rebound_between_variants_is_seen_by_the_variant_fast_path(lib):
    """A global changed (a second variant, which gets the fast path), then the closure's helper
    rebound, then the global back: each state's graph, never another's."""
    lazy = lazytrace.trace_graph(lib.closure_traced)
    steps = [None, lambda: setattr(lib, "K", 3.0), lambda: lib.closure_rebind(_times(5.0)),
             lambda: setattr(lib, "K", 2.0), lambda: lib.closure_rebind(lib.inner)]
    for step in steps:
        if step:
            step()
        for _ in range(3):
            x = np.random.rand(3)
            np.testing.assert_array_equal(lazy(x), lib.closure_traced(x))
    assert lazy.stats.traces == 4 and lazy.stats.eager == 0, lazy.stats


def test_an_emptied_closure_variable_raises_what_eager_raises():
    def helper(x):
        return torch.sin(x)

    def make():
        fn = helper

        def traced(x):
            return fn(x) * 2

        def clear():
            nonlocal fn
            del fn
        return traced, clear
    traced, clear = make()
    lazy = lazytrace.trace_graph(traced)
    x = torch.rand(3)
    assert torch.equal(lazy(x), traced(x)) and torch.equal(lazy(x), traced(x))
    clear()
    with pytest.raises(NameError):
        lazy(x)


class _Base:
    def scale(self, x):
        return torch.sin(x) * 2.0


class _Sub(_Base):
    def scale(self, x):
        return torch.cos(x) * 3.0


_SUB = _Sub()


def _writes_then_scales(x):
    x.add_(1.0)                 # a visible effect: a graph that raises cannot hand over to eager
    return _SUB.scale(x)


def test_a_method_deleted_from_a_subclass_traces_again_instead_of_raising_key_error():
    """`del Sub.scale`: eager finds Base.scale; the graph's check read the subclass's namespace
    with [] and raised KeyError out of the call on 07a2810."""
    lazy = lazytrace.trace_graph(_writes_then_scales)
    for _ in range(2):
        lazy(torch.rand(3))
    saved = _Sub.scale
    del _Sub.scale
    try:
        for _ in range(2):
            x = torch.rand(3)
            expected = x.clone()
            assert torch.equal(lazy(x), _writes_then_scales(expected)) and torch.equal(x, expected)
    finally:
        _Sub.scale = saved
    assert lazy.stats.traces == 2 and lazy.stats.eager == 0, lazy.stats


def _gone(x):
    return torch.sin(x)


def _calls_gone(x):
    x.add_(1.0)
    return _gone(x)


def test_a_helper_deleted_by_monkeypatch_raises_the_name_error_eager_raises(monkeypatch):
    lazy = lazytrace.trace_graph(_calls_gone)
    for _ in range(2):
        lazy(torch.rand(3))
    monkeypatch.delattr(sys.modules[__name__], "_gone")
    with pytest.raises(NameError):
        lazy(torch.rand(3))


def test_two_classes_of_one_qualified_name_keep_their_graph(lib):
    """Two objects of classes made by one factory (`_factory.<locals>.Made`): their namespaces'
    checks were merged under the one name, so one of them always failed on 07a2810: a trace at
    every call, then eager."""
    lazy = lazytrace.trace_graph(lib.two_classes_of_one_name)
    for _ in range(4):
        x = np.random.rand(3)
        np.testing.assert_array_equal(lazy(x), lib.two_classes_of_one_name(x))
    assert lazy.stats.traces == 1 and lazy.stats.hits == 3 and lazy.stats.eager == 0, lazy.stats


def test_a_decorators_closure_does_not_keep_its_graph_from_being_stored(lib, tmp_path):
    """The decorator's `f` is a parameter nothing rebinds (reads._rebindable): not a cell check,
    which has no stored form."""
    stored_once(lib, "through_decorated", tmp_path / "cache")
    again = lazytrace.trace_graph(lib.through_decorated, cache=tmp_path / "cache")
    x = np.random.rand(2)
    np.testing.assert_array_equal(again(x), lib.through_decorated(x))
    assert again.stats.loaded == 1 and again.stats.hits == 1, again.stats


def test_kornia_graphs_calling_super_in_their_exceptions_stay_stored(tmp_path):
    """kornia's exception classes call super() (a `__class__` closure cell, never rebound)."""
    kornia = pytest.importorskip("kornia")
    lazy = lazytrace.trace_graph(kornia.color.rgb_to_grayscale, cache=tmp_path / "cache")
    lazy(torch.rand(1, 3, 8, 8))
    assert lazy.stats.stored == 1, lazy.stats.not_stored


HELPERS_CODE = '''
import numpy as np

def inner(x):
    return x * 2.0

def outer(x):
    return inner(np.sin(x))

def local_import(x):
    import {helpers} as h
    return h.inner(np.sin(x))
'''


def test_a_helpers_code_replaced_in_place_is_seen(temp_library):
    name, _ = temp_library(HELPERS_CODE.replace("{helpers}", "numpy"))
    lib = __import__(name)
    lazy = lazytrace.trace_graph(lib.outer)
    for _ in range(2):
        lazy(np.random.rand(3))
    lib.inner.__code__ = (lambda x: x * 5.0).__code__
    x = np.random.rand(3)
    np.testing.assert_array_equal(lazy(x), lib.outer(x))


def test_a_module_swapped_in_sys_modules_for_an_import_inside_is_seen(temp_library, monkeypatch):
    helpers, _ = temp_library("def inner(x):\n    return x * 2.0\n")
    other, _ = temp_library("def inner(x):\n    return x * 5.0\n")
    name, _ = temp_library(HELPERS_CODE.replace("{helpers}", helpers))
    lib = __import__(name)
    __import__(helpers), __import__(other)
    lazy = lazytrace.trace_graph(lib.local_import)
    for _ in range(2):
        lazy(np.random.rand(3))
    monkeypatch.setitem(sys.modules, helpers, sys.modules[other])
    x = np.random.rand(3)
    np.testing.assert_array_equal(lazy(x), lib.local_import(x))


METACLASS_GETATTR = '''
import numpy as np


class Meta(type):
    def __getattr__(cls, name):         # answers every name, `__next__` too
        return 2.0


class Gain(metaclass=Meta):
    def run(self, x):
        return np.sin(x)


GAIN = Gain()


def scaled(x):
    return GAIN.run(x) * Gain.anything
'''


def test_an_object_whose_metaclass_answers_every_name_is_no_iterator(temp_library):
    """hasattr(type, "__next__") asked the metaclass's __getattr__: the object was taken for an
    iterator whose position cannot be read, and the function ran eagerly at every call on 07a2810
    (next() looks `__next__` up in the type's namespaces)."""
    name, _ = temp_library(METACLASS_GETATTR)
    lib = __import__(name)
    lazy = lazytrace.trace_graph(lib.scaled)
    for _ in range(3):
        x = np.random.rand(3)
        np.testing.assert_array_equal(lazy(x), lib.scaled(x))
    assert lazy.stats.traces == 1 and lazy.stats.hits == 2 and lazy.stats.eager == 0, lazy.stats
    lib.Meta.__getattr__ = lambda cls, name: 3.0
    for _ in range(2):
        x = np.random.rand(3)
        np.testing.assert_array_equal(lazy(x), lib.scaled(x))
    assert lazy.stats.traces == 2 and lazy.stats.eager == 0, lazy.stats

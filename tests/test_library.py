"""trace_graph(module): proxy modules, one LazyGraph per function, traced classes."""
import copy
import inspect
import pickle
import pydoc
import sys
import types

import pytest
import torch

import fakelib
import lazytrace
from fakelib import blocks, ops
from lazytrace.importhook import ModuleProxy


@pytest.fixture
def traced():
    return lazytrace.trace_graph(fakelib)


def made(proxy) -> int:
    return len(proxy._self_library._made)


def test_module_untouched_and_nothing_made_up_front(traced):
    assert isinstance(traced, ModuleProxy) and isinstance(traced, types.ModuleType)
    assert sys.modules["fakelib"] is fakelib and traced.__wrapped__ is fakelib
    assert made(traced) == 1                          # only the root proxy
    traced.double
    assert made(traced) == 2
    assert type(fakelib.double) is types.FunctionType and type(ops.double) is types.FunctionType


def test_trace_graph_of_kornia_makes_nothing_up_front():
    kornia = pytest.importorskip("kornia")
    traced = lazytrace.trace_graph(kornia)
    assert made(traced) == 1
    blur = traced.filters.gaussian_blur2d
    assert made(traced) == 3 and isinstance(blur, lazytrace.LazyGraph)


def test_functions_are_lazygraphs_equal_to_eager_on_new_inputs(traced, torch_fw):
    f = traced.ops.add_scaled
    assert isinstance(f, lazytrace.LazyGraph)
    f(torch_fw.rand(4, seed=0), torch_fw.rand(4, seed=1), 0.5)
    x, y = torch_fw.rand(4, seed=2), torch_fw.rand(4, seed=3)
    assert torch.equal(f(x, y, 0.5), ops.add_scaled(x, y, 0.5))
    assert f.stats.traces == 1 and f.stats.hits == 1


def test_reexported_function_is_one_lazygraph(traced, torch_fw):
    assert traced.double is traced.ops.double
    traced.double(torch_fw.rand(3))
    traced.ops.double(torch_fw.rand(3))
    assert traced.ops.double.stats.traces == 1 and traced.double.stats.hits == 1


def test_submodules_are_proxies(traced, torch_fw):
    assert isinstance(traced.sub, ModuleProxy) and traced.sub.__wrapped__ is fakelib.sub
    assert isinstance(traced.sub.deep, ModuleProxy)
    x = torch_fw.rand(5)
    assert torch.equal(traced.sub.deep.halve(x), x / 2)
    assert traced.sub.halve is traced.sub.deep.halve


def test_options_apply_to_every_function(torch_fw):
    traced = lazytrace.trace_graph(fakelib, max_signatures=1, static_argnames="scale")
    f = traced.add_scaled
    f(torch_fw.rand(2), torch_fw.rand(2), scale=2.0)
    f(torch_fw.rand(3), torch_fw.rand(3), scale=2.0)
    assert len(f.graphs) == 1 and f.max_signatures == 1
    assert f._signature.static_argnames == {"scale"}


def test_other_objects_pass_through(traced):
    assert traced.SCALE == 2.5 and traced.Mode is fakelib.Mode and traced.Mode.FAST is fakelib.Mode.FAST
    assert traced.__all__ == fakelib.__all__ and dir(traced) == dir(fakelib)
    assert traced.__doc__ == fakelib.__doc__ and traced.__name__ == "fakelib"
    assert traced.ops._private is ops._private
    assert inspect.signature(traced.add_scaled) == inspect.signature(ops.add_scaled)
    assert traced.double.__doc__ == ops.double.__doc__ and traced.double.__name__ == "double"
    assert "Twice x." in pydoc.render_doc(traced.double)
    assert "double" in pydoc.render_doc(traced)
    assert inspect.signature(traced.Doubler) == inspect.signature(blocks.Doubler)


def test_untraceable_functions_run_eagerly_with_the_reason(traced, torch_fw):
    x = torch_fw.rand(3)
    assert torch.equal(traced.make_ones(3), torch.ones(3))           # no array inputs
    assert traced.describe(x).size == 3 and torch.equal(traced.describe(x).total, x.sum())
    assert traced.count_up is ops.count_up                           # generator: the original
    assert [v.tolist() for v in traced.count_up(torch.zeros(1), 2)] == [[0.0], [1.0]]
    with pytest.raises(ValueError, match="always fails"):
        traced.fails(x)
    with pytest.raises(ValueError, match="always fails"):
        traced.fails(x)
    assert traced.fails.graphs == [] and traced.fails.stats.reasons["the function raised ValueError"] == 2
    summary = traced._self_library.summary()
    reasons = summary["reasons"]
    assert any("no array arguments" in r for r in reasons)
    assert any("returns a SimpleNamespace" in r for r in reasons)
    assert traced.cached_table is ops.cached_table and traced.cached_table(3) == [0, 1, 2]
    assert summary["skipped"] == {"fakelib.ops.count_up": "generator function: runs as the original"}
    assert traced._self_library.skipped["fakelib.cached_table"] == (
        "not a Python function (_lru_cache_wrapper): used as is")
    assert traced.describe.stats.eager == 2 and traced.describe.stats.hits == 0


def test_include_and_exclude_patterns(torch_fw):
    traced = lazytrace.trace_graph(fakelib, include=["fakelib.ops.*"], exclude=["*.outer"])
    assert isinstance(traced.double, lazytrace.LazyGraph)
    assert traced.outer is ops.outer and traced.sub.halve is fakelib.sub.halve
    skipped = traced._self_library.summary()["skipped"]
    assert skipped == {"fakelib.ops.outer": "matched by exclude=", "fakelib.sub.deep.halve": "not matched by include="}
    with pytest.raises(TypeError, match="include"):
        lazytrace.trace_graph(ops.double, include=["x"])
    with pytest.raises(TypeError, match="args="):
        lazytrace.trace_graph(fakelib, args=(1,))


def test_inner_library_calls_are_part_of_the_outer_graph(traced, torch_fw):
    double, outer = traced.double, traced.outer
    module = traced.Doubler(3)

    def user(x):
        return module(double(outer(x)))

    lazy = lazytrace.trace_graph(user)
    for seed in range(3):
        x = torch_fw.rand(3, seed=seed)
        assert torch.equal(lazy(x), ((ops.outer(x) * 2) * 1 + 0) * 2)
    assert lazy.stats.traces == 1 and lazy.stats.hits == 2
    assert double.stats.calls == 0 and outer.stats.calls == 0       # inlined while tracing, not called at replay
    assert len(lazy.graphs[0].nodes) >= 5


# ---- traced classes ----------------------------------------------------------------

def test_module_class_forward_is_traced_and_isinstance_holds_both_ways(traced, torch_fw):
    Doubler = traced.Doubler
    assert Doubler is traced.blocks.Doubler and issubclass(Doubler, blocks.Doubler)
    m = Doubler(3)
    assert isinstance(m, blocks.Doubler) and isinstance(m, Doubler)
    assert isinstance(blocks.Doubler(3), Doubler) and issubclass(blocks.Doubler, Doubler)
    assert not isinstance(torch.nn.Linear(2, 2), Doubler)
    m(torch_fw.rand(3))
    x = torch_fw.rand(3, seed=5)
    assert torch.equal(m(x), x * 2) and m.forward.stats.hits == 1


def test_module_parameters_and_buffers_are_read_live(traced, torch_fw):
    m = traced.Doubler(3)
    x = torch_fw.rand(3)
    m(x), m(x)
    with torch.no_grad():
        m.weight.mul_(3)
    m.offset = torch.ones(3)
    assert torch.equal(m(x), (x * 3 + 1) * 2)
    m.weight = torch.nn.Parameter(torch.full((3,), 0.5))
    assert torch.equal(m(x), (x * 0.5 + 1) * 2)


def test_static_class_methods_properties_and_attributes_behave_as_before(traced):
    Doubler = traced.Doubler
    assert Doubler.twice(4) == 8 and Doubler.kind == "doubler" and Doubler.__doc__ == blocks.Doubler.__doc__
    created = Doubler.create(4)
    assert type(created) is Doubler and created.size == 4
    assert Doubler.forward is blocks.Doubler.forward
    assert Doubler.__name__ == "Doubler" and Doubler.__module__ == "fakelib.blocks"


def test_objects_of_traced_classes_pickle_and_deepcopy(traced, torch_fw):
    m = traced.Doubler(3)
    x = torch_fw.rand(3)
    m(x)
    with torch.no_grad():
        m.weight.fill_(2.0)
    for clone in (pickle.loads(pickle.dumps(m)), copy.deepcopy(m)):
        assert isinstance(clone, blocks.Doubler) and isinstance(clone, traced.Doubler)
        assert type(clone).__dict__["__lazytrace_original__"] is blocks.Doubler
        assert torch.equal(clone(x), x * 4) and torch.equal(clone(x), x * 4)
        # its own LazyGraph, reading the clone's weight; the graph is the original's (graph/shared.py)
        # (pickled: a class of another TracedLibrary, rebuilt from the options: it traces)
        assert clone.forward is not m.forward and clone.forward.stats.traces + clone.forward.stats.shared == 1
        assert torch.equal(clone.weight, m.weight)
    assert pickle.loads(pickle.dumps(traced.Doubler)).__dict__["__lazytrace_original__"] is blocks.Doubler


def test_plain_class_methods_are_traced_with_self_as_stateful(traced, torch_fw):
    s = traced.Scaler(2.0)
    assert isinstance(s, blocks.Scaler)
    x = torch_fw.rand(4)
    s.apply(x)
    y = torch_fw.rand(4, seed=9)
    assert torch.equal(s.apply(y), y * 2.0) and traced.Scaler.apply.stats.hits == 1
    s.factor = 3.0                                   # an attribute read by the graph is guarded
    assert torch.equal(s.apply(y), y * 3.0)
    assert torch.equal(s(y), y * 3.0 + 1)
    s.apply_current(y), s.apply_current(y)
    s.factor = 4.0                                   # read inside a method the traced one calls
    assert torch.equal(s.apply_current(y), y * 4.0)
    assert pickle.loads(pickle.dumps(s)).factor == 4.0


def test_user_subclass_of_a_traced_class(traced, torch_fw):
    class Mine(traced.Doubler):
        pass

    m = Mine(2)
    x = torch_fw.rand(2)
    assert torch.equal(m(x), x * 2) and isinstance(m, blocks.Doubler)
    assert not isinstance(blocks.Doubler(2), Mine)


def test_user_subclass_overriding_forward_and_calling_super(traced, torch_fw):
    """The common pattern `forward = super().forward(x) ...` in a user's subclass of a traced
    class recursed forever (the LazyGraph installed on the instance called the user's forward,
    which reached the traced one again); a forward that does not call super() is the user's."""
    class Wrapped(traced.Doubler):
        def forward(self, x):
            return super().forward(x) - 1

    class Replaced(traced.Doubler):
        def forward(self, x):
            return x + self.weight

    wrapped, replaced = Wrapped(2), Replaced(2)
    for seed in range(3):
        x = torch_fw.rand(2, seed=seed)
        assert torch.equal(wrapped(x), x * 2 - 1) and torch.equal(replaced(x), x + 1)
    with torch.no_grad():
        wrapped.weight.mul_(3)
    x = torch_fw.rand(2, seed=5)
    assert torch.equal(wrapped(x), x * 6 - 1)


def test_a_patched_library_function_is_what_the_proxy_hands_out(traced, torch_fw):
    """mock.patch on the real module (a test suite run under `pytest --lazytrace=...`): the
    proxy remembered the traced original and kept handing it out, ignoring the patch."""
    from unittest import mock

    x = torch_fw.rand(3)
    lazy = traced.ops.double
    assert torch.equal(lazy(x), x * 2) and traced.double is lazy
    with mock.patch.object(fakelib.ops, "double", lambda v: v * 7), \
            mock.patch.object(fakelib, "double", lambda v: v * 9):
        assert torch.equal(traced.ops.double(x), x * 7) and torch.equal(traced.double(x), x * 9)
    assert traced.ops.double is lazy and traced.double is lazy      # the same LazyGraph again
    assert torch.equal(traced.double(x + 1), (x + 1) * 2) and lazy.stats.hits >= 1


@pytest.mark.parametrize("op", [pickle.dumps, copy.copy, copy.deepcopy])
def test_a_proxy_module_copies_and_pickles_as_the_module_does(traced, op):
    # wrapt's proxy raised NotImplementedError where the module raises TypeError (code copying an
    # object that holds a module catches the module's error)
    with pytest.raises(TypeError) as real:
        op(fakelib.ops)
    with pytest.raises(TypeError) as proxied:
        op(traced.ops)
    assert str(proxied.value) == str(real.value)

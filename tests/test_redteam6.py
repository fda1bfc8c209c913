"""Red team 6: module hooks every nn.Module runs, containers changed after they were stored in
an attribute, in-place writes through `to=` conversions, shallow copies of traced objects."""
import copy
import gc
import os

import numpy as np
import pytest
import torch
from torch import nn

import lazytrace


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 3)

    def forward(self, x):
        return self.b(self.a(x).relu())


@pytest.mark.parametrize("register, hook", [
    (nn.modules.module.register_module_forward_hook, lambda module, args, out: out * 2),
    (nn.modules.module.register_module_forward_pre_hook, lambda module, args: (args[0] * 5,)),
])
def test_a_global_module_hook_added_after_the_trace_runs_at_the_next_call(register, hook):
    torch.manual_seed(0)
    model, plain = Block(), Block()
    plain.load_state_dict(model.state_dict())
    lazytrace.trace_graph(model)
    for seed in range(3):                       # traced, then hits on the fast path
        x = torch.rand(2, 4, generator=torch.Generator().manual_seed(seed))
        assert torch.equal(model(x), plain(x))
    handle = register(hook)
    try:
        for seed in range(3, 6):
            x = torch.rand(2, 4, generator=torch.Generator().manual_seed(seed))
            assert torch.equal(model(x), plain(x))
    finally:
        handle.remove()
    x = torch.rand(2, 4)
    assert torch.equal(model(x), plain(x))
    # (a hook of the user's is Python code whose side effects a graph would not repeat: eager while set)
    stats = model.forward.stats
    assert stats.traces == 1 and stats.eager == 3 and "module hook" in next(iter(stats.reasons))


class Holder:
    """Sets attributes to containers, then changes them in place (kornia's mix augmentations:
    `self._params = ...; self._params.update(dtype=...)`)."""

    def run(self, x):
        self.params = {"a": x * 2}
        self.params.update(b=x + 1)
        found = self.params
        found["c"] = [x]
        found["c"].append(x * 3)
        self.seen = []
        self.seen.append(x - 1)
        self.pair = ([x], {})                 # a tuple: rebuilt, what it holds changed after
        self.pair[0].append(x * 4)
        self.pair[1]["d"] = x + 2
        return x.sum()


@pytest.mark.parametrize("name", ["torch", "numpy"])
def test_a_container_changed_after_it_was_set_as_an_attribute_keeps_its_final_contents(name):
    holder, plain = Holder(), Holder()
    traced = lazytrace.trace_graph(holder.run)
    rand = torch.rand if name == "torch" else np.random.default_rng(0).random
    for _ in range(4):
        x = rand(3)
        traced(x)
        plain.run(x)
        assert holder.params.keys() == plain.params.keys() == {"a", "b", "c"}
        for key in ("a", "b"):
            assert (holder.params[key] == plain.params[key]).all()
        assert all((p == q).all() for p, q in zip(holder.params["c"], plain.params["c"]))
        assert len(holder.params["c"]) == 2 and len(holder.seen) == 1 and (holder.seen[0] == plain.seen[0]).all()
        assert len(holder.pair[0]) == 2 and (holder.pair[0][1] == plain.pair[0][1]).all()
        assert (holder.pair[1]["d"] == plain.pair[1]["d"]).all()
    assert traced.stats.hits == 3


def test_kornia_mixup_params_after_each_call_are_eagers():
    kornia = pytest.importorskip("kornia")
    traced = lazytrace.trace_graph(kornia).augmentation.RandomMixUpV2(p=1.0)
    plain = kornia.augmentation.RandomMixUpV2(p=1.0)
    for seed in range(3):
        x = torch.rand(2, 3, 8, 8, generator=torch.Generator().manual_seed(seed))
        torch.manual_seed(seed)
        out = traced(x)
        torch.manual_seed(seed)
        assert torch.equal(out, plain(x))
        assert traced._params.keys() == plain._params.keys()
        assert all(torch.equal(traced._params[k], plain._params[k]) for k in plain._params)
    assert traced.forward.stats.hits == 2


def add_one_in_place(a, b):
    if isinstance(a, torch.Tensor):
        a.add_(1)
    else:
        np.add(a, 1, out=a)
    return a + b


@pytest.mark.parametrize("to, make", [("torch", lambda v: np.full(3, v, np.float32)),
                                      ("numpy", lambda v: torch.full((3,), v))])
def test_writes_into_converted_arguments_reach_the_callers_arrays(to, make):
    traced = lazytrace.trace_graph(add_one_in_place, to=to)
    for value in range(4):
        x, y = make(float(value)), make(10.0)
        out = traced(x, y)
        assert (np.asarray(x) == value + 1).all() and (np.asarray(y) == 10).all()
        assert (np.asarray(out) == value + 11).all()
        same = make(float(value))                  # one array passed twice: one converted array
        out = traced(same, same)
        assert (np.asarray(same) == value + 1).all() and (np.asarray(out) == 2 * value + 2).all()
    assert traced.stats.hits >= 5


def test_a_write_that_cannot_reach_the_callers_array_is_refused():
    jnp = pytest.importorskip("jax.numpy")
    traced = lazytrace.trace_graph(add_one_in_place, to="numpy")
    with pytest.raises(TypeError, match=r"args\[0\], a jax array .* cannot be written"):
        traced(jnp.ones(3), jnp.ones(3))
    grad = torch.ones(3, requires_grad=True)
    with pytest.raises(TypeError, match="requires grad"):
        traced(grad, torch.ones(3))
    assert torch.equal(grad.detach(), torch.ones(3))
    data = np.zeros(4, np.float32)                # overlapping views of one buffer, converted apart
    with pytest.raises(TypeError, match=r"args\[0\].*shares memory with args\[1\]"):
        lazytrace.trace_graph(add_one_in_place, to="torch")(data[:3], data[1:])
    assert (data == 0).all()
    lazytrace.trace_graph(add_one_in_place, to="torch")(data[:2], data[2:])     # apart: written back
    assert data.tolist() == [1, 1, 0, 0]
    readonly = np.ones(3, np.float32)
    readonly.flags.writeable = False
    with pytest.raises(TypeError, match="read-only"):
        lazytrace.trace_graph(add_one_in_place, to="torch")(readonly, np.ones(3, np.float32))


def test_a_shallow_copy_of_a_traced_library_object_runs_its_own_attributes():
    kornia = pytest.importorskip("kornia")
    traced = lazytrace.trace_graph(kornia)
    flip = traced.augmentation.RandomHorizontalFlip(p=1.0)
    blur = traced.filters.GaussianBlur2d((3, 3), (1.5, 1.5))

    class Sharper(traced.filters.GaussianBlur2d):    # a user subclass: forward bound the same way
        pass

    sharper = Sharper((3, 3), (1.5, 1.5))
    x = torch.rand(1, 3, 8, 8)
    flip(x), blur(x), sharper(x)                      # each has its traced forward installed
    flip_copy, blur_copy, sharper_copy = copy.copy(flip), copy.copy(blur), copy.copy(sharper)
    flip_copy.p = 0.0
    blur_copy.sigma = sharper_copy.sigma = (3.0, 3.0)
    for _ in range(3):
        x = torch.rand(1, 3, 8, 8)
        assert torch.equal(flip_copy(x), x) and torch.equal(flip(x), x.flip(-1))
        wide = kornia.filters.gaussian_blur2d(x, (3, 3), (3.0, 3.0))
        assert torch.equal(blur_copy(x), wide) and torch.equal(sharper_copy(x), wide)
        assert torch.equal(blur(x), kornia.filters.gaussian_blur2d(x, (3, 3), (1.5, 1.5)))
    assert vars(blur_copy)["forward"] is not vars(blur)["forward"]


def test_a_shallow_copy_of_a_traced_model_runs_its_own_mode():
    model = nn.Dropout(0.5)
    lazytrace.trace_graph(model)
    model(torch.rand(4))
    clone = copy.copy(model).eval()
    x = torch.rand(8)
    assert torch.equal(clone(x), x)


def test_a_retrace_for_a_changed_attribute_names_the_attribute():
    class Scaler:
        scale = 2.0

        def run(self, x):
            return x * self.scale

    scaler = Scaler()
    traced = lazytrace.trace_graph(scaler.run)
    x = torch.rand(3)
    traced(x)
    scaler.scale = 3.0
    assert torch.equal(traced(x), x * 3.0)
    last = traced.traces[-1]
    assert "attribute 'scale' of the Scaler stateful object was 2.0" in str(last), str(last)


class Counter(nn.Module):
    """Keeps a plain tensor attribute (not a buffer) that forward updates in place."""

    def __init__(self):
        super().__init__()
        self.count = torch.zeros(1)
        self.linear = nn.Linear(2, 2)

    def forward(self, x):
        self.count.add_(1)
        return self.linear(x)


class Accumulator:
    registry: list = []

    def __init__(self, total):
        self.total = total

    def add_(self, x):
        self.total.add_(x)
        return self

    def keep(self, x):
        Accumulator.registry.append(self)
        self.me = [self]
        return x * 2


def test_an_in_place_write_into_an_array_held_in_an_attribute_is_replayed():
    model = Counter()
    lazytrace.trace_graph(model)
    for step in range(1, 4):
        model(torch.rand(1, 2))
        assert model.count.tolist() == [float(step)]
    assert model.forward.stats.hits == 2
    acc = Accumulator(torch.zeros(3))
    by_argument = lazytrace.trace_graph(Accumulator.add_, arg_stateful_idxs=[[0]])
    bound = lazytrace.trace_graph(acc.add_)
    for step in range(1, 4):
        assert by_argument(acc, torch.ones(3)) is acc
        assert bound(torch.ones(3)) is acc
        assert acc.total.tolist() == [2.0 * step] * 3
    assert by_argument.stats.hits == bound.stats.hits == 2


def test_the_object_passed_in_is_what_the_function_returns_and_stores_on_the_first_call():
    acc = Accumulator(torch.zeros(3))
    keep = lazytrace.trace_graph(Accumulator.keep, arg_stateful_idxs=[[0]])
    add = lazytrace.trace_graph(Accumulator.add_, arg_stateful_idxs=[[0]])
    Accumulator.registry.clear()
    keep(acc, torch.ones(3))
    assert add(acc, torch.ones(3)) is acc          # the first call: the object, not the trace's proxy
    assert Accumulator.registry[0] is acc and acc.me[0] is acc
    assert type(Accumulator.registry[0]) is Accumulator and type(acc.me[0]) is Accumulator


def test_a_forward_set_on_the_instance_is_what_trace_graph_of_the_model_traces():
    model = nn.Linear(2, 2)
    plain_forward = model.forward
    model.forward = lambda x: plain_forward(x) * 10      # accelerate's hooks patch modules this way
    lazytrace.trace_graph(model)
    lazytrace.trace_graph(model)                          # again: the same forward, traced anew
    for _ in range(3):
        x = torch.rand(1, 2)
        assert torch.equal(model(x), nn.Linear.forward(model, x) * 10)
    assert model.forward.stats.hits == 2


def test_retrace_warnings_of_models_point_at_the_callers_line():
    models = [nn.Linear(4, 4), nn.Linear(4, 2)]
    for model in models:
        lazytrace.trace_graph(model)
    with pytest.warns(lazytrace.graph.lazy.RetraceWarning) as caught:
        for model in models:
            for batch in range(1, 6):
                model(torch.rand(batch, 4))
    assert [w.filename for w in caught] == [__file__] * 2       # not torch's Module.__call__, shown once


def test_a_library_keeps_no_stats_per_dead_instance_and_still_counts_their_calls():
    kornia = pytest.importorskip("kornia")
    traced = lazytrace.trace_graph(kornia)
    library = traced._self_library
    x = torch.rand(1, 3, 8, 8)
    for _ in range(5):
        traced.filters.GaussianBlur2d((3, 3), (1.5, 1.5))(x)     # a module made per call
    kept = traced.filters.GaussianBlur2d((3, 3), (1.5, 1.5))
    kept(x), kept(x)
    gc.collect()
    assert len(library._stats) == 1                               # the live instance's
    summary = library.summary()
    # the first traces, the others replay its graph (graph/shared.py)
    assert summary["calls"] == 7 and summary["traces"] == 1 and summary["hits"] == 6 and summary["shared"] == 5
    assert summary["functions"] == 1


class Optional_:
    def with_hasattr(self, x):
        return x.sum() + (self.extra if hasattr(self, "extra") else 0)

    def with_default(self, x):
        return x.sum() + getattr(self, "extra", 0)

    def dropping(self, x):
        if hasattr(self, "extra"):
            del self.extra
        self.out = x * 2
        return x.sum()


@pytest.mark.parametrize("method", ["with_hasattr", "with_default"])
def test_an_attribute_missing_when_traced_is_checked_to_be_still_missing(method):
    obj = Optional_()
    traced = lazytrace.trace_graph(getattr(obj, method))
    x = torch.ones(2)
    assert traced(x).item() == 2 and traced(x).item() == 2
    obj.extra = 5
    assert traced(x).item() == 7
    del obj.extra
    assert traced(x).item() == 2
    assert traced.stats.hits >= 2


def test_del_of_an_attribute_is_replayed_and_a_gone_attribute_fails_the_guard():
    obj = Optional_()
    traced = lazytrace.trace_graph(obj.dropping)
    for _ in range(3):
        obj.extra = 1
        traced(torch.ones(2))
        assert not hasattr(obj, "extra") and torch.equal(obj.out, torch.full((2,), 2.0))
    traced(torch.ones(2))             # nothing to delete now: not the traced branch
    assert not hasattr(obj, "extra")
    assert traced.stats.hits >= 2 and traced.stats.eager == 0


def test_an_attribute_read_through_the_instance_dict_is_checked():
    obj = Optional_()
    traced = lazytrace.trace_graph(lambda x: x.sum() + vars(obj).get("extra", 0), stateful=[obj])
    traced(torch.ones(2))
    obj.extra = 5
    assert traced(torch.ones(2)).item() == 7


def test_a_function_reading_the_environment_sees_it_change(monkeypatch):
    monkeypatch.setenv("LAZYTRACE_RT6_SCALE", "1")

    def scaled(x):
        return x * float(os.environ["LAZYTRACE_RT6_SCALE"]) + float(os.getenv("LAZYTRACE_RT6_SHIFT", "0"))

    traced = lazytrace.trace_graph(scaled)
    x = torch.ones(2)
    assert traced(x).tolist() == traced(x).tolist() == [1.0, 1.0]
    monkeypatch.setenv("LAZYTRACE_RT6_SCALE", "5")
    assert traced(x).tolist() == [5.0, 5.0]
    monkeypatch.setenv("LAZYTRACE_RT6_SHIFT", "2")
    assert traced(x).tolist() == [7.0, 7.0]
    assert traced.stats.hits >= 1 and "environment" in traced.traces[-1].cause


def test_a_context_variable_read_by_the_function_is_checked():
    import contextvars
    scale = contextvars.ContextVar("scale", default=1.0)
    traced = lazytrace.trace_graph(lambda x: x * scale.get())
    traced(torch.ones(2))
    scale.set(3.0)
    assert traced(torch.ones(2)).tolist() == [3.0, 3.0]


def test_a_property_replaced_on_the_class_is_seen():
    class Scaled:
        factor = property(lambda self: 2.0)

        def run(self, x):
            return x * self.factor

    obj = Scaled()
    traced = lazytrace.trace_graph(obj.run)
    traced(torch.ones(2))
    Scaled.factor = property(lambda self: 100.0)
    assert traced(torch.ones(2)).tolist() == [100.0, 100.0]


def test_an_in_place_numpy_write_into_an_attribute_array_is_replayed():
    class Totals:
        def __init__(self):
            self.total = np.zeros(3)

        def add(self, x):
            np.add(self.total, x, out=self.total)
            return x * 2

    totals = Totals()
    traced = lazytrace.trace_graph(totals.add)
    for step in range(1, 4):
        traced(np.ones(3))
        assert totals.total.tolist() == [float(step)] * 3
    assert traced.stats.hits == 2


def test_include_and_exclude_choose_module_classes_too():
    kornia = pytest.importorskip("kornia")
    for options in ({"exclude": "kornia.filters.*"}, {"include": "kornia.color.*"}):
        traced = lazytrace.trace_graph(kornia, **options)
        assert traced.filters.GaussianBlur2d is kornia.filters.GaussianBlur2d
        assert traced._self_library.summary()["skipped"]["kornia.filters.gaussian.GaussianBlur2d"].startswith(
            "matched by exclude" if "exclude" in options else "not matched by include")
    traced = lazytrace.trace_graph(kornia, include="kornia.filters.gaussian.GaussianBlur2d.forward")
    blur = traced.filters.GaussianBlur2d((3, 3), (1.0, 1.0))
    blur(torch.rand(1, 3, 8, 8))
    assert isinstance(vars(blur)["forward"], lazytrace.LazyGraph)


CONTEXT_GAIN = __import__("contextvars").ContextVar("CONTEXT_GAIN")


class _GainConfig:
    def __init__(self, var):
        self.var = var


def test_a_context_variable_set_unset_or_held_by_a_config_object_is_checked():
    import contextvars
    config = _GainConfig(contextvars.ContextVar("gain", default=2.0))

    def scaled(x):                      # a global one with no default (set here), one held by an object
        return x * CONTEXT_GAIN.get() + config.var.get()

    x = torch.ones(2)
    token = CONTEXT_GAIN.set(1)
    try:
        traced = lazytrace.trace_graph(scaled)
        assert traced(x).tolist() == traced(x).tolist() == [3.0, 3.0]
        CONTEXT_GAIN.set(1.0)           # same value, another type: retraced, same result
        assert traced(x).tolist() == [3.0, 3.0]
        CONTEXT_GAIN.set(4)
        assert traced(x).tolist() == [6.0, 6.0]
        config.var.set(2.0)             # set to its default: still 2.0
        assert traced(x).tolist() == [6.0, 6.0]
        config.var.set(-1.0)
        assert traced(x).tolist() == [3.0, 3.0]
        # another context (a thread, an asyncio task) has its own values
        assert contextvars.Context().run(lambda: CONTEXT_GAIN.set(10) and traced(x).tolist()) == [12.0, 12.0]   # gain unset there: 2.0
        assert "context variable" in traced.traces[-1].cause
    finally:
        CONTEXT_GAIN.reset(token)


def test_a_context_variable_the_function_sets_makes_it_eager():
    import contextvars
    calls = contextvars.ContextVar("calls", default=0)

    def counted(x):
        calls.set(calls.get() + 1)
        return x * calls.get()

    traced = lazytrace.trace_graph(counted)
    x = torch.ones(1)
    assert [traced(x).item() for _ in range(4)] == [1.0, 2.0, 3.0, 4.0]


def test_a_static_or_class_method_replaced_on_the_class_is_seen():
    class Helper:
        offset = staticmethod(lambda: 1.0)
        gain = classmethod(lambda cls: 2.0)

        def run(self, x):
            return x * self.gain() + self.offset()

    obj = Helper()
    traced = lazytrace.trace_graph(obj.run)
    x = torch.ones(2)
    assert traced(x).tolist() == traced(x).tolist() == [3.0, 3.0]
    Helper.offset = staticmethod(lambda: 10.0)
    assert traced(x).tolist() == [12.0, 12.0]
    Helper.gain = classmethod(lambda cls: 0.0)
    assert traced(x).tolist() == [10.0, 10.0]


def test_a_property_hidden_or_replaced_on_a_base_class_is_seen():
    class Base:
        factor = property(lambda self: 2.0)

    class Child(Base):
        def run(self, x):
            return x * self.factor

    obj = Child()
    traced = lazytrace.trace_graph(obj.run)
    x = torch.ones(2)
    assert traced(x).tolist() == traced(x).tolist() == [2.0, 2.0]
    Child.factor = property(lambda self: 5.0)           # set on the subclass: hides the base's
    assert traced(x).tolist() == [5.0, 5.0]
    del Child.factor
    Base.factor = property(lambda self: 7.0)
    assert traced(x).tolist() == [7.0, 7.0]


class _Settings:
    def __init__(self):
        self.scale = 2.0

    def run(self, x):
        return x * self.__dict__["scale"] + self.__dict__.get("shift", 0.0)

    def total(self, x):
        return x + sum(v for k, v in vars(self).items() if k != "scale")


def test_entries_read_through_dunder_dict_and_the_whole_dict_are_checked():
    settings = _Settings()
    traced, total = lazytrace.trace_graph(settings.run), lazytrace.trace_graph(settings.total)
    x = torch.ones(2)
    assert traced(x).tolist() == traced(x).tolist() == [2.0, 2.0]
    assert total(x).tolist() == total(x).tolist() == [1.0, 1.0]
    settings.scale = 3.0
    assert traced(x).tolist() == [3.0, 3.0] and total(x).tolist() == [1.0, 1.0]
    settings.shift = 1.0
    assert traced(x).tolist() == [4.0, 4.0] and total(x).tolist() == [2.0, 2.0]
    assert traced.stats.hits >= 1 and total.stats.hits >= 1


def test_an_instance_dict_entry_of_an_object_passed_in_is_checked():
    def shifted(obj, x):
        return x + vars(obj).get("shift", 0.0)

    traced = lazytrace.trace_graph(shifted, arg_stateful_idxs=[[0]])
    obj, x = Optional_(), torch.ones(2)
    assert traced(obj, x).tolist() == traced(obj, x).tolist() == [1.0, 1.0]
    obj.shift = 2.0
    assert traced(obj, x).tolist() == [3.0, 3.0]


def test_a_module_forward_reading_its_dict_still_hits():
    class Gated(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(2, 2)
            self.gate = 1.0

        def forward(self, x):
            return self.linear(x) * self.__dict__.get("gate", 0.0)

    model = Gated()
    lazytrace.trace_graph(model)
    x = torch.rand(3, 2)
    for _ in range(3):
        model(x)
    assert model.forward.stats.hits == 2
    model.gate = 0.0
    assert torch.equal(model(x), torch.zeros(3, 2))


def test_copies_of_a_traced_model_each_run_their_own_forward():
    model = nn.Linear(3, 2)
    lazytrace.trace_graph(model)
    x = torch.rand(4, 3)
    model(x), model(x)
    clone = copy.copy(model)
    assert vars(clone)["forward"] is not vars(model)["forward"]
    assert torch.equal(clone(x), model(x)) and isinstance(clone.forward, lazytrace.LazyGraph)
    assert clone.forward.stats.traces == 1 and model.forward.stats.traces == 1
    vars(clone)["_parameters"] = {"weight": nn.Parameter(torch.zeros(2, 3)), "bias": nn.Parameter(torch.ones(2))}
    assert torch.equal(clone(x), torch.ones(4, 2))      # its own parameters now, read by its own graphs
    second = copy.copy(clone).train(False)              # a copy of a copy
    assert torch.equal(second(x), torch.ones(4, 2)) and not second.training and clone.training
    assert torch.equal(model(x), torch.nn.functional.linear(x, model.weight, model.bias))
    # a model traced with example arguments (an eager Graph): its copy runs its own forward
    dropout = nn.Dropout(0.5)
    lazytrace.trace_graph(dropout, args=(torch.rand(4),))
    assert torch.equal(copy.copy(dropout).eval()(x), x)

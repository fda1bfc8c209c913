"""Red-team of the LazyGraph machinery: options, bound methods, the cache key of static
arguments. Each test compares calls on new inputs with eager."""
import pytest
import torch

from lazytrace import trace_graph


def test_static_tuple_keeps_types_and_signs_of_its_items():
    # (1,) == (True,) and (0.0,) == (-0.0,): a static key by equality alone replayed the wrong graph
    def pick(x, c):
        return x + (100 if c[0] is True else 1)

    def divide(x, s):
        return x / s[0]

    lz = trace_graph(pick, static_argnums=1)
    for c in [(1,), (True,), (1,), (True,)]:
        assert torch.equal(lz(torch.ones(2), c), pick(torch.ones(2), c))
    lz = trace_graph(divide, static_argnums=1)
    for s in [(0.0,), (-0.0,), (-0.0,), (0.0,)]:
        assert torch.equal(lz(torch.ones(2), s), divide(torch.ones(2), s))


def test_static_float_zero_sign_is_part_of_the_key():
    def divide(x, s):
        return x / s

    lz = trace_graph(divide, static_argnames="s")
    for s in [0.0, -0.0, 0.0, -0.0]:
        assert torch.equal(lz(torch.ones(2), s=s), divide(torch.ones(2), s=s))


class _Counter:
    def __init__(self):
        self.k = 1.0


def test_a_container_of_stateful_objects_runs_eagerly_with_the_reason():
    # the list's items reached the function unrecorded: their attributes were baked, writes lost
    def bump(x, objs):
        for o in objs:
            o.k += 1
        return x * sum(o.k for o in objs)

    mine, theirs = [_Counter(), _Counter()], [_Counter(), _Counter()]
    lz = trace_graph(bump, arg_stateful_idxs=[[1]])
    for _ in range(3):
        assert torch.equal(lz(torch.ones(2), mine), bump(torch.ones(2), theirs))
    assert [o.k for o in mine] == [o.k for o in theirs] == [4.0, 4.0]
    assert any("is a list" in reason for reason in lz.stats.reasons)


def test_max_signatures_must_be_positive():
    with pytest.raises(ValueError, match="max_signatures"):
        trace_graph(torch.sin, max_signatures=-1)
    with pytest.raises(ValueError, match="max_signatures"):
        trace_graph(torch.sin, max_signatures=0)


class _Scaler:
    C = 3.0

    def __init__(self):
        self.k = 2.0

    def scale(self, x):
        return x * self.k

    @classmethod
    def by_class(cls, x):
        return x * cls.C


class _Slotted:
    __slots__ = ("k",)

    def __init__(self):
        self.k = 2.0

    def scale(self, x):
        return x * self.k


@pytest.mark.parametrize("make", [_Scaler, _Slotted])
def test_a_bound_method_sees_changes_of_its_object(make):
    # trace_graph(obj.method): obj's attributes were baked into the graph
    obj = make()
    lz = trace_graph(obj.scale)
    for k in [2.0, 2.0, 5.0, 5.0, 7.0]:
        obj.k = k
        x = torch.rand(3)
        assert torch.equal(lz(x), obj.scale(x))


def test_a_classmethod_sees_changes_of_its_class():
    lz = trace_graph(_Scaler.by_class)
    try:
        for c in [3.0, 3.0, 4.0]:
            _Scaler.C = c
            x = torch.rand(3)
            assert torch.equal(lz(x), x * c)
    finally:
        _Scaler.C = 3.0


class _ClassScaled(torch.nn.Module):
    scale = 2.0

    def forward(self, x):
        return x * self.scale


class _PlainClassScaled:
    scale = 2.0

    def run(self, x):
        return x * self.scale


@pytest.mark.parametrize("bind", ["module", "method"])
def test_a_class_attribute_read_through_self_is_checked(bind):
    # `self.scale` found on the class: only instance attributes and methods were recorded, so the
    # class's value was baked (a user's subclass of a kornia augmentation with a class-level setting)
    cls = type("Scaled", (_ClassScaled if bind == "module" else _PlainClassScaled,), {})
    obj = cls()
    call = trace_graph(obj) if bind == "module" else trace_graph(obj.run)
    for change in (None, None, "class", "class", "instance", "instance"):
        if change == "class":
            cls.scale = 3.0
        elif change == "instance":
            obj.scale = 5.0
        x = torch.rand(3)
        assert torch.equal(call(x), x * obj.scale)


class _ClassmethodScaled:
    scale = 2.0

    @classmethod
    def factor(cls):                # no framework call: reached through self, seen on no stack
        return cls.scale

    def __call__(self, x):
        return x * self.factor()


def test_a_class_value_read_by_a_classmethod_called_through_self_is_checked():
    obj = _ClassmethodScaled()
    call = trace_graph(obj)
    try:
        for scale in (2.0, 2.0, 3.0, 3.0):
            _ClassmethodScaled.scale = scale
            x = torch.rand(3)
            assert torch.equal(call(x), x * scale)
    finally:
        _ClassmethodScaled.scale = 2.0


class _ClassmethodScaledChild(_ClassmethodScaled):
    pass


def test_a_class_value_set_on_a_subclass_later_is_seen_through_the_classmethod():
    obj = _ClassmethodScaledChild()
    call = trace_graph(obj)
    try:
        x = torch.rand(3)
        assert torch.equal(call(x), x * 2.0)
        _ClassmethodScaledChild.scale = 7.0         # hides the base's value from now on
        x = torch.rand(3)
        assert torch.equal(call(x), x * 7.0)
    finally:
        if "scale" in vars(_ClassmethodScaledChild):
            del _ClassmethodScaledChild.scale


_STATIC_GAIN = 2.0


class _StaticGained:
    @staticmethod
    def gain():                     # no framework call: a global read by code no stack shows
        return _STATIC_GAIN

    def __call__(self, x):
        return x * self.gain()


def test_a_global_read_by_a_staticmethod_called_through_self_is_checked():
    global _STATIC_GAIN
    obj = _StaticGained()
    call = trace_graph(obj)
    try:
        for gain in (2.0, 2.0, 4.0, 4.0):
            _STATIC_GAIN = gain
            x = torch.rand(3)
            assert torch.equal(call(x), x * gain)
        assert call.stats.traces == 2 and call.stats.hits == 2
    finally:
        _STATIC_GAIN = 2.0


def test_a_models_bound_forward_sees_eval():
    model = torch.nn.Sequential(torch.nn.Dropout(0.5))
    lz = trace_graph(model.forward)
    lz(torch.ones(1000))
    model.eval()
    x = torch.rand(1000)
    assert torch.equal(lz(x), x)
    assert torch.equal(lz(x), x)


class _Config:
    """Hashable, not keyable by itself: only static_argnums/static_argnames make it a key."""

    def __init__(self, gain):
        self.gain = gain

    def __hash__(self):
        return hash(self.gain)

    def __eq__(self, other):
        return isinstance(other, _Config) and other.gain == self.gain


def _apply(x, cfg, bias=0.0):
    return x * cfg.gain + bias


@pytest.mark.parametrize("option", [dict(static_argnums=-2), dict(static_argnums=1),
                                    dict(static_argnames="cfg")])
def test_static_arguments_by_negative_index_by_name_or_position(option):
    # static_argnums=-2 was never matched; a static name passed by position (or an index passed
    # by name) was not static: the call ran eagerly as unkeyable
    lz = trace_graph(_apply, **option)
    for gain in [2.0, 3.0, 2.0]:
        x = torch.rand(3)
        assert torch.equal(lz(x, _Config(gain)), _apply(x, _Config(gain)))
        assert torch.equal(lz(x, cfg=_Config(gain), bias=1.0), _apply(x, _Config(gain), 1.0))
    assert lz.stats.eager == 0 and lz.stats.traces == 4


def test_bad_static_argnums_are_named():
    with pytest.raises(ValueError, match="static_argnums"):
        trace_graph(_apply, static_argnums=-4)
    with pytest.raises(TypeError, match="static_argnums"):
        trace_graph(_apply, static_argnums="cfg")


class _CallableScaler:
    def __init__(self):
        self.k = 2.0

    def __call__(self, x):
        return x * self.k


def test_a_callable_object_sees_changes_of_its_attributes():
    obj = _CallableScaler()
    lz = trace_graph(obj)
    for k in [2.0, 2.0, 9.0, 9.0]:
        obj.k = k
        x = torch.rand(3)
        assert torch.equal(lz(x), x * k)


def test_an_inner_lazygraph_with_frozen_draws_keeps_them_inside_an_outer_trace():
    # the outer trace (include_generators=True) inlined the inner function: its graph drew anew at
    # every call where the inner LazyGraph, called eagerly, returns its frozen draw
    def noisy(x):
        return x + torch.rand(2)

    inner = trace_graph(noisy, include_generators=False)

    def wrap(x):
        return inner(x) * 2

    outer = trace_graph(wrap)
    results = [outer(torch.zeros(2)) for _ in range(3)]
    expected = wrap(torch.zeros(2))
    for r in results[1:]:
        assert torch.equal(r, expected)
    assert any("include_generators=False" in reason for reason in outer.stats.reasons)


def _twice(x):
    yield x * 2
    yield x + 1


async def _doubled(x):
    return x * 2


def test_generator_and_async_functions_run_eagerly_without_leaking_tracers():
    # their bodies ran after the traced call returned: the first call yielded the trace's NumPy
    # tracers instead of arrays
    import asyncio
    np = pytest.importorskip("numpy")
    gen, coro = trace_graph(_twice), trace_graph(_doubled)
    for i in range(3):
        x = np.full(2, float(i))
        out = list(gen(x))
        assert all(type(v) is np.ndarray for v in out)
        assert [v.tolist() for v in out] == [v.tolist() for v in _twice(x)]
        got = asyncio.run(coro(x))
        assert type(got) is np.ndarray and got.tolist() == (x * 2).tolist()
    assert gen.stats.traces == coro.stats.traces == 0


def test_overlapping_traces_in_two_threads_put_the_objects_class_back():
    # each trace swapped the class for a recording subclass of what it found: the first to finish
    # put the original back, the second the first's recorder, left on the object for good
    import threading

    first_in, second_in, first_done = threading.Event(), threading.Event(), threading.Event()

    class Scaler:
        def __init__(self):
            self.k = 2.0

    obj = Scaler()

    def scale(x):
        if x.shape[0] == 1:
            first_in.set()
            assert second_in.wait(10)
        else:
            second_in.set()
            assert first_done.wait(10)
        return x * obj.k

    lz = trace_graph(scale, stateful=[obj])

    def first():
        lz(torch.ones(1))
        first_done.set()

    def second():
        assert first_in.wait(10)
        lz(torch.ones(2))

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert type(obj) is Scaler
    first_in.clear()
    second_in.set()
    first_done.set()
    obj.k = 5.0
    for n in (1, 2):
        assert torch.equal(lz(torch.ones(n)), torch.full((n,), 5.0))


def test_the_default_device_is_part_of_the_key():
    # torch.zeros(2) became a CPU constant: after set_default_device("meta") eager makes it on meta
    def shifted(x):
        return torch.zeros(2) + x.sum()

    lz = trace_graph(shifted)
    for _ in range(2):
        assert lz(torch.ones(2)).device.type == "cpu"
    torch.set_default_device("meta")
    try:
        for _ in range(2):
            x = torch.ones(2, device="cpu")
            assert lz(x).device == shifted(x).device == torch.device("meta")
    finally:
        torch.set_default_device(None)
    assert lz(torch.ones(2)).device.type == "cpu"


def test_a_partial_whose_keywords_change_in_place():
    import functools

    def scale(x, k, bias=(0.0,)):
        return x * k + bias[0]

    p = functools.partial(scale, k=3.0, bias=[1.0])
    lz = trace_graph(p)
    for _ in range(2):
        assert torch.equal(lz(torch.ones(2)), p(torch.ones(2)))
    assert lz.stats.hits == 1
    p.keywords["bias"][0] = 2.0             # a list it holds, changed in place
    assert torch.equal(lz(torch.ones(2)), torch.full((2,), 5.0))
    p.keywords["k"] = 5.0                   # its keywords
    for _ in range(2):
        assert torch.equal(lz(torch.ones(2)), torch.full((2,), 7.0))
    assert lz.stats.traces == 3 and "partial" in lz.explain()


def test_a_partial_of_immutable_arguments_is_not_checked():
    import functools

    def scale(k, x):
        return x * k

    lz = trace_graph(functools.partial(scale, 3.0))
    for _ in range(2):
        x = torch.rand(2)
        assert torch.equal(lz(x), x * 3.0)
    assert [n.target for n in lz.graphs[0].nodes] == [torch.Tensor.mul]   # no check: a partial's args tuple cannot change


def test_a_returned_closure_holds_arrays_not_tracers():
    np = pytest.importorskip("numpy")

    def later(x):
        return lambda: x * 2

    lz = trace_graph(later)
    assert type(lz(np.ones(2))()) is np.ndarray


def test_a_models_bound_forward_sees_a_replaced_parameter():
    model = torch.nn.Linear(2, 2)
    lz = trace_graph(model.forward)
    x = torch.rand(2)
    lz(x)
    lz(x)
    model.weight = torch.nn.Parameter(torch.zeros(2, 2))
    for _ in range(2):
        x = torch.rand(2)
        assert torch.equal(lz(x), model(x))


class _Accumulator:
    def __init__(self, zeros):
        self.acc = zeros


def test_numpy_array_read_from_a_stateful_object_is_traced_through():
    # the attribute came back as a raw ndarray: `acc += x` then `acc.sum()` ran on it unseen, and
    # the sum was baked (2.0 at every call) while the in-place write went on
    np = pytest.importorskip("numpy")
    mine, theirs = _Accumulator(np.zeros(2)), _Accumulator(np.zeros(2))

    def add(x, state):
        acc = state.acc
        acc += x
        return acc.sum()

    lz = trace_graph(add, arg_stateful_idxs=[[1]])
    for _ in range(3):
        assert lz(np.ones(2), mine) == add(np.ones(2), theirs)
    assert mine.acc.tolist() == theirs.acc.tolist() == [3.0, 3.0]


def test_numpy_array_set_on_a_stateful_object_is_an_array_not_a_tracer():
    np = pytest.importorskip("numpy")
    state = _Accumulator(None)

    def keep(x):
        state.acc = x * 2
        return x + 1

    lz = trace_graph(keep, stateful=[state])
    for i in range(3):
        lz(np.full(2, float(i)))
        assert type(state.acc) is np.ndarray and state.acc.tolist() == [2.0 * i] * 2


def test_jax_array_set_on_a_stateful_object_is_an_array_not_a_tracer():
    # the first call stored a JaxTracer: the next call raised UnexpectedTracerError
    jnp = pytest.importorskip("jax.numpy")
    state = _Accumulator(jnp.zeros(2))

    def add(x):
        state.acc = state.acc + x
        return state.acc.sum()

    lz = trace_graph(add, stateful=[state])
    assert [float(lz(jnp.ones(2))) for _ in range(3)] == [2.0, 4.0, 6.0]
    assert state.acc.tolist() == [3.0, 3.0] and "Tracer" not in type(state.acc).__name__


@pytest.mark.parametrize("raises", [False, True])
def test_class_swaps_are_undone_in_reverse_order_around_the_sessions_exit(monkeypatch, raises):
    # _run's exits (an ExitStack before session 13, tracer._Exits since): a class swapped while the
    # function runs (an object reached through a stateful one) is put back before the session's
    # __exit__, one swapped before it (`stateful=`) after it, also when the function raises
    import contextlib
    from lazytrace.graph import tracer

    log = []
    real_swap, real_exit = tracer.recording_class, tracer.TraceSession.__exit__

    @contextlib.contextmanager
    def logged_swap(obj, session, active):
        with real_swap(obj, session, active):
            log.append(("swap", type(obj).__base__.__name__))
            try:
                yield
            finally:
                log.append(("back", type(obj).__base__.__name__))

    def logged_exit(self, *exc):
        log.append(("session exit", exc[0] and exc[0].__name__))
        return real_exit(self, *exc)

    monkeypatch.setattr(tracer, "recording_class", logged_swap)
    monkeypatch.setattr(tracer.TraceSession, "__exit__", logged_exit)

    class Child:
        pass

    class Holder:
        pass

    holder, child = Holder(), Child()
    holder.child, child.scale = child, torch.tensor([2.0])

    def fn(x):
        y = x * holder.child.scale
        if raises:
            raise KeyError("out")
        return y

    lz = trace_graph(fn, stateful=[holder])
    if raises:
        with pytest.raises(KeyError):
            lz(torch.ones(1))
    else:
        assert torch.equal(lz(torch.ones(1)), torch.tensor([2.0]))
    exc = "KeyError" if raises else None
    assert log == [("swap", "Holder"), ("swap", "Child"), ("back", "Child"), ("session exit", exc),
                   ("back", "Holder")]
    assert type(holder) is Holder and type(child) is Child


def test_exits_chain_an_exception_raised_while_exiting_as_an_exitstack():
    import contextlib
    from lazytrace.graph.tracer import _Exits

    class Manager:
        def __init__(self, log, name, fails=False):
            self.log, self.name, self.fails = log, name, fails

        def __enter__(self):
            return self

        def __exit__(self, exc_type, exc, tb):
            self.log.append((self.name, exc_type))
            if self.fails:
                raise KeyError(self.name)

    seen = []
    for stack in (contextlib.ExitStack, _Exits):
        log = []
        with pytest.raises(KeyError) as info:
            with stack() as entered:
                for name, fails in ((1, False), (2, True), (3, False)):
                    entered.enter_context(Manager(log, name, fails))
                raise ValueError("body")
        seen.append((log, repr(info.value), repr(info.value.__context__)))
    assert seen[0] == seen[1]
    assert seen[1][0] == [(3, ValueError), (2, ValueError), (1, KeyError)]

"""The compiled fast-path check accepts a call only if its signature key equals the graph's."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from global_states import ALL_STATES, call_in
from hypothesis import strategies as st

import lazytrace
from lazytrace.graph import passes
from lazytrace.graph.guards import MISS, compile_dispatch

arrays = st.one_of(
    st.builds(lambda s, d, g: torch.zeros(s, dtype=d, requires_grad=g and d.is_floating_point),
              st.lists(st.integers(1, 3), max_size=3), st.sampled_from([torch.float32, torch.float64, torch.int64]),
              st.booleans()),
    st.builds(lambda s, d: np.zeros(s, dtype=d), st.lists(st.integers(1, 3), max_size=3),
              st.sampled_from(["float32", "int32"])),
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from([0.0, 1.0, -0.0, math.nan, math.inf]),
                    st.text(max_size=2))
leaves = st.one_of(arrays, scalars)
trees = st.recursive(leaves, lambda inner: st.one_of(st.tuples(inner, inner), st.lists(inner, max_size=2),
                                                     st.dictionaries(st.sampled_from("ab"), inner, max_size=2)),
                     max_leaves=4)
calls = st.tuples(st.lists(trees, min_size=1, max_size=3), st.dictionaries(st.sampled_from(["x", "y"]), trees, max_size=1))


def _map_leaves(obj, fn):
    """`obj` (tuples, lists, dicts) with fn applied to each leaf, in order."""
    if isinstance(obj, tuple):
        return tuple(_map_leaves(x, fn) for x in obj)
    if isinstance(obj, list):
        return [_map_leaves(x, fn) for x in obj]
    if isinstance(obj, dict):
        return {k: _map_leaves(v, fn) for k, v in obj.items()}
    return fn(obj)


def _alias(obj, data, pool):
    """An array replaced by an earlier array of the call, at times (one object twice: `f(x, x)`)."""
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        if pool and data.draw(st.booleans()):
            return pool[data.draw(st.integers(0, len(pool) - 1))]
        pool.append(obj)
    return obj


def _perturb(obj, data, pool):
    """A leaf changed slightly, at times: the near misses a check must reject."""
    how = data.draw(st.sampled_from(["same", "same", "dtype", "shape", "grad", "value", "type", "alias"]))
    if how == "alias" and pool:           # an array of the call given again in its place
        return pool[data.draw(st.integers(0, len(pool) - 1))]
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        pool.append(obj)
    if isinstance(obj, torch.Tensor):
        if how == "dtype":
            return obj.to(torch.float64 if obj.dtype != torch.float64 else torch.float32)
        if how == "shape":
            return torch.zeros(obj.shape + (1,), dtype=obj.dtype)
        if how == "grad" and obj.dtype.is_floating_point:
            return obj.detach().clone().requires_grad_(not obj.requires_grad)
        return obj.detach().clone().requires_grad_(obj.requires_grad)
    if isinstance(obj, np.ndarray):
        if how == "dtype":
            return obj.astype("float64")
        if how == "shape":
            return obj.reshape(obj.shape + (1,))
        return obj.copy()
    if how == "value" and isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return -obj if obj == 0 else obj + 1
    if how == "type" and isinstance(obj, (bool, int, float)):
        return {bool: int, int: float, float: int}[type(obj)](obj) if not (isinstance(obj, float)
                                                                       and not math.isfinite(obj)) else obj
    return obj


#: global states the second call runs in, each in turn (all but another device's autocast, which a
#: graph of CPU arrays does not check: tests/test_hit_path.py)
_STATES = ["default"] + [s for s in ALL_STATES if s != "CUDA autocast"]


def _state_call(state, fn):
    return fn() if state == "default" else call_in(state, fn)


@settings(max_examples=400, deadline=None)
@given(calls, st.data())
def test_fast_check_accepts_only_equal_keys(first, data):
    """The compiled check, TensorGuards and the global-state tests included, accepts a call
    only if that call has the key of the traced one: arrays, values, which arrays are one object,
    and the framework settings (grad mode, default dtype, autocast, inference mode, forward AD,
    a function mode, a functorch transform, module hooks, flush-denormal) it runs under."""
    args, kwargs = first
    pool = []
    args, kwargs = _map_leaves((tuple(args), kwargs), lambda leaf: _alias(leaf, data, pool))
    pool = []
    args2, kwargs2 = _map_leaves((args, kwargs), lambda leaf: _perturb(leaf, data, pool))
    lazy = lazytrace.trace_graph(lambda *a, **k: a)
    try:
        key, leaves, backends = lazy._key(args, kwargs)
    except TypeError:
        return                                  # mixed frameworks: never traced
    if len(backends) != 1:
        return

    class FakeGraph:
        _extra = None
        _state = backends[0].global_state()
        _plan = passes.Plan(nodes=[], constants=[])     # no array of its own: the arguments' devices decide
        fn = staticmethod(lambda *leaves: "hit")

    check = compile_dispatch(FakeGraph, args, kwargs, lazy._signature, backends)
    if check is None:
        return
    assert check(args, kwargs) == "hit"          # the traced call itself passes
    for state in _STATES:
        key2, accepted = _state_call(state, lambda: (lazy._key(args2, kwargs2)[0], check(args2, kwargs2)))
        if accepted is not MISS:
            assert key2 == key, state


def test_negative_zero_is_another_signature():
    lazy = lazytrace.trace_graph(lambda x, z: x / z)
    x = torch.ones(2)
    assert torch.equal(lazy(x, 0.0), torch.full((2,), math.inf))
    for _ in range(2):
        assert torch.equal(lazy(x, -0.0), torch.full((2,), -math.inf))


def test_fast_check_notices_grad_mode_and_default_dtype():
    lazy = lazytrace.trace_graph(lambda x: x * 2)
    x = torch.ones(2, requires_grad=True)
    lazy(x), lazy(x)                              # second call compiles the check
    assert lazy._fast is not None
    with torch.no_grad():
        assert not lazy(x).requires_grad
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        lazy(x)
    finally:
        torch.set_default_dtype(old)
    assert lazy.stats.traces == 3


@pytest.mark.parametrize("on_cpu_only", [True, False])
def test_fast_check_notices_autocast_and_inference_mode(on_cpu_only):
    """The fast check leaves inference mode to dynamo's TensorGuards (it changes the thread's
    dispatch keys it compares), and on an all-CPU graph CPU autocast too; a graph with an array on
    another device keeps its own check of autocast. Either way eager's result comes back."""
    def mixed(x):
        y = x @ x.T                                # autocast runs matmul in bfloat16 on the CPU
        return y if on_cpu_only else (y, x.to("meta"))

    lazy = lazytrace.trace_graph(mixed)
    x = torch.rand(3, 3)
    lazy(x), lazy(x)
    assert lazy._fast is not None
    checks = list(lazy._fast[0].__globals__.values())
    assert torch.is_inference_mode_enabled not in checks
    assert (torch._C._is_any_autocast_enabled in checks) is not on_cpu_only
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, expected = lazy(x), mixed(x)
    first = (lambda o: o) if on_cpu_only else (lambda o: o[0])
    assert first(out).dtype == first(expected).dtype == torch.bfloat16
    with torch.inference_mode():
        assert first(lazy(x)).is_inference() and first(mixed(x)).is_inference()
        y = torch.rand(3, 3)                        # an inference tensor: TensorGuards does not tell
    for _ in range(3):
        assert not first(lazy(y)).is_inference() or torch.is_inference_mode_enabled()
        assert torch.equal(first(lazy(y)), first(mixed(y)))
    with torch.inference_mode():
        assert first(lazy(y)).is_inference()
    assert first(lazy(x)).dtype == torch.float32 and not first(lazy(x)).is_inference()

"""The compiled fast-path check accepts a call only if its signature key equals the graph's."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
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


def _perturb(obj, data):
    """The same call with some leaves changed slightly: the near misses a check must reject."""
    if isinstance(obj, tuple):
        return tuple(_perturb(x, data) for x in obj)
    if isinstance(obj, list):
        return [_perturb(x, data) for x in obj]
    if isinstance(obj, dict):
        return {k: _perturb(v, data) for k, v in obj.items()}
    how = data.draw(st.sampled_from(["same", "same", "dtype", "shape", "grad", "value", "type"]))
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


@settings(max_examples=400, deadline=None)
@given(calls, st.data())
def test_fast_check_accepts_only_equal_keys(first, data):
    args, kwargs = first
    args = tuple(args)
    args2, kwargs2 = _perturb(args, data), _perturb(kwargs, data)
    lazy = lazytrace.trace_graph(lambda *a, **k: a)
    try:
        key, leaves, backends = lazy._key(args, kwargs)
        key2, _, _ = lazy._key(args2, kwargs2)
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
    if check(args2, kwargs2) is not MISS:
        assert key2 == key


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
    """On an all-CPU graph the fast check leaves inference mode and CPU autocast to dynamo's
    TensorGuards (they change the thread's dispatch keys it compares); a graph with an array on
    another device keeps its own checks. Either way eager's result comes back."""
    def mixed(x):
        y = x @ x.T                                # autocast runs matmul in bfloat16 on the CPU
        return y if on_cpu_only else (y, x.to("meta"))

    lazy = lazytrace.trace_graph(mixed)
    x = torch.rand(3, 3)
    lazy(x), lazy(x)
    assert lazy._fast is not None
    checks = list(lazy._fast[0].__globals__.values())
    assert (torch.is_inference_mode_enabled in checks) is not on_cpu_only
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

"""Kornia functions through LazyGraph: outputs (and gradients) equal eager on fresh inputs."""
import pytest
import torch

import lazytrace
from kornia_cases import CASES, GRADIENT_CASES

BY_NAME = {name: (fn, make) for name, fn, make in CASES}
#: functions whose Python control flow depends on pixel values: their graphs are guarded,
#: new data takes another path, and after a few variants the signature runs eagerly
DATA_DEPENDENT = {
    "filters.laplacian": "reads min/max back with .item() to choose a precision",
    "filters.canny": "hysteresis loop runs until edges stop changing",
}


def _equal(a, b):
    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and torch.allclose(a, b, atol=1e-6, equal_nan=True)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b


def test_enough_kornia_functions_are_covered():
    modules = {name.split(".")[0] for name, _, _ in CASES}
    assert len(CASES) >= 30 and modules == {"color", "filters", "enhance", "geometry", "morphology"}


@pytest.mark.parametrize("name", [c[0] for c in CASES if c[0] not in DATA_DEPENDENT])
def test_graph_equals_eager_on_fresh_inputs(name):
    fn, make = BY_NAME[name]
    lazy = lazytrace.trace_graph(fn)
    first = lazy(*make(0))
    assert _equal(first, fn(*make(0)))
    for seed in (1, 2):
        args = make(seed)
        assert _equal(lazy(*args), fn(*args)), f"{name} differs from eager on seed {seed}"
    assert lazy.stats.traces == 1
    assert lazy.stats.hits == 2, f"{name} did not replay its graph: {lazy.stats.reasons}"


@pytest.mark.parametrize("name", sorted(DATA_DEPENDENT))
def test_data_dependent_functions_stay_correct(name):
    fn, make = BY_NAME[name]
    lazy = lazytrace.trace_graph(fn)
    for seed in range(8):
        args = make(seed)
        assert _equal(lazy(*args), fn(*args)), f"{name} differs from eager on seed {seed}"
    assert lazy.stats.guard_failures > 0        # new data took another path: never a stale graph
    assert lazy.stats.traces > 1


@pytest.mark.parametrize("name", GRADIENT_CASES)
def test_gradients_equal_eager(name):
    fn, make = BY_NAME[name]
    lazy = lazytrace.trace_graph(fn)
    lazy(*[a.requires_grad_(True) if i == 0 else a for i, a in enumerate(make(0))])
    args = make(3)
    x = args[0].requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    out, ref = lazy(x, *args[1:]), fn(x_ref, *args[1:])
    weight = torch.randn_like(ref)
    (g,) = torch.autograd.grad((out * weight).sum(), x)
    (g_ref,) = torch.autograd.grad((ref * weight).sum(), x_ref)
    assert lazy.stats.hits == 1
    assert torch.allclose(g, g_ref, atol=1e-5), f"{name}: gradients differ"

"""Red team 10: framework settings changed between or around calls, concurrency inside traced
functions, whole-library proxies; each compared with eager on new inputs."""
import numpy as np
import pytest

import lazytrace

torch = pytest.importorskip("torch")


def _rand(*shape, seed):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def deterministic_algorithms():
    def set_mode(on):
        torch.use_deterministic_algorithms(on)
    yield set_mode
    torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("fn", [lambda x: torch.empty_like(x), lambda x: x + torch.empty(3),
                                lambda x: x.new_empty(2)], ids=["empty_like", "empty", "new_empty"])
def test_uninitialized_memory_is_nan_under_deterministic_algorithms_as_in_eager(fn, deterministic_algorithms):
    """torch.use_deterministic_algorithms(True) fills uninitialized memory with NaN
    (torch.utils.deterministic.fill_uninitialized_memory): a constant folded from torch.empty
    under the default mode must not replay there; the mode is part of the key."""
    lazy = lazytrace.trace_graph(fn)
    lazy(_rand(3, seed=0)), lazy(_rand(3, seed=1))
    deterministic_algorithms(True)
    for seed in range(2, 5):
        x = _rand(3, seed=seed)
        expected = fn(x)
        assert expected.isnan().all()
        out = lazy(x)
        assert out.isnan().all() and out.dtype == expected.dtype and out.shape == expected.shape
    assert lazy.stats.traces == 2 and lazy.stats.hits == 3
    assert "use_deterministic_algorithms" in lazy.explain()
    deterministic_algorithms(False)
    lazy(_rand(3, seed=5))
    assert lazy.stats.traces == 2 and lazy.stats.hits == 4


def test_deterministic_algorithms_switched_inside_the_function_runs_eagerly(deterministic_algorithms):
    """A graph cannot replay torch.use_deterministic_algorithms (no call shows it): the setting the
    function leaves must be eager's after every call."""
    def switches(x):
        torch.use_deterministic_algorithms(True)
        return x + torch.empty(3)

    lazy = lazytrace.trace_graph(switches)
    for seed in range(3):
        deterministic_algorithms(False)
        out = lazy(_rand(3, seed=seed))
        assert torch.are_deterministic_algorithms_enabled() and out.isnan().all()
    assert lazy.stats.hits == 0

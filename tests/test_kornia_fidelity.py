"""Red-teaming kornia as users call it: replayed results and the state augmentations leave behind
must match eager kornia on new inputs, after the inputs' properties or the objects' flags change."""
import pytest
import torch

import lazytrace

kornia = pytest.importorskip("kornia")


@pytest.fixture(scope="module")
def traced():
    return lazytrace.trace_graph(kornia)


def _rand(*shape, seed):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def _assert_same(eager, got):
    assert got.stride() == eager.stride() and torch.equal(got, eager)


def test_a_returned_expanded_constant_overlaps_as_in_eager():
    def fn(x):
        return torch.tensor([7.5, 7.5]).expand(x.shape[0], -1), x + 1

    lazy = lazytrace.trace_graph(fn)
    for seed in range(3):
        got = lazy(_rand(3, 2, seed=seed))[0]
        _assert_same(fn(_rand(3, 2, seed=seed))[0], got)
        with pytest.raises(RuntimeError, match="single memory location"):
            got += 1                    # as in eager: its rows are one memory
    assert lazy.stats.hits == 2


def test_random_affine_params_keep_eager_strides(traced):
    eager, lazy = kornia.augmentation.RandomAffine(30.0, p=1.0), traced.augmentation.RandomAffine(30.0, p=1.0)
    for seed in range(3):
        x = _rand(3, 3, 16, 16, seed=seed)
        torch.manual_seed(seed)
        expected = eager(x)
        torch.manual_seed(seed)
        assert torch.equal(lazy(x), expected)
        for name, value in eager._params.items():
            _assert_same(value, lazy._params[name])
    assert lazy.forward.stats.hits == 2

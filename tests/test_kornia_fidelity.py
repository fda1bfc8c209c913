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


def _augment_twice_then(change, build, traced_build):
    """Eager and traced objects called alike; `change` applied to both before the last two calls."""
    eager, lazy = build(), traced_build()
    for seed in range(4):
        if seed == 2:
            change(eager)
            change(lazy)
        x = _rand(2, 3, 16, 16, seed=seed)
        torch.manual_seed(seed)
        expected = eager(x)
        torch.manual_seed(seed)
        assert torch.equal(lazy(x), expected), seed
    return lazy


def test_a_replaced_parameter_generator_is_used(traced):
    def change(aug):
        aug._param_generator = kornia.augmentation.RandomRotation(90.0)._param_generator

    lazy = _augment_twice_then(change, lambda: kornia.augmentation.RandomRotation(30.0, p=1.0),
                               lambda: traced.augmentation.RandomRotation(30.0, p=1.0))
    # the new generator was made outside the traced module: its sampler's tensors are reached
    # through objects the trace does not record (nothing would see them change), so that
    # signature runs eagerly
    assert lazy.forward.stats.hits == 1 and lazy.forward.stats.eager == 2
    assert any("nothing it reads holds" in reason for reason in lazy.forward.stats.reasons)


def test_a_method_hidden_by_an_attribute_set_later_is_not_replayed(traced):
    def change(aug):
        aug.apply_transform = lambda image, params, flags, transform=None: image * 0

    lazy = _augment_twice_then(change, lambda: kornia.augmentation.RandomHorizontalFlip(p=1.0),
                               lambda: traced.augmentation.RandomHorizontalFlip(p=1.0))
    assert lazy.forward.stats.hits == 2


def test_a_function_held_in_an_attribute_is_checked(traced):
    def change(module):
        module.func = lambda image: image * 3

    lazy = _augment_twice_then(change, lambda: kornia.contrib.Lambda(lambda image: image * 2),
                               lambda: traced.contrib.Lambda(lambda image: image * 2))
    assert lazy.forward.stats.hits == 2


def test_a_replaced_submodule_of_a_traced_model_is_used():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blur = kornia.filters.GaussianBlur2d((3, 3), (1.5, 1.5))

        def forward(self, x):
            return self.blur(x)

    def change(model):
        model.blur = kornia.filters.GaussianBlur2d((3, 3), (0.5, 0.5))

    lazy = _augment_twice_then(change, Model, lambda: lazytrace.trace_graph(Model()))
    assert lazy.forward.stats.hits == 2

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
    assert lazy.forward.stats.hits == 2


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


def test_focal_loss_on_large_cpu_logits_has_eager_gradients(traced):
    # past 2**19 logits kornia computes it in a custom autograd.Function, whose forward runs with grad
    # mode off: replayed as plain calls, backward went through them (an in-place error, or other gradients)
    focal = traced.losses.focal_loss
    for seed in range(3):
        logits = _rand(2, 5, 256, 256, seed=seed) * 4 - 2
        target = (_rand(2, 256, 256, seed=seed + 10) * 5).long()
        grads = []
        for fn in (kornia.losses.focal_loss, focal):
            x = logits.clone().requires_grad_(True)
            loss = fn(x, target, alpha=0.5, reduction="mean")
            loss.backward()
            grads.append((loss.detach(), x.grad))
        assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])

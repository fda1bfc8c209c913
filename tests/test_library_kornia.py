"""Whole-library tracing on kornia itself: the examples the issue names."""
import copy
import importlib
import pickle

import pytest
import torch

import lazytrace
from lazytrace.importhook import ModuleProxy

kornia = pytest.importorskip("kornia")


@pytest.fixture(scope="module")
def traced():
    return lazytrace.trace_graph(kornia)


def img(seed):
    return torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def test_submodules_functions_and_reexports(traced):
    assert isinstance(traced.geometry.transform, ModuleProxy)
    rotate = traced.geometry.transform.rotate
    assert isinstance(rotate, lazytrace.LazyGraph) and rotate is traced.geometry.rotate
    angle = torch.tensor([30.0])
    rotate(img(0), angle)
    assert torch.equal(rotate(img(1), angle), kornia.geometry.transform.rotate(img(1), angle))
    with lazytrace.enable("kornia"):
        gaussian_module = importlib.import_module("kornia.filters.gaussian")
        from kornia.filters import gaussian_blur2d
    assert gaussian_module.gaussian_blur2d is gaussian_blur2d
    assert traced.color.rgb_to_grayscale is traced.color.gray.rgb_to_grayscale


def test_module_classes(traced):
    blur = traced.filters.GaussianBlur2d((3, 3), (1.5, 1.5))
    hsv = traced.color.RgbToHsv()
    for seed in range(3):
        assert torch.equal(blur(img(seed)), kornia.filters.gaussian_blur2d(img(seed), (3, 3), (1.5, 1.5)))
        assert torch.equal(hsv(img(seed)), kornia.color.rgb_to_hsv(img(seed)))
    assert blur.forward.stats.hits == 2 and hsv.forward.stats.hits == 2
    assert isinstance(blur, kornia.filters.GaussianBlur2d)
    assert isinstance(kornia.color.RgbToHsv(), traced.color.RgbToHsv)


def test_augmentation_classes_replay_random_draws_and_pickle(traced):
    aug = traced.augmentation.RandomAffine(degrees=30.0, p=1.0)
    torch.manual_seed(0)
    aug(img(0))
    torch.manual_seed(1)
    out = aug(img(1))
    torch.manual_seed(1)
    expected = kornia.augmentation.RandomAffine(degrees=30.0, p=1.0)(img(1))
    assert torch.equal(out, expected) and aug.forward.stats.hits == 1
    for clone in (pickle.loads(pickle.dumps(aug)), copy.deepcopy(aug)):
        assert isinstance(clone, kornia.augmentation.RandomAffine) and type(clone) is not kornia.augmentation.RandomAffine
        torch.manual_seed(1)
        assert torch.equal(clone(img(1)), expected)


def test_untraceable_forward_runs_eagerly_with_the_reason(traced):
    aug = traced.augmentation.ColorJitter(0.2, 0.2, 0.2, 0.1, p=1.0)
    torch.manual_seed(3)
    out = aug(img(0))
    torch.manual_seed(3)
    assert torch.equal(out, kornia.augmentation.ColorJitter(0.2, 0.2, 0.2, 0.1, p=1.0)(img(0)))
    assert aug.forward.stats.eager == 1 and "random numbers" in next(iter(aug.forward.stats.reasons))


def test_using_the_traced_library_leaves_the_original_modules_namespaces_as_they_were():
    """No attribute appears in, or leaves, kornia's own modules (a staticmethod remembering a
    submodule's proxy once copied its `__annotations__`, which made the module create one)."""
    import kornia
    names = ("filters", "color", "enhance", "geometry", "morphology")
    for n in names:         # what an earlier test's proxy may have left (kornia's modules have none)
        if vars(getattr(kornia, n)).get("__annotations__") == {}:
            del getattr(kornia, n).__annotations__
    before = {n: dict(vars(getattr(kornia, n))) for n in names}
    traced = lazytrace.trace_graph(kornia, max_signatures=17)      # options of its own: a new proxy
    x = torch.rand(1, 3, 16, 16)
    traced.filters.gaussian_blur2d(x, (3, 3), (1.0, 1.0))
    traced.color.rgb_to_hsv(x)
    traced.enhance.invert(x)
    traced.geometry.transform.hflip(x)
    traced.morphology.dilation(x, torch.ones(3, 3))
    for n in names:
        after = vars(getattr(kornia, n))
        assert set(after) == set(before[n]), (n, set(after) ^ set(before[n]))
        assert all(after[k] is v for k, v in before[n].items()), n

"""Whole libraries on other frameworks through enable(), as with kornia: a JAX library (dm-pix),
a NumPy library (pymap3d), and einops on all four frameworks. Outputs equal eager on new inputs."""
import importlib

import numpy as np
import pytest

import lazytrace


def test_dm_pix_through_enable():
    jax = pytest.importorskip("jax")
    eager = pytest.importorskip("dm_pix", reason="dm-pix is not installed (pip install -e '.[libraries]')")
    with lazytrace.enable("dm_pix"):
        pix = importlib.import_module("dm_pix")
        from dm_pix import gaussian_blur
    assert isinstance(gaussian_blur, lazytrace.LazyGraph) and pix is not eager
    cases = [lambda m, x: m.gaussian_blur(x, 1.5, 5), lambda m, x: m.adjust_contrast(x, 1.4),
             lambda m, x: m.rgb_to_hsv(x), lambda m, x: m.ssim(x, x * 0.9),
             lambda m, x: m.random_brightness(jax.random.key(3), x, 0.3), lambda m, x: m.rot90(x, 1)]
    for seed in range(3):
        x = jax.random.uniform(jax.random.key(seed), (16, 16, 3))
        for case in cases:
            assert np.array_equal(case(pix, x), case(eager, x))
    for name in ("gaussian_blur", "adjust_contrast", "rgb_to_hsv", "ssim", "random_brightness", "rot90"):
        stats = getattr(pix, name).stats
        assert stats.traces == 1 and stats.hits == 2 and stats.eager == 0, (name, stats)


def test_pymap3d_through_enable():
    eager = pytest.importorskip("pymap3d", reason="pymap3d is not installed (pip install -e '.[libraries]')")
    with lazytrace.enable("pymap3d"):
        pm = importlib.import_module("pymap3d")
    for seed in range(3):
        rng = np.random.default_rng(seed)
        lat, lon, alt = rng.uniform(-80, 80, 50), rng.uniform(-170, 170, 50), rng.uniform(0, 1e3, 50)
        for name in ("geodetic2enu", "geodetic2aer", "enu2ecef"):
            got = getattr(pm, name)(lat, lon, alt, 42.0, -82.0, 200.0)
            expected = getattr(eager, name)(lat, lon, alt, 42.0, -82.0, 200.0)
            assert all(np.array_equal(g, e) for g, e in zip(got, expected))
        got = pm.ecef2geodetic(*eager.geodetic2ecef(lat, lon, alt))      # calls np.asarray: eager
        assert all(np.array_equal(g, e) for g, e in zip(got, eager.ecef2geodetic(
            *eager.geodetic2ecef(lat, lon, alt))))
    assert pm.geodetic2enu.stats.hits == 2 and pm.enu2ecef.stats.hits == 2
    assert pm.ecef2geodetic.stats.eager == 3


def test_einops_with_arrays_of_all_four_frameworks(fw):
    einops = pytest.importorskip("einops")
    traced = lazytrace.trace_graph(einops)
    einops.rearrange(fw.rand(1), "a -> a")     # einops fills its backend cache on first use (a retrace)
    for seed in range(3):
        x = fw.rand(2, 3, 4, seed=seed)
        assert fw.equal(traced.rearrange(x, "b c h -> b (h c)"), einops.rearrange(x, "b c h -> b (h c)"))
        assert fw.equal(traced.reduce(x, "b c h -> b c", "max"), einops.reduce(x, "b c h -> b c", "max"))
    # NumPy and TF included: einops picks a backend by isinstance, which their tracers answer as
    # their arrays do
    assert traced.rearrange.stats.hits == 2 and traced.reduce.stats.hits == 2

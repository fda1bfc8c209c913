"""A fixed-seed, bounded slice of the kornia differential fuzzer (tests/fuzz_kornia.py): every
kornia case through a LazyGraph and the kornia proxy, and kornia module classes, on random input
sequences, compared with eager kornia."""
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("kornia")
import fuzz_kornia  # noqa: E402


def test_the_fuzzer_finds_a_stale_result():
    fn = fuzz_kornia.kornia.color.rgb_to_grayscale
    cache = {}

    def stale(x):           # what a graph keyed on the shape alone would return
        return cache.setdefault(x.shape, fn(x))

    report = fuzz_kornia.Report()
    target = fuzz_kornia.Target("stale", fn, stale, lambda var, seed: [fuzz_kornia.image(var, 3, seed)])
    fuzz_kornia.run_target(target, np.random.default_rng(0), 10, report)
    assert report.problems


def test_kornia_through_lazytrace_equals_eager_on_random_input_sequences():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = fuzz_kornia.fuzz(seed=0, calls=6, module_calls=8)
    assert not report.problems, "\n".join(report.problems[:20])
    assert report.stats["hits"] > report.calls // 5       # graphs were replayed, not only traced
    assert torch.get_default_dtype() == torch.float32


def test_kornia_through_the_import_hook_equals_eager_on_random_input_sequences():
    """The same through `with lazytrace.enable("kornia"): import kornia` and `from kornia.X import name`."""
    import sys
    real = sys.modules["kornia"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = fuzz_kornia.fuzz(seed=0, calls=3, module_calls=4, hook=True)
    assert not report.problems, "\n".join(report.problems[:20])
    assert sys.modules["kornia"] is real and report.stats["hits"] > 0

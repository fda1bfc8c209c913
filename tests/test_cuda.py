"""CUDA behaviour (skipped without a GPU; run on a GPU machine with `pytest tests/test_cuda.py`)."""
import pytest
import torch

import lazytrace

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_graphs_on_cuda_equal_eager_bit_for_bit():
    def fn(x, k):
        return torch.nn.functional.conv2d(x * 0.5 + 0.1, k, padding=1).sigmoid() / 3.0

    lazy = lazytrace.trace_graph(fn)
    k = torch.rand(4, 3, 3, 3, device="cuda")
    for seed in range(3):
        x = torch.rand(2, 3, 16, 16, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))
        assert torch.equal(lazy(x, k), fn(x, k))
    assert lazy.stats.hits == 2


def test_cuda_draws_replay_fresh_from_the_cuda_generator():
    fn = lambda x: x + torch.rand(x.shape, device=x.device)    # noqa: E731
    lazy = lazytrace.trace_graph(fn)
    x = torch.zeros(5, device="cuda")
    outs = []
    for _ in range(3):
        torch.cuda.manual_seed(7)
        got = lazy(x)
        torch.cuda.manual_seed(7)
        assert torch.equal(got, fn(x))
        outs.append(got)
    assert lazy.stats.hits == 2 and not torch.equal(lazy(x), lazy(x))


def test_cuda_reseeding_inside_runs_eagerly_and_autocast_inside_is_replayed():
    def reseed(x):
        torch.cuda.manual_seed(0)
        return x + torch.rand(x.shape, device=x.device)

    def half(x):
        with torch.autocast("cuda", dtype=torch.float16):
            return (x @ x).float()

    x = torch.rand(8, 8, device="cuda")
    for fn, hits in ((reseed, 0), (half, 2)):
        lazy = lazytrace.trace_graph(fn)
        for _ in range(3):
            assert torch.equal(lazy(x), fn(x))
        assert lazy.stats.hits == hits and not torch.is_autocast_enabled("cuda")


def test_cuda_autocast_around_the_call_is_keyed():
    lazy = lazytrace.trace_graph(lambda a: a @ a)
    x = torch.rand(8, 8, device="cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        assert lazy(x).dtype == torch.float16 and lazy(x).dtype == torch.float16
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert lazy(x).dtype == torch.bfloat16
    assert lazy(x).dtype == torch.float32 and lazy.stats.traces == 3

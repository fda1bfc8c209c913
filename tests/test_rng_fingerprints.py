"""The fingerprints of the global random generators a trace compares (backends/mtstate.py):
read from memory, they must see every draw the public getters see, the cached second Gaussian
included (`np.random.randn()` / `random.gauss()` may use it without touching the key)."""
import random

import numpy as np
import pytest

import lazytrace
from lazytrace.backends import _python_layout, _python_rng_token, get_backend

torch = pytest.importorskip("torch")


@pytest.fixture(params=["memory", "getter"])
def numpy_token(request, monkeypatch):
    """NumPy's rng_token, read from memory or (a layout not found) through get_state()."""
    backend = get_backend("numpy")
    backend.rng_token()
    if request.param == "getter":
        monkeypatch.setattr(backend._legacy, "_gauss", None)
    else:
        assert backend._legacy._gauss is not None, "the RandomState layout was not found here"
    return backend.rng_token


def _gaussian_cached():
    """np.random's state with a second Gaussian cached (has_gauss=1)."""
    np.random.seed(7)
    np.random.randn()
    assert np.random.get_state()[3] == 1


def test_numpy_token_sees_each_draw(numpy_token):
    np.random.seed(1)
    assert numpy_token() == numpy_token()
    before = numpy_token()
    np.random.randn()                   # a pair drawn: the key moves, has_gauss set
    first = numpy_token()
    np.random.randn()                   # the cached one used: the key stays
    second = numpy_token()
    assert len({before, first, second}) == 3
    np.random.randint(10)
    assert numpy_token() != second
    state = np.random.get_state()
    np.random.set_state(state[:3] + (1, 0.5))     # only the cached Gaussian set anew
    flipped = numpy_token()
    np.random.set_state(state)
    assert numpy_token() != flipped


def test_numpy_token_matches_the_getter_on_the_same_state(numpy_token):
    """Memory and getter agree on equal states (a trace may compare one with the other only if a
    bit generator is swapped meanwhile, which it then reports as a draw)."""
    _gaussian_cached()
    legacy = get_backend("numpy")._legacy
    assert numpy_token() == legacy._public(np.random.mtrand._rand)


def test_numpy_token_with_another_bit_generator(numpy_token):
    original = np.random.mtrand._rand._bit_generator
    np.random.set_bit_generator(np.random.PCG64(3))
    try:
        before = numpy_token()
        assert numpy_token() == before
        np.random.random_sample()
        assert numpy_token() != before
    finally:
        np.random.set_bit_generator(original)


def test_cached_gaussian_drawn_in_a_torch_function_is_not_baked(numpy_token):
    """The trace starts with a Gaussian cached: the function's one draw uses it, and the key does
    not move; the draw must still be seen (else the graph would return the traced value again)."""
    def fn(x):
        return x + float(np.random.randn())

    def twice(x):
        return x + float(np.random.randn()) + float(np.random.randn())

    x = torch.zeros(3)
    for f in (fn, twice):
        lazy = lazytrace.trace_graph(f)
        _gaussian_cached()
        outs = [lazy(x) for _ in range(3)]
        assert lazy.stats.hits == 0 and lazy.stats.eager == 3, lazy.stats.reasons
        assert "does not record" in next(iter(lazy.stats.reasons))
        assert not torch.equal(outs[1], outs[2])
        _gaussian_cached()
        assert torch.equal(outs[0], f(x))       # the first call drew what eager draws


def test_cached_gaussian_drawn_in_a_numpy_function_is_not_baked(numpy_token):
    def fn(x):
        return x + np.random.randn()

    lazy = lazytrace.trace_graph(fn)
    x = np.zeros(3)
    _gaussian_cached()
    first = lazy(x)
    _gaussian_cached()
    assert np.array_equal(first, fn(x))     # the first call returns what eager does
    second, third = lazy(x), lazy(x)
    assert lazy.stats.hits == 0 and not np.array_equal(second, third)


@pytest.mark.parametrize("how", ["memory", "getter"])
def test_python_random_token_sees_each_draw(how, monkeypatch):
    if how == "getter":
        monkeypatch.setattr(_python_layout(), "_offset", None)
    else:
        assert _python_layout()._offset is not None, "the random.Random layout was not found here"
    rng = random.Random(5)
    assert _python_rng_token(rng) == _python_rng_token(rng)
    tokens = [_python_rng_token(rng)]
    for draw in (rng.random, lambda: rng.gauss(0, 1), lambda: rng.gauss(0, 1), lambda: rng.getrandbits(3)):
        draw()
        tokens.append(_python_rng_token(rng))
    assert len(set(tokens)) == len(tokens)      # the second gauss moves only gauss_next
    rng.seed(5)
    assert _python_rng_token(rng) == tokens[0]


def test_cached_python_gaussian_drawn_in_a_torch_function_is_not_baked():
    def fn(x):
        return x + random.gauss(0, 1)

    lazy = lazytrace.trace_graph(fn)
    x = torch.zeros(3)
    random.seed(3)
    random.gauss(0, 1)          # the second of the pair is cached in gauss_next
    outs = [lazy(x) for _ in range(3)]
    assert lazy.stats.hits == 0 and "does not record" in next(iter(lazy.stats.reasons))
    assert not torch.equal(outs[1], outs[2])


def test_numpy_snapshot_puts_the_state_back(numpy_token):
    """snapshot_rng (what a trace undoes before the function runs again eagerly), from memory or
    through get_state(): the key, its position and the cached Gaussian come back."""
    backend = get_backend("numpy")
    _gaussian_cached()
    expected = np.random.get_state()
    restore = backend.snapshot_rng()
    np.random.randn(), np.random.randn(), np.random.randint(5, size=700)
    restore()
    now = np.random.get_state()
    assert np.array_equal(now[1], expected[1]) and now[2:] == expected[2:]
    drawn = np.random.randn()
    np.random.set_state(expected)
    assert drawn == np.random.randn()


def test_torch_enter_rngs_takes_the_snapshot_and_the_token_from_one_read():
    """Backend.enter_rngs (what TraceSession.__enter__ takes of the global RNG): torch's restore
    puts the CPU generator back, and its token is the one rng_token reads."""
    backend = get_backend("torch")
    restore, rngs = backend.enter_rngs()
    assert rngs == [(torch.random.default_generator, backend.rng_token(None))]
    drawn = torch.rand(700)
    assert backend.rng_token(None) != rngs[0][1]
    restore()
    assert backend.rng_token(None) == rngs[0][1]
    assert torch.equal(torch.rand(700), drawn)


@pytest.mark.parametrize("draw", ["random", "numpy", "torch"])
def test_a_draw_no_call_shows_between_the_fingerprints_of_a_trace_is_caught(draw):
    """The global generators' fingerprints taken as the function starts and after it returns
    (TraceSession.__enter__ / __exit__): a draw from Python's `random` or np.random in a torch
    function, or from torch's own generator through no call a trace sees (a C extension: here
    the generator's state set by hand), makes the signature eager."""
    seeds = iter(range(100, 200))

    def unseen_draw():
        if draw == "random":
            random.random()
        elif draw == "numpy":
            np.random.random()
        else:
            torch.random.default_generator.manual_seed(next(seeds))     # (no TorchFunctionMode sees it)

    def fn(x):
        unseen_draw()
        return x + 1

    lazy = lazytrace.trace_graph(fn)
    for _ in range(3):
        assert torch.equal(lazy(torch.ones(2)), torch.full((2,), 2.0))
    assert lazy.stats.hits == 0
    reason = lazy.eager_signatures[0]
    assert ("a generator lazytrace does not record" if draw != "torch" else "random") in reason, reason

"""Functions: array code, and the kinds that cannot become graphs."""
import functools
import types


def double(x):
    """Twice x."""
    return x * 2


def add_scaled(x, y, scale: float = 1.0):
    return x + y * scale


def inner(x):
    return x * 3


def outer(x):
    return inner(x) + 1


def count_up(x, n):
    for i in range(n):
        yield x + i


def describe(x):
    return types.SimpleNamespace(size=len(x), total=x.sum())


def fails(x):
    raise ValueError("fakelib.fails always fails")


def make_ones(n):
    import torch
    return torch.ones(n)


def _private(x):
    return x


@functools.lru_cache(maxsize=None)
def cached_table(n):
    return list(range(n))

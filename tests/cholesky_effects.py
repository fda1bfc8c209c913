"""Functions with an effect (they write into `acc` first) around a cholesky that raises on some
inputs, compared with eager: what tests of calls the function may catch or swallow share."""
import torch

import lazytrace


def matrix(positive: bool):
    """A positive-definite 3x3 matrix, or its negation (cholesky raises)."""
    a = torch.rand(3, 3, generator=torch.Generator().manual_seed(0))
    m = a @ a.T + 3 * torch.eye(3)
    return m if positive else -m


def run_like_eager(fn, positives=(True, False, True)):
    """fn(matrix, acc) writes into acc and may catch a failing cholesky: each call's result and
    writes equal eager's (a non-positive-definite matrix where `positive` is False); the LazyGraph."""
    lazy = lazytrace.trace_graph(fn)
    for positive in positives:
        acc_eager, acc_lazy = torch.zeros(3), torch.zeros(3)
        assert torch.equal(lazy(matrix(positive), acc_lazy), fn(matrix(positive), acc_eager))
        assert torch.equal(acc_lazy, acc_eager)
    return lazy

"""Review 11: neighbours of session 11's fixes (calls the function catches in a function with
effects, constants the caller shares, version counters, JAX masks, NumPy scalars), each compared
with eager on new inputs."""
import contextlib

import pytest

import lazytrace

torch = pytest.importorskip("torch")

from cholesky_effects import matrix as _matrix, run_like_eager as _run_like_eager  # noqa: E402


def _goes_on_as_in_eager(fn):
    """A later failing input takes the except path as in eager: the signature runs eagerly."""
    assert "try block" in next(iter(_run_like_eager(fn).stats.reasons))


def _second_clause_catches(m, acc):
    acc.add_(1)
    try:
        factor = torch.linalg.cholesky(m)
    except TypeError:                       # the first clause: keyed errors only ...
        factor = None
    except RuntimeError:                    # ... the second takes what a replay could raise
        factor = torch.zeros(3, 3)
    return factor


def _finally_inside_the_try(m, acc):
    acc.add_(1)
    try:
        try:
            factor = torch.linalg.cholesky(m)
        finally:
            pass
    except RuntimeError:
        factor = torch.zeros(3, 3)
    return factor


def _with_inside_the_try(m, acc):
    acc.add_(1)
    try:
        with contextlib.nullcontext():     # (torch.no_grad() would call torch in the try itself)
            factor = torch.linalg.cholesky(m)
    except RuntimeError:
        factor = torch.zeros(3, 3)
    return factor


@pytest.mark.parametrize("fn", [_second_clause_catches, _finally_inside_the_try, _with_inside_the_try])
def test_an_except_clause_after_another_or_around_a_with_or_finally_counts(fn):
    """The except clause that takes the exception is not the first of its try, or the call is in
    a `with` block or a try/finally inside the try: the exception reaches the clause all the same.
    A function with effects whose call raises at a later call goes on as in eager (the graph
    raised _LinAlgError to the caller)."""
    _goes_on_as_in_eager(fn)


def _two_keyed_clauses(m, acc):
    acc.add_(1)
    try:
        factor = torch.linalg.cholesky(m)
    except TypeError:
        factor = None
    except AttributeError:
        factor = None
    return factor


def test_except_clauses_for_keyed_errors_only_keep_the_graph():
    lazy = _run_like_eager(_two_keyed_clauses, (True,) * 3)
    assert lazy.stats.hits == 2


def _suppressed(m, acc):
    acc.add_(1)
    factor = torch.zeros(3, 3)
    with contextlib.suppress(RuntimeError):
        factor = torch.linalg.cholesky(m)
    return factor


def test_a_call_under_contextlib_suppress_in_a_function_with_effects_goes_on_as_in_eager():
    lazy = lazytrace.trace_graph(_suppressed)
    for positive in (True, False):
        acc_eager, acc_lazy = torch.zeros(3), torch.zeros(3)
        assert torch.equal(lazy(_matrix(positive), acc_lazy), _suppressed(_matrix(positive), acc_eager))
        assert torch.equal(acc_lazy, acc_eager)


def _version_of_a_view(x):
    return x[1:] * 0 + x[1:]._version


def _version_of_a_detached_input(x):
    return x * 0 + x.detach()._version


def _version_of_a_transpose(x):
    return x * 0 + x.unsqueeze(0).mT._version


def _version_after_writing(x):
    x.add_(1)
    return x * 0 + x._version


@pytest.mark.parametrize("fn", [_version_of_a_view, _version_of_a_detached_input, _version_of_a_transpose,
                                _version_after_writing])
def test_the_version_counter_of_memory_the_caller_passed_is_not_baked(fn):
    """A view of an input, its detached tensor, an input the function wrote: a tensor the trace
    made that shares the input's version counter; its count was baked (the trace's, at every
    replay) where only tensors the trace allocated have a count fixed by the graph."""
    lazy = lazytrace.trace_graph(fn)
    for writes in (0, 1, 2):
        x_eager, x_lazy = torch.ones(3), torch.ones(3)
        for _ in range(writes):
            x_eager.mul_(1)
            x_lazy.mul_(1)
        assert torch.equal(lazy(x_lazy), fn(x_eager))
        assert x_lazy._version == x_eager._version


def test_the_version_counter_of_a_tensor_the_trace_made_stays_in_the_graph():
    def fn(x):
        y = x * 2
        y.add_(1)
        return y * 0 + y._version
    lazy = lazytrace.trace_graph(fn)
    for writes in (0, 1, 2):
        x = torch.ones(3)
        for _ in range(writes):
            x.mul_(1)
        assert torch.equal(lazy(x), fn(x))
    assert lazy.stats.hits == 2


def _reraises(m, acc):
    acc.add_(1)
    try:
        return torch.linalg.cholesky(m)
    except RuntimeError:
        raise                               # as if there were no try: the exception goes on


def test_an_except_clause_that_only_raises_again_keeps_the_graph():
    """The clause takes nothing, as the caller's own try block takes nothing (not counted): the
    signature replays, and a replay whose call raises raises what eager raises."""
    lazy = _run_like_eager(_reraises, (True,) * 3)
    assert lazy.stats.hits == 2
    acc_eager, acc_lazy = torch.zeros(3), torch.zeros(3)
    with pytest.raises(RuntimeError) as eager_error:
        _reraises(_matrix(False), acc_eager)
    with pytest.raises(type(eager_error.value)):
        lazy(_matrix(False), acc_lazy)
    assert torch.equal(acc_lazy, acc_eager)


def _reraises_then_recovers(m, acc):
    acc.add_(1)
    try:
        return torch.linalg.cholesky(m)
    except ValueError:
        raise
    except RuntimeError:
        return torch.zeros(3, 3)


def test_a_clause_after_one_that_only_raises_again_counts():
    _goes_on_as_in_eager(_reraises_then_recovers)

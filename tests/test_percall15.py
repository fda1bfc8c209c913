"""Session 15's per-call changes, eager against LazyGraph on new inputs: the arrays a recorded call
may write are those the tracer's _lift found (handed to the torch backend's run, no second scan);
PythonReads.on_call answers a call from a walked frame from that frame's own block table and
_below at once (the frame's instruction in a try block must still be seen)."""
import contextlib

import pytest

import lazytrace

torch = pytest.importorskip("torch")

from cholesky_effects import matrix as _matrix  # noqa: E402


# -- the arrays a recorded call writes, found by the tracer's _lift (handed to the backend's run)

def _writes_through_lists_keywords_and_indices(x, acc):
    y = x * 2
    z = torch.empty(3)
    torch._foreach_add_([y, acc], 1.0)                # arrays in a list, written in place
    torch.add(y, 1, out=z)                            # a keyword argument written
    acc.index_put_((torch.tensor([0, 2]),), z[:2], accumulate=True)    # indices in a tuple
    return y + z


def test_writes_into_arrays_in_lists_keywords_and_tuples_like_eager():
    lazy = lazytrace.trace_graph(_writes_through_lists_keywords_and_indices)
    for _ in range(3):
        x = torch.rand(3)
        acc_eager, acc_lazy = torch.ones(3), torch.ones(3)
        assert torch.equal(lazy(x, acc_lazy), _writes_through_lists_keywords_and_indices(x, acc_eager))
        assert torch.equal(acc_lazy, acc_eager)
    assert lazy.stats.hits == 2


# -- a walked frame whose own instruction is in a try block at its next call

def _helper_with_own_try(m, acc):
    acc.add_(1)                             # the first call from this frame: walked
    acc.add_(1)                             # the second: what is below it worked out (_below)
    try:
        return torch.linalg.cholesky(m)     # the third, from the same frame, now in a try block
    except RuntimeError:
        return torch.zeros(3, 3)


def _calls_helper_with_own_try(m, acc):
    return _helper_with_own_try(m, acc) * 2


def _after_a_block(m, acc):
    acc.add_(1)
    try:
        acc.add_(1)                         # in a try block
    except RuntimeError:
        pass
    acc.add_(1)
    return torch.linalg.cholesky(m)         # out of it: an error here reaches the caller


def _calls_after_a_block(m, acc):
    with contextlib.suppress(ValueError):   # (a block below that cannot take the error)
        return _after_a_block(m, acc) + 1
    return None


@pytest.mark.parametrize("fn", [_calls_helper_with_own_try, _calls_after_a_block])
def test_a_walked_frames_own_block_is_seen_at_each_call(fn):
    lazy = lazytrace.trace_graph(fn)
    for positive in (True, False, True, False):
        outcomes = []
        for call in (fn, lazy):
            acc = torch.zeros(3)
            try:
                outcomes.append((call(_matrix(positive), acc), acc))
            except RuntimeError as e:
                outcomes.append((type(e), acc))
        (expected, acc_eager), (got, acc_lazy) = outcomes
        assert torch.equal(acc_lazy, acc_eager)
        assert got is expected if isinstance(expected, type) else torch.equal(got, expected)

"""Red team 11: memory shared between constants and what the caller gets, the remembered static
walk, the compiled hit check, warnings attributed to the caller, persistence across processes;
each compared with eager on new inputs."""
import numpy as np
import pytest

import lazytrace

torch = pytest.importorskip("torch")


def _rand(*shape, seed):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def _view_then_write(x):
    grid = torch.zeros(5)
    head = grid[:2]                         # a view of a constant, taken before ...
    grid.add_(x)                            # ... a write that depends on x
    return head


def _view_then_write_then_use(x):
    grid = torch.zeros(5)
    head = grid[:2]
    grid.add_(x)
    return head * 2


@pytest.mark.parametrize("fn", [_view_then_write, _view_then_write_then_use])
def test_a_view_of_a_constant_written_later_holds_each_calls_values(fn):
    """A view taken of a constant before an input-dependent write into its memory reads what the
    write left (it was folded with the first call's values)."""
    lazy = lazytrace.trace_graph(fn)
    for seed in range(3):
        x = _rand(5, seed=seed)
        assert torch.equal(lazy(x), fn(x))
    assert lazy.stats.hits == 2


def _tail_from_the_largest(x):
    grid = torch.zeros(5)
    return grid[x.argmax():]                # a view of a constant, at an index read from x


def test_a_returned_view_of_a_constant_cannot_change_later_calls():
    """The caller writes into a returned view of a constant (made at every call, as in eager); it
    was the graph's own constant: later calls returned what the caller wrote."""
    lazy = lazytrace.trace_graph(_tail_from_the_largest)
    for seed in range(4):
        x = _rand(5, seed=seed)
        out = lazy(x)
        assert torch.equal(out, _tail_from_the_largest(x))
        out.fill_(7.0)
    assert lazy.stats.hits >= 1


def _numpy_grid_and_its_row(x):
    grid = np.zeros((2, 3))                 # made by calls lazytrace does not see
    return grid, grid[0]


def test_numpy_arrays_made_unseen_and_returned_sharing_memory_share_it_as_in_eager():
    lazy = lazytrace.trace_graph(_numpy_grid_and_its_row)
    for seed in range(3):
        grid, row = lazy(np.random.default_rng(seed).random(3))
        grid.fill(1.0)
        assert np.array_equal(row, np.ones(3))

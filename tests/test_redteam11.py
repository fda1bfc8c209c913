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


def _writes_then_factors(x, a):
    x.mul_(2)
    try:
        factor = torch.linalg.cholesky(a)
    except RuntimeError:                    # not positive-definite: the function goes on
        factor = torch.zeros_like(a)
    return factor.sum() + x.sum()


def _factors_then_writes(x, a):
    try:
        factor = torch.linalg.cholesky(a)
    except RuntimeError:
        factor = torch.zeros_like(a)
    x.mul_(2)
    return factor.sum() + x.sum()


@pytest.mark.parametrize("fn", [_writes_then_factors, _factors_then_writes])
def test_a_call_the_function_catches_raising_at_a_later_call_goes_on_as_in_eager(fn):
    """A call inside try/except in a function that writes into its input: at a later call the
    call raises (a matrix that is not positive-definite); eager takes the except path, the graph
    raised _LinAlgError to the caller (it could not run the function again after the write)."""
    lazy = lazytrace.trace_graph(fn)
    for a in (torch.eye(2), -torch.eye(2), 2 * torch.eye(2)):
        x_eager, x_lazy = torch.ones(2), torch.ones(2)
        assert torch.equal(lazy(x_lazy, a), fn(x_eager, a))
        assert torch.equal(x_lazy, x_eager)
    assert "try block" in next(iter(lazy.stats.reasons))


def _writes_then_logs(x):
    x *= 2
    try:
        y = np.log(x - 2)
    except RuntimeWarning:                  # a warning made an error by the caller's filter
        y = np.zeros_like(x)
    return y


def test_a_warning_made_an_error_after_the_trace_takes_the_functions_except_path():
    import warnings
    lazy = lazytrace.trace_graph(_writes_then_logs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lazy(np.array([3.0, 4.0]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x_eager, x_lazy = np.array([1.0, 2.0]), np.array([1.0, 2.0])
        assert np.array_equal(lazy(x_lazy), _writes_then_logs(x_eager))
        assert np.array_equal(x_lazy, x_eager)


def test_calls_under_with_or_finally_still_trace_with_effects():
    """Only an except clause can take an exception: calls under `with` or `finally` (which raise
    it again) in a function with effects still give a graph."""
    def fn(x):
        x.mul_(2)
        with torch.no_grad():
            try:
                y = x + 1
            finally:
                pass
        return y
    lazy = lazytrace.trace_graph(fn)
    for seed in range(3):
        x_eager, x_lazy = _rand(3, seed=seed), _rand(3, seed=seed)
        assert torch.equal(lazy(x_lazy), fn(x_eager)) and torch.equal(x_lazy, x_eager)
    assert lazy.stats.hits == 2


def test_the_callers_own_try_block_does_not_make_a_function_with_effects_eager():
    def fn(x):
        x.mul_(2)
        return x + 1
    lazy = lazytrace.trace_graph(fn)
    for seed in range(3):
        try:
            out = lazy(_rand(3, seed=seed))
        except ValueError:
            raise AssertionError("not raised") from None
        assert torch.equal(out, _rand(3, seed=seed) * 2 + 1)
    assert lazy.stats.hits == 2


def _rounds_small_values(e, n):
    try:                                    # pymap3d's enu2aer: arrays, else numbers
        e[abs(e) < 1e-3] = 0.0
        n[abs(n) < 1e-3] = 0.0
    except TypeError:                       # raised for types only, which the key fixes
        e, n = float(e), float(n)
    return np.arctan2(e, n)


def test_an_except_clause_for_type_errors_only_keeps_the_graph():
    lazy = lazytrace.trace_graph(_rounds_small_values)
    rng = np.random.default_rng(0)
    for _ in range(3):
        e, n = rng.random(3) - 0.5, rng.random(3) - 0.5
        e[0] = 1e-4
        expected = _rounds_small_values(e.copy(), n.copy())
        assert np.array_equal(lazy(e, n), expected)
    assert lazy.stats.hits == 2


class _HoldsAView(torch.nn.Module):
    def forward(self, x):
        grid = torch.zeros(5)
        self.tail = grid[x.argmax():]       # a view of a constant, at an index read from x
        return x * 2


class _HoldsAConstantAndItsView(torch.nn.Module):
    def forward(self, x):
        grid = torch.zeros(5)
        self.grid, self.row = grid, grid[1:]
        return x * 2


class _WritesWhatItHolds(torch.nn.Module):
    def forward(self, x):
        grid = torch.zeros(3)
        self.grid = grid
        self.grid.add_(x)                   # writes the grid it returns
        return grid * 1


def test_an_attribute_holding_a_view_of_a_constant_cannot_change_later_calls():
    model = _HoldsAView()
    lazy = lazytrace.trace_graph(model)
    for seed in range(4):
        x = _rand(5, seed=seed)
        lazy(x)
        assert torch.equal(model.tail, torch.zeros(5 - int(x.argmax())))
        model.tail.fill_(7.0)               # the caller's write: eager's next call makes a new grid


def test_attributes_holding_a_constant_and_its_view_share_memory_as_in_eager():
    model = _HoldsAConstantAndItsView()
    lazy = lazytrace.trace_graph(model)
    for seed in range(3):
        lazy(_rand(3, seed=seed))
        model.grid.fill_(7.0)
        assert torch.equal(model.row, torch.full((4,), 7.0))


def test_an_attribute_set_to_a_constant_then_written_holds_the_write():
    model = _WritesWhatItHolds()
    lazy = lazytrace.trace_graph(model)
    for seed in range(3):
        x = _rand(3, seed=seed)
        assert torch.equal(lazy(x), x)
        assert torch.equal(model.grid, x)   # was the copy made before the write (zeros) at replays


class _Holder:
    pass


def _keeps_zeros(holder, x):
    holder.buf = np.zeros(3)                # made by a call lazytrace does not see
    return x + 1


def _keeps_zeros_and_a_row(holder, x):
    grid = np.zeros(3)
    holder.buf, holder.row = grid, grid[1:]
    return x + 1


def test_a_numpy_array_made_unseen_and_set_as_an_attribute_is_new_at_every_call():
    """The graph set its constant itself as the attribute: the caller's write into it reached
    every later call."""
    holder = _Holder()
    lazy = lazytrace.trace_graph(_keeps_zeros, arg_stateful_idxs=[0])
    for seed in range(3):
        lazy(holder, np.random.default_rng(seed).random(3))
        assert np.array_equal(holder.buf, np.zeros(3))
        holder.buf[:] = 7.0
    assert lazy.stats.hits == 2


def test_numpy_arrays_made_unseen_and_set_as_attributes_sharing_memory_share_it():
    holder = _Holder()
    lazy = lazytrace.trace_graph(_keeps_zeros_and_a_row, arg_stateful_idxs=[0])
    for seed in range(3):
        lazy(holder, np.random.default_rng(seed).random(3))
        holder.buf[:] = 7.0
        assert np.array_equal(holder.row, np.full(2, 7.0))


def _logs(x):
    return np.log(x) * 2                    # divide by zero: a RuntimeWarning from this module


@pytest.mark.parametrize("action", ["once", "module"])
def test_a_warning_shown_once_per_module_is_shown_once_with_replays(action):
    """The `once` and `module` actions look in the calling module's __warningregistry__; a
    graph's code had a registry of its own: every replay showed the warning once more."""
    import warnings

    def shown(fn):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter(action)
            for v in (1.0, 2.0, 3.0):
                fn(np.array([0.0, v]))
        return [(str(w.message), w.category) for w in caught]

    lazy = lazytrace.trace_graph(_logs)
    assert shown(lazy) == shown(_logs) and len(shown(_logs)) == 1
    assert lazy.stats.hits == 2

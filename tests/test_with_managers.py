"""A framework call in a `with` block, in a function with effects (it writes into an input first):
where the block's context manager may swallow the error (its `__exit__` returns True), a replay
whose call raises could not go on as eager does, so the signature runs eagerly; where the manager
is known to let errors through (grad mode, autocast, locks, a Python `__exit__` returning None, a
`@contextmanager` without an except around its yield), the graph is kept."""
import contextlib
import threading
import warnings

import pytest

import lazytrace

torch = pytest.importorskip("torch")

from cholesky_effects import matrix as _matrix, run_like_eager as _run_like_eager  # noqa: E402


def _goes_on_as_in_eager(fn):
    """A later failing input goes on as in eager: the signature runs eagerly, with the reason."""
    lazy = _run_like_eager(fn)
    assert lazy.stats.hits == 0
    assert "with block" in next(iter(lazy.stats.reasons))


class _Swallowing:
    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return True


class _LetsGo:
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            return None
        return False


@contextlib.contextmanager
def _catching():
    try:
        yield
    except RuntimeError:
        pass


@contextlib.contextmanager
def _cleaning_up():
    try:
        yield
    finally:
        pass


@contextlib.contextmanager
def _catching_keyed_errors_only():
    try:
        yield
    except (TypeError, AttributeError):
        pass


def _autocast_off():
    """A function returning a context manager (kornia's _autocast_disabled)."""
    if torch.is_autocast_enabled():
        return torch.autocast("cpu", enabled=False)
    return contextlib.nullcontext()


_LOCK = threading.Lock()


def _under(make_manager):
    def fn(m, acc):
        acc.add_(1)
        factor = torch.zeros(3, 3)
        with make_manager():
            factor = torch.linalg.cholesky(m)
        return factor
    return fn


def _held(make_manager):
    def fn(m, acc):
        acc.add_(1)
        factor = torch.zeros(3, 3)
        manager = make_manager()
        with manager:                       # (a local: the block takes no call)
            factor = torch.linalg.cholesky(m)
        return factor
    return fn


def _swallowing_or_not(swallow: bool):
    return _Swallowing() if swallow else contextlib.nullcontext()


def _nested_in_a_try(m, acc):
    """The error passes grad mode's block, then reaches the swallowing one; the except clause
    around both takes only keyed errors."""
    acc.add_(1)
    factor = torch.zeros(3, 3)
    try:
        with _Swallowing():
            with torch.no_grad():
                factor = torch.linalg.cholesky(m)
    except TypeError:
        factor = None
    return factor


def _cholesky_or_zeros(m):
    with contextlib.suppress(RuntimeError):
        return torch.linalg.cholesky(m)
    return torch.zeros(3, 3)


def _in_a_callee(m, acc):
    acc.add_(1)
    return _cholesky_or_zeros(m)


@pytest.mark.parametrize("fn", [
    _under(_Swallowing), _under(_catching), _under(lambda: _swallowing_or_not(True)), _held(_Swallowing),
    _held(_catching), _nested_in_a_try, _in_a_callee],
    ids=["exit_returns_true", "contextmanager_except", "factory_function", "local_exit_returns_true",
         "local_contextmanager_except", "nested_in_a_try", "in_a_callee"])
def test_a_call_under_a_manager_that_swallows_goes_on_as_in_eager(fn):
    _goes_on_as_in_eager(fn)


class _Holder:
    @property
    def manager(self):
        return contextlib.nullcontext()


def _behind_a_property(m, acc, holder=_Holder()):
    acc.add_(1)
    with holder.manager:
        factor = torch.linalg.cholesky(m)
    return factor


def test_a_manager_read_through_a_property_counts_as_swallowing():
    """Reading it would run the property's code: unknown, so counted (the graph is not kept)."""
    lazy = _run_like_eager(_behind_a_property, (True, True, True))
    assert lazy.stats.hits == 0
    assert "with block" in next(iter(lazy.stats.reasons))


@pytest.mark.parametrize("make_manager", [
    torch.no_grad, lambda: torch.autocast("cpu", enabled=False), warnings.catch_warnings,
    contextlib.nullcontext, lambda: _LOCK, _LetsGo, _cleaning_up, _catching_keyed_errors_only,
    _autocast_off, lambda: contextlib.suppress(TypeError, KeyError)],
    ids=["no_grad", "autocast", "catch_warnings", "nullcontext", "lock", "exit_returns_false",
         "contextmanager_finally", "contextmanager_keyed_except", "factory_function", "suppress_keyed"])
def test_a_manager_known_to_let_errors_through_keeps_the_graph(make_manager):
    """The manager is made by the function `make_manager` (a closure cell): read from the frame,
    as the function's code computes it."""
    lazy = _run_like_eager(_under(make_manager), (True, True, True))
    assert lazy.stats.hits == 2


def test_a_manager_that_swallows_keeps_the_graph_without_effects():
    """No effects: a replay whose call raises lets the function run instead, so the graph stays."""
    def fn(m):
        factor = torch.zeros(3, 3)
        with contextlib.suppress(RuntimeError):
            factor = torch.linalg.cholesky(m)
        return factor

    lazy = lazytrace.trace_graph(fn)
    for positive in (True, False, True):
        assert torch.equal(lazy(_matrix(positive)), fn(_matrix(positive)))
    assert lazy.stats.hits >= 1


def _with_a_lock_attribute(self, m, acc):
    acc.add_(1)
    with self.lock:
        factor = torch.linalg.cholesky(m)
    return factor


def test_a_lock_held_as_an_attribute_keeps_the_graph():
    holder = type("Holder", (), {})()
    holder.lock = threading.RLock()
    lazy = lazytrace.trace_graph(_with_a_lock_attribute, static_argnums=0)
    for _ in range(3):
        acc_eager, acc_lazy = torch.zeros(3), torch.zeros(3)
        assert torch.equal(lazy(holder, _matrix(True), acc_lazy), _with_a_lock_attribute(holder, _matrix(True), acc_eager))
        assert torch.equal(acc_lazy, acc_eager)
    assert lazy.stats.hits == 2

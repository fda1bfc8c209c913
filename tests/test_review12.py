"""Review of the with-block managers (graph/managers.py, graph/handlers.py): managers that may swallow an error but
were read as letting it through (a graph kept whose replay raised where eager went on), and reads
of a manager that ran user code or kept objects alive."""
import contextlib
import gc
import threading
import types
import weakref

import pytest

import lazytrace

torch = pytest.importorskip("torch")

from cholesky_effects import matrix as _matrix, run_like_eager as _run_like_eager  # noqa: E402
from test_with_managers import (_LetsGo, _Swallowing, _catching, _cleaning_up,  # noqa: E402
                                _goes_on_as_in_eager)


class _Decorator(contextlib.ContextDecorator):
    """Swallows the error or not (`self.swallow` is no constant: read as swallowing either way;
    the test of one letting errors through uses its subclass)."""
    def __init__(self, swallow: bool):
        self.swallow = swallow

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return self.swallow


class _DecoratorLettingGo(_Decorator):
    def __exit__(self, *exc_info):
        return False


# -- a manager used as a decorator: the with block is contextlib's (ContextDecorator.__call__)

@_catching()
def _cholesky_or_none(m):
    return torch.linalg.cholesky(m)


@_Decorator(swallow=True)
def _cholesky_or_none_too(m):
    return torch.linalg.cholesky(m)


def _decorated_callee(m, acc):
    acc.add_(1)
    factor = _cholesky_or_none(m)
    return torch.zeros(3, 3) if factor is None else factor


def _decorator_class_callee(m, acc):
    acc.add_(1)
    factor = _cholesky_or_none_too(m)
    return torch.zeros(3, 3) if factor is None else factor


@_catching()
def _decorated_itself(m, acc):
    acc.add_(1)
    return torch.linalg.cholesky(m)


def _decorated_itself_or_zeros(m, acc):
    factor = _decorated_itself(m, acc)
    return torch.zeros(3, 3) if factor is None else factor


# -- a @contextmanager whose generator catches in a generator it delegates to

def _catching_generator():
    try:
        yield
    except RuntimeError:
        pass


@contextlib.contextmanager
def _delegating():
    yield from _catching_generator()


def _under_delegating(m, acc):
    acc.add_(1)
    factor = torch.zeros(3, 3)
    with _delegating():
        factor = torch.linalg.cholesky(m)
    return factor


# -- a class whose instances are made by other code than object.__new__

class _NewGivesASwallowingOne:
    def __new__(cls):
        return _Swallowing()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return None


class _SwallowingMaker(type):
    def __call__(cls):
        return _Swallowing()


class _MetaGivesASwallowingOne(metaclass=_SwallowingMaker):
    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return None


def _under_new(m, acc):
    acc.add_(1)
    factor = torch.zeros(3, 3)
    with _NewGivesASwallowingOne():
        factor = torch.linalg.cholesky(m)
    return factor


def _under_meta(m, acc):
    acc.add_(1)
    factor = torch.zeros(3, 3)
    with _MetaGivesASwallowingOne():
        factor = torch.linalg.cholesky(m)
    return factor


# -- the name the manager was computed from, rebound in the block

class _EntersALetGo:
    """Swallows, but its __enter__ gives a manager that does not."""
    def __enter__(self):
        return _LetsGo()

    def __exit__(self, *exc_info):
        return True


def _as_the_same_name(m, acc):
    acc.add_(1)
    factor = torch.zeros(3, 3)
    manager = _EntersALetGo()
    with manager as manager:
        factor = torch.linalg.cholesky(m)
    return factor


def _rebound_in_the_block(m, acc):
    acc.add_(1)
    factor = torch.zeros(3, 3)
    manager = _Swallowing()
    with manager:
        manager = contextlib.nullcontext()
        factor = torch.linalg.cholesky(m)
    return factor


# -- an expression read as a shorter one: `make().swallowing()` read as `make()`

class _Builder:
    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return None

    def swallowing(self):
        return _Swallowing()


def _builder(_):
    return _Builder()


class _LetsGoMakingASwallowingOne(_LetsGo):
    def __call__(self):
        return _Swallowing()


def _manager_making(_):
    return _LetsGoMakingASwallowingOne()


def _call_of_a_call(m, acc):
    acc.add_(1)
    factor = torch.zeros(3, 3)
    with _manager_making(1)():
        factor = torch.linalg.cholesky(m)
    return factor


def _method_of_a_call(m, acc):
    acc.add_(1)
    factor = torch.zeros(3, 3)
    with _builder(1).swallowing():
        factor = torch.linalg.cholesky(m)
    return factor


def _suppress_with_shadowed_names(m, acc):
    acc.add_(1)
    factor = torch.zeros(3, 3)
    with contextlib.suppress(TypeError):        # (TypeError is RuntimeError in its globals)
        factor = torch.linalg.cholesky(m)
    return factor


_suppress_shadowed = types.FunctionType(_suppress_with_shadowed_names.__code__, {
    "torch": torch, "contextlib": contextlib, "TypeError": RuntimeError, "__name__": __name__})


class _ReplacingTheError:
    """Lets no error through as it came: the caller gets a ValueError where a replay raising
    would give it the framework's RuntimeError."""
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            raise ValueError("the factorization failed") from exc


def _under_a_replacing_manager(m, acc):
    acc.add_(1)
    with _ReplacingTheError():
        return torch.linalg.cholesky(m)


def _finally_raising(m, acc):
    acc.add_(1)
    failed = True
    try:
        factor = torch.linalg.cholesky(m)
        failed = False
    finally:
        if failed:
            raise ValueError("the factorization failed")
    return factor


def _or_zeros(fn):
    def caller(m, acc):
        try:
            return fn(m, acc)
        except ValueError:
            return torch.zeros(3, 3)
    return caller


@pytest.mark.parametrize("fn", [_under_a_replacing_manager, _finally_raising],
                         ids=["exit_raises_another", "finally_raises_another"])
def test_an_error_replaced_by_another_reaches_the_caller_as_in_eager(fn):
    """The traced function's error is replaced by the manager or the finally clause: its signature
    runs eagerly (as for an except clause raising another), so the caller gets the ValueError."""
    lazy = lazytrace.trace_graph(fn)
    for positive in (True, False, True):
        acc_eager, acc_lazy = torch.zeros(3), torch.zeros(3)
        assert torch.equal(_or_zeros(lazy)(_matrix(positive), acc_lazy), _or_zeros(fn)(_matrix(positive), acc_eager))
        assert torch.equal(acc_lazy, acc_eager)
    assert lazy.stats.hits == 0


from contextlib import suppress as _ignoring  # noqa: E402  (another name, same object)


def _suppress_under_another_name(m, acc):
    acc.add_(1)
    factor = torch.zeros(3, 3)
    with _ignoring(RuntimeError):
        factor = torch.linalg.cholesky(m)
    return factor


def _conditional(m, acc, swallow=True):
    acc.add_(1)
    factor = torch.zeros(3, 3)
    with _Swallowing() if swallow else contextlib.nullcontext():
        factor = torch.linalg.cholesky(m)
    return factor


def _subscript(m, acc):
    acc.add_(1)
    factor = torch.zeros(3, 3)
    managers = [_Swallowing()]
    with managers[0]:
        factor = torch.linalg.cholesky(m)
    return factor


def _walrus(m, acc):
    acc.add_(1)
    factor = torch.zeros(3, 3)
    with (manager := _Swallowing()):
        factor = torch.linalg.cholesky(m)
    return factor, manager


def _walrus_factor(m, acc):
    return _walrus(m, acc)[0]


class _SwallowingExit:
    def __exit__(self, *exc_info):
        return True


class _FromAMixin(_SwallowingExit):
    def __enter__(self):
        return self


def _returning_true(self, *exc_info):
    return True


class _ExitAssigned:
    __exit__ = _returning_true

    def __enter__(self):
        return self


class _NonConstant:
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        return exc_type is not None and issubclass(exc_type, RuntimeError)


class _AsksAnother:
    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return self.handled(*exc_info)

    def handled(self, *exc_info):
        return True


def _under(manager_class):
    def fn(m, acc):
        acc.add_(1)
        factor = torch.zeros(3, 3)
        with manager_class():
            factor = torch.linalg.cholesky(m)
        return factor
    return fn


@pytest.mark.parametrize("fn", [_suppress_under_another_name, _conditional, _subscript, _walrus_factor,
                                _under(_FromAMixin), _under(_ExitAssigned), _under(_NonConstant),
                                _under(_AsksAnother)],
                         ids=["suppress_under_another_name", "conditional", "subscript", "walrus", "exit_of_a_mixin",
                              "exit_assigned_in_the_class_body", "exit_returns_a_non_constant",
                              "exit_calls_another_method"])
def test_managers_read_or_not_count_as_swallowing(fn):
    """(Regression tests: right on main too.) A conditional, a subscript, a walrus are not read:
    they count as swallowing; so do an `__exit__` found on a base class or assigned in the class
    body that returns True, one returning a computed value or another method's."""
    _goes_on_as_in_eager(fn)


@pytest.mark.parametrize("fn", [
    _decorated_callee, _decorator_class_callee, _decorated_itself_or_zeros, _under_delegating,
    _under_new, _under_meta, _as_the_same_name, _rebound_in_the_block, _method_of_a_call, _call_of_a_call,
    _suppress_shadowed],
    ids=["contextmanager_decorating_a_callee", "context_decorator_class", "contextmanager_decorating_a_caller",
         "yield_from", "new_returns_another", "metaclass_call_returns_another", "as_the_same_name",
         "rebound_in_the_block", "method_of_a_call", "call_of_a_call", "suppress_shadowed_names"])
def test_a_manager_that_swallows_goes_on_as_in_eager(fn):
    _goes_on_as_in_eager(fn)


def test_the_traced_function_decorated_with_a_swallowing_manager():
    """The traced function is contextlib's wrapper itself: its with block is read too."""
    lazy = lazytrace.trace_graph(_decorated_itself)
    for positive in (True, False, True):
        acc_eager, acc_lazy = torch.zeros(3), torch.zeros(3)
        eager = _decorated_itself(_matrix(positive), acc_eager)
        got = lazy(_matrix(positive), acc_lazy)
        assert (got is None) == (eager is None) and (eager is None or torch.equal(got, eager))
        assert torch.equal(acc_lazy, acc_eager)
    assert lazy.stats.hits == 0


# -- what stays a graph: these managers let errors through

@_cleaning_up()
def _cholesky_cleaned_up(m):
    return torch.linalg.cholesky(m)


@_DecoratorLettingGo(swallow=False)
def _cholesky_let_go(m):
    return torch.linalg.cholesky(m)


def _keeps(call):
    def fn(m, acc):
        acc.add_(1)
        return call(m)
    return fn


def _suppress_keyed(m, acc):
    acc.add_(1)
    factor = torch.zeros(3, 3)
    with contextlib.suppress(TypeError, KeyError):
        factor = torch.linalg.cholesky(m)
    return factor


def _no_grad_then_nullcontext(m, acc):
    acc.add_(1)
    with torch.no_grad(), contextlib.nullcontext() as unused:
        factor = torch.linalg.cholesky(m)
    return factor


@pytest.mark.parametrize("fn", [_keeps(_cholesky_cleaned_up), _keeps(_cholesky_let_go), _suppress_keyed,
                                _no_grad_then_nullcontext],
                         ids=["contextmanager_decorator_finally", "context_decorator_letting_go",
                              "suppress_keyed", "two_items"])
def test_a_manager_that_lets_errors_through_keeps_the_graph(fn):
    lazy = _run_like_eager(fn, (True, True, True))
    assert lazy.stats.hits == 2


# -- reading a manager runs no code of the user's

class _Counting:
    reads = 0


class _ClassProperty:
    """`__class__` is a property (as for unittest.mock objects): isinstance() would run it."""
    @property
    def __class__(self):
        _Counting.reads += 1
        return _LetsGo

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return None


class _NoisyMeta(type):
    def __getattr__(cls, name):
        _Counting.reads += 1
        raise AttributeError(name)

    def __hash__(cls):
        _Counting.reads += 1
        return 0

    def __eq__(cls, other):
        _Counting.reads += 1
        return cls is other


class _NoisyClass(metaclass=_NoisyMeta):
    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return None


class _Factory:
    """A callable instance making managers; hashing it runs its code."""
    def __call__(self):
        return contextlib.nullcontext()

    def __hash__(self):
        _Counting.reads += 1
        return 0


class _Holder:
    def __init__(self):
        self.by_property = _ClassProperty()
        self.noisy = _NoisyClass()
        self.factory = _Factory()
        self.noisy_class = _NoisyClass


def _with_holder(holder, m, acc):
    acc.add_(1)
    with holder.by_property:
        m = m + 0
    with holder.noisy:
        m = m + 0
    with holder.factory():
        m = m + 0
    with holder.noisy_class():
        m = m + 0
    return m


def test_reading_managers_runs_no_user_code():
    """isinstance() reads `__class__`, hasattr() calls a metaclass's `__getattr__`, a dict lookup
    hashes and compares: none of them on a manager, its class or its factory."""
    holder = _Holder()
    lazy = lazytrace.trace_graph(_with_holder, static_argnums=0)
    _Counting.reads = 0
    for _ in range(3):
        acc_eager, acc_lazy = torch.zeros(3), torch.zeros(3)
        before = _Counting.reads
        eager = _with_holder(holder, _matrix(True), acc_eager)
        eager_reads = _Counting.reads - before      # (eager code itself reads nothing of them)
        assert torch.equal(lazy(holder, _matrix(True), acc_lazy), eager)
        assert torch.equal(acc_lazy, acc_eager)
        assert eager_reads == 0
    assert _Counting.reads == 0


def test_a_factory_read_is_not_kept_alive():
    """A manager factory made per call (a local function holding a large closure) is read and
    forgotten: the read answer does not keep it alive."""
    def make_fn():
        big = torch.zeros(1000)

        def factory():
            big.add_(0)
            return contextlib.nullcontext()

        def fn(m, acc):
            acc.add_(1)
            with factory():
                factor = torch.linalg.cholesky(m)
            return factor
        return fn, weakref.ref(factory)

    fn, factory = make_fn()
    lazy = lazytrace.trace_graph(fn)
    lazy(_matrix(True), torch.zeros(3))
    lazy(_matrix(True), torch.zeros(3))
    assert lazy.stats.hits == 1
    del fn, lazy
    gc.collect()
    assert factory() is None


# -- effects of a finally clause (or an __exit__) on the error path: code that runs when the call
# raises, which a replay that raised would skip (the signature is eager, as for an except clause)

def _finally_writes(m, acc):
    acc.add_(1)
    try:
        return torch.linalg.cholesky(m)
    finally:
        acc.mul_(2)


class _ExitWrites:
    def __init__(self, acc):
        self.acc = acc

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.acc.mul_(2)


def _exit_writes(m, acc):
    acc.add_(1)
    with _ExitWrites(acc):
        return torch.linalg.cholesky(m)


@contextlib.contextmanager
def _generator_writes(acc):
    try:
        yield
    finally:
        acc.mul_(2)


def _generator_manager_writes(m, acc):
    acc.add_(1)
    with _generator_writes(acc):
        return torch.linalg.cholesky(m)


def _finally_without_calls(m, acc):
    acc.add_(1)
    done = False
    try:
        factor = torch.linalg.cholesky(m)
    finally:
        done = True
    return factor if done else None


@pytest.mark.parametrize("fn", [_finally_writes, _exit_writes, _generator_manager_writes])
def test_a_replay_that_raises_makes_the_writes_of_a_finally_clause(fn):
    lazy = lazytrace.trace_graph(fn)
    for positive in (True, True, False):
        acc_eager, acc_lazy = torch.zeros(3), torch.zeros(3)
        with pytest.raises(RuntimeError) if not positive else contextlib.nullcontext():
            fn(_matrix(positive), acc_eager)
        with pytest.raises(RuntimeError) if not positive else contextlib.nullcontext():
            lazy(_matrix(positive), acc_lazy)
        assert torch.equal(acc_lazy, acc_eager)
    assert lazy.stats.hits == 0 and lazy.stats.eager == 3


def test_a_finally_clause_making_no_call_keeps_the_graph():
    lazy = lazytrace.trace_graph(_finally_without_calls)
    for _ in range(3):
        acc_eager, acc_lazy = torch.zeros(3), torch.zeros(3)
        assert torch.equal(lazy(_matrix(True), acc_lazy), _finally_without_calls(_matrix(True), acc_eager))
        assert torch.equal(acc_lazy, acc_eager)
    assert lazy.stats.hits == 2


class _OwnNew(_LetsGo):
    def __new__(cls):
        return super().__new__(cls)


_HELD_OWN_NEW = _OwnNew()


def _held_new(m, acc):
    acc.add_(1)
    with _HELD_OWN_NEW:
        factor = torch.linalg.cholesky(m)
    return factor


def test_a_manager_object_whose_class_has_a_new_keeps_the_graph():
    """Only a call of the class may give another manager: an object already made is read by its
    own class's __exit__."""
    lazy = _run_like_eager(_held_new, (True, True, True))
    assert lazy.stats.hits == 2


# -- less conservative: a lock in a `__slots__` entry is read (it counted as swallowing)

class _Slotted:
    __slots__ = ("lock",)

    def __init__(self):
        self.lock = threading.RLock()


def _with_a_slotted_lock(holder, m, acc):
    acc.add_(1)
    with holder.lock:
        factor = torch.linalg.cholesky(m)
    return factor


def test_a_lock_in_a_slot_keeps_the_graph():
    holder = _Slotted()
    lazy = lazytrace.trace_graph(_with_a_slotted_lock, static_argnums=0)
    for _ in range(3):
        acc_eager, acc_lazy = torch.zeros(3), torch.zeros(3)
        assert torch.equal(lazy(holder, _matrix(True), acc_lazy), _with_a_slotted_lock(holder, _matrix(True), acc_eager))
        assert torch.equal(acc_lazy, acc_eager)
    assert lazy.stats.hits == 2


# -- a recursive traced function: the outer call's except clause (the walk stopped at the first
# frame of the traced function's code, the innermost)

def _recursive(m, acc, depth=1):
    if depth == 0:
        return torch.linalg.cholesky(m)
    acc.add_(1)
    try:
        return _recursive(m, acc, depth - 1)
    except RuntimeError:
        return torch.zeros(3, 3)


def test_a_recursive_call_inside_the_outer_calls_try_goes_on_as_in_eager():
    lazy = _run_like_eager(_recursive)
    assert lazy.stats.hits == 0
    assert "except clause" in next(iter(lazy.stats.reasons))


# -- the static walk of what a function reads runs no code of the user's objects

_GETATTR_CALLS = []


class _AskedMeta(type):
    def __getattr__(cls, name):
        _GETATTR_CALLS.append(name)
        raise AttributeError(name)


class _AskedClass(metaclass=_AskedMeta):
    def __init__(self, x):
        self.x = x


class _AskedCallable:
    def __getattr__(self, name):
        _GETATTR_CALLS.append(name)
        raise AttributeError(name)

    def __call__(self, x):
        return x


_ASKED = _AskedCallable()


def _reaches_asked_objects(x):
    _AskedClass(x)
    _ASKED(x)
    return x * 2


def test_the_walk_of_a_functions_reads_calls_no_getattr_of_the_users():
    """A global class whose metaclass, or a callable object whose class, defines __getattr__: the
    walk asked them for __wrapped__ with hasattr, which ran that code during the trace."""
    _GETATTR_CALLS.clear()          # (pytest's collection asks module globals for attributes)
    lazy = lazytrace.trace_graph(_reaches_asked_objects)
    x = torch.rand(3)
    for _ in range(2):
        assert torch.equal(lazy(x), _reaches_asked_objects(x))
    assert _GETATTR_CALLS == [] and lazy.stats.hits == 1


class _AskedSlots:
    __slots__ = ()      # (no __dict__: hasattr(obj, "__dict__") fell back to its __getattr__)
    __getattr__, __call__ = _AskedCallable.__getattr__, _AskedCallable.__call__


def test_the_walk_asks_no_getattr_of_a_closure_variable_of_slots():
    """A callable object of slots held by a closure variable: whether it has a __dict__ (for its
    attributes' checks) and what it wraps (the user's code a graph checks) are read without it."""
    def make(helper):
        def run(x):
            return helper(x) * 2
        return run
    _GETATTR_CALLS.clear()
    run = make(_AskedSlots())
    lazy = lazytrace.trace_graph(run)
    x = torch.rand(3)
    for _ in range(2):
        assert torch.equal(lazy(x), run(x))
    assert _GETATTR_CALLS == [] and lazy.stats.hits == 1


# -- text of a constant array feeding the computation follows the print options

def _text_width(x):
    return x * len(str(torch.arange(3.0) / 3))


def test_text_of_a_constant_tensor_follows_the_print_options():
    """str() of a tensor the trace folded (no input in it) was baked: its text depends on
    torch.set_printoptions, which no key holds; now checked like a number read back."""
    lazy = lazytrace.trace_graph(_text_width)
    x = torch.ones(2)
    lazy(x), lazy(x)
    torch.set_printoptions(precision=2)
    try:
        assert torch.equal(lazy(x), _text_width(x))
    finally:
        torch.set_printoptions(profile="default")
    assert torch.equal(lazy(x), _text_width(x))

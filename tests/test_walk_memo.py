"""The static walk of a function's globals is remembered (graph/reads.py PythonReads.start) and
taken again at the next trace only where every read it made gives the same object: each case
below changes what the walk would find between two traces of the same function (a new signature
traces again), then changes data that only the new code reads. A remembered walk taken without
checking would leave that data unguarded: the last call would return a stale result."""
import importlib
import sys
import textwrap
import types

import numpy as np
import pytest

import lazytrace
from lazytrace.graph import reads


@pytest.fixture(autouse=True)
def _remember_every_walk(monkeypatch):
    """These small functions read fewer globals than reads._REMEMBER_FROM: remembered all the same,
    from their first walk on."""
    monkeypatch.setattr(reads, "_REMEMBER_FROM", 0)
    monkeypatch.setattr(reads, "_NOTE_FIRST_WALK", True)


def _case(source: str, name: str = "walk_case") -> dict:
    namespace = {"__name__": name}
    exec(textwrap.dedent(source), namespace)        # noqa: S102 - the test's own code
    return namespace


_HELPERS = """
    OFFSET = 1.0
    SCALE = 2.0

    def helper_a():
        return SCALE

    def helper_b():                 # makes no framework call: only the static walk sees OFFSET
        return SCALE + OFFSET

    def shadow(v):
        return v + OFFSET
"""


def _check(fn, namespace, change, data="OFFSET"):
    """Trace `fn` for one signature, `change` what the walk reads, trace another signature, then
    change the data only the new code reads: every result must be eager's."""
    lazy = lazytrace.trace_graph(fn)
    np.testing.assert_array_equal(lazy(np.ones(2)), fn(np.ones(2)))
    change(namespace)
    x = np.arange(3.0)
    np.testing.assert_array_equal(lazy(x), fn(x))
    namespace[data] = 7.0
    np.testing.assert_array_equal(lazy(x), fn(x))
    x = np.arange(3.0) + 1
    np.testing.assert_array_equal(lazy(x), fn(x))
    assert lazy.stats.eager == 0 and lazy.stats.hits >= 1
    return lazy


def test_a_global_rebound_to_another_function():
    ns = _case(_HELPERS + """
    helper = helper_a

    def fn(x):
        return x * helper()
    """)
    _check(ns["fn"], ns, lambda ns: ns.update(helper=ns["helper_b"]))


def test_a_function_code_replaced():
    ns = _case(_HELPERS + """
    def fn(x):
        return x * helper_a()
    """)
    _check(ns["fn"], ns, lambda ns: setattr(ns["helper_a"], "__code__", ns["helper_b"].__code__))


def test_the_traced_function_code_replaced():
    ns = _case(_HELPERS + """
    def fn(x):
        return x * helper_a()

    def fn_b(x):
        return x * helper_b()
    """)
    _check(ns["fn"], ns, lambda ns: setattr(ns["fn"], "__code__", ns["fn_b"].__code__))


def test_a_module_attribute_replaced():
    module = types.ModuleType("walk_case_module")
    ns = _case(_HELPERS + """
    def fn(x):
        return x * lib.helper()
    """)
    module.helper = ns["helper_a"]
    ns["lib"] = module
    _check(ns["fn"], ns, lambda ns: setattr(module, "helper", ns["helper_b"]))


def test_a_closure_variable_changed():
    ns = _case(_HELPERS + """
    def make():
        helper = helper_a
        def fn(x):
            return x * helper()
        return fn
    """)
    fn = ns["make"]()
    _check(fn, ns, lambda ns: setattr(fn.__closure__[0], "cell_contents", ns["helper_b"]))


@pytest.mark.parametrize("holder", ["Sub", "Base"])
def test_a_class_attribute_set(holder):
    """Sub.GAIN set on the subclass (it was read from Base), or changed on Base: read again."""
    ns = _case("""
    class Base:
        GAIN = 2.0

    class Sub(Base):
        pass

    def fn(x):
        return x * Sub.GAIN
    """)
    lazy = lazytrace.trace_graph(ns["fn"])
    lazy(np.ones(2))
    setattr(ns[holder], "GAIN", 5.0)
    x = np.arange(3.0)
    np.testing.assert_array_equal(lazy(x), x * 5.0)
    setattr(ns[holder], "GAIN", 6.0)            # the GAIN now read is guarded
    np.testing.assert_array_equal(lazy(x), x * 6.0)
    np.testing.assert_array_equal(lazy(np.ones(2)), np.ones(2) * 6.0)
    assert lazy.stats.eager == 0


def test_a_global_created_where_a_builtin_was_read():
    ns = _case(_HELPERS + """
    def fn(x):
        return x * abs(-SCALE)
    """)
    _check(ns["fn"], ns, lambda ns: ns.update(abs=ns["shadow"]))


def test_a_global_deleted_then_created():
    ns = _case(_HELPERS + """
    helper = helper_a

    def fn(x):
        return x * (helper() if "helper" in globals() else SCALE)
    """)

    def change(ns):
        del ns["helper"]
        lazytrace.trace_graph(ns["fn"])(np.ones(4))     # a trace while it is unbound
        ns["helper"] = ns["helper_b"]
    _check(ns["fn"], ns, change)


def test_a_module_reloaded(tmp_path, monkeypatch):
    path = tmp_path / "walk_case_reloaded.py"
    path.write_text("OFFSET = 1.0\n\ndef helper():\n    return 2.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("walk_case_reloaded")
    try:
        ns = _case("""
        def fn(x):
            return x * lib.helper()
        """)
        ns["lib"] = module

        def change(ns):
            path.write_text("OFFSET = 1.0\n\ndef helper():\n    return 2.0 + OFFSET\n")
            sys.modules.pop("__pycache__", None)
            importlib.invalidate_caches()
            importlib.reload(module)
        lazy = lazytrace.trace_graph(ns["fn"])
        lazy(np.ones(2))
        change(ns)
        x = np.arange(3.0)
        np.testing.assert_array_equal(lazy(x), x * 3.0)
        module.OFFSET = 7.0
        np.testing.assert_array_equal(lazy(x), x * 9.0)
    finally:
        sys.modules.pop("walk_case_reloaded", None)


def test_a_data_global_changed_is_read_again():
    ns = _case(_HELPERS + """
    def fn(x):
        return x * helper_b()
    """)
    _check(ns["fn"], ns, lambda ns: ns.update(SCALE=4.0), data="SCALE")


# ---- a remembered walk gives what a walk gives ------------------------------------------------
_FIELDS = ("globals", "cells", "objects", "defaults", "unbound", "states", "contexts", "generators", "packages",
           "code_globals", "code_values", "class_code", "framework_functions", "modules", "environment", "machine", "_imports",
           "_submodules_later", "root")


def _walk(fn, backend):
    from lazytrace.graph.tracer import TraceSession
    session = TraceSession(backend)
    session.reads.start(fn)
    return session.reads


def _state(walk) -> dict:
    state = {name: getattr(walk, name) for name in _FIELDS}
    state["guards"] = [(reader, args, repr(expected), what) for reader, args, expected, what in walk.guards()]
    state["codes"] = sorted(walk._codes)
    state["watched"] = sorted(walk._watched)
    return {k: sorted(map(repr, v)) if isinstance(v, set) else repr(v) for k, v in state.items()}


def test_a_remembered_walk_gives_the_same_reads_and_guards():
    kornia = pytest.importorskip("kornia")
    from lazytrace.backends import get_backend
    backend = get_backend("torch")
    for fn in (kornia.filters.gaussian_blur2d, kornia.filters.canny, kornia.color.rgb_to_hsv,
               kornia.geometry.warp_affine, kornia.enhance.equalize_clahe, kornia.augmentation.RandomHorizontalFlip.forward):
        reads._WALKS.pop(id(fn), None)
        walked = _walk(fn, backend)
        remembered = _walk(fn, backend)
        assert not walked.remembered and remembered.remembered, fn
        assert _state(remembered) == _state(walked), fn


def test_a_remembered_walk_does_not_keep_its_function_alive():
    import gc
    import weakref
    big = np.ones(1000)

    def make():
        held = big.copy()

        def fn(x):
            return x + held
        return fn
    fn = make()
    lazy = lazytrace.trace_graph(fn)
    lazy(np.ones(1000))
    key, ref = id(fn), weakref.ref(fn)
    assert key in reads._WALKS
    del fn, lazy
    gc.collect()
    assert ref() is None and key not in reads._WALKS


def test_a_function_walk_is_remembered_from_its_second_trace_on(monkeypatch):
    # (by default: a first walk noting its reads would cost more, and most functions trace once)
    monkeypatch.setattr(reads, "_NOTE_FIRST_WALK", False)
    ns = _case(_HELPERS + """
    def fn(x):
        return x * helper_b() + shadow(x)
    """)
    lazy = lazytrace.trace_graph(ns["fn"])
    for n in range(1, 4):                   # three signatures: three traces
        x = np.arange(float(n))
        np.testing.assert_array_equal(lazy(x), ns["fn"](x))
        assert (id(ns["fn"]) in reads._WALKS) is (n >= 2), n
    ns["OFFSET"] = 5.0                       # the remembered walk's guards: the graphs see it
    for n in range(1, 4):
        x = np.arange(float(n))
        np.testing.assert_array_equal(lazy(x), ns["fn"](x))
    assert lazy.stats.traces == 6 and lazy.stats.eager == 0

"""lazytrace.enable(): imports return traced proxies in the importing code only."""
import builtins
import importlib
import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

import fakelib
import lazytrace
from fakelib import ops
from lazytrace.importhook import ModuleProxy

TESTS = os.path.dirname(__file__)


def snapshot():
    return (dict(sys.modules), list(sys.meta_path), builtins.__import__, importlib.import_module,
            importlib.reload)


def assert_restored(before):
    modules, meta_path, imp, import_module, reload = before
    assert builtins.__import__ is imp and importlib.import_module is import_module and importlib.reload is reload
    assert sys.meta_path == meta_path
    assert all(sys.modules.get(name) is module for name, module in modules.items())
    assert not any(isinstance(m, ModuleProxy) for m in list(sys.modules.values()))


def test_every_import_form_gives_traced_objects_and_restores_everything(torch_fw):
    # lazytrace's first use imports dependencies that add finders of their own, once per process
    # (wrapt's post-import hooks, importlib_metadata's MetadataPathFinder): not the hook's; made
    # first here so that the test does not depend on the tests run before it
    import lazytrace.persist.identity  # noqa: F401
    lazytrace.trace_graph(lambda t: t + 1)(torch.rand(1))
    before = snapshot()
    with lazytrace.enable("fakelib") as enabled:
        import fakelib as lib
        import fakelib.sub.deep as deep
        from fakelib import double, sub
        from fakelib.ops import add_scaled
        dynamic = importlib.import_module("fakelib.sub")
        assert sys.meta_path == before[1] and sys.modules["fakelib"] is fakelib
    assert isinstance(lib, ModuleProxy) and lib.__wrapped__ is fakelib
    assert isinstance(deep, ModuleProxy) and deep.__wrapped__ is fakelib.sub.deep
    assert isinstance(sub, ModuleProxy) and dynamic is sub
    assert isinstance(double, lazytrace.LazyGraph) and double is lib.ops.double
    assert isinstance(add_scaled, lazytrace.LazyGraph)
    assert_restored(before)
    x = torch_fw.rand(3)
    assert torch.equal(double(x), x * 2) and torch.equal(double(x), x * 2)     # still works after exit
    assert double.stats.hits == 1
    assert enabled.summary()["fakelib"]["hits"] == 1
    import fakelib as again
    assert again is fakelib


def test_the_library_own_imports_see_real_modules():
    with lazytrace.enable("fakelib"):
        import fakelib as lib
        seen = lib.sub.probe_imports()
    assert seen[:5] == [fakelib, fakelib.ops, fakelib.ops, fakelib.blocks, fakelib.sub]
    assert seen[5] is ops.double


def test_lazytrace_itself_sees_real_modules():
    with lazytrace.enable("fakelib") as enabled:
        hook = enabled._hook
        assert hook.traced(fakelib, "lazytrace.backends.torch") is fakelib
        assert isinstance(hook.traced(fakelib, "user.code"), ModuleProxy)
    assert hook.traced(fakelib, "user.code") is fakelib


def test_star_import_gives_traced_objects():
    namespace = {"__name__": "user_module"}
    with lazytrace.enable("fakelib"):
        exec("from fakelib import *", namespace)
    assert isinstance(namespace["double"], lazytrace.LazyGraph) and namespace["SCALE"] == 2.5
    assert issubclass(namespace["Doubler"], fakelib.Doubler) and namespace["Doubler"] is not fakelib.Doubler


def test_disable_and_nested_enables():
    before = snapshot()
    outer = lazytrace.enable("fakelib", max_signatures=3)
    with lazytrace.enable("fakelib", max_signatures=5):
        import fakelib as inner_lib
    import fakelib as outer_lib
    assert inner_lib.double.max_signatures == 5 and outer_lib.double.max_signatures == 3
    lazytrace.disable("fakelib")
    import fakelib as plain
    assert plain is fakelib and outer.active == set()
    assert_restored(before)
    with lazytrace.enable("fakelib", "json", include_generators=False):
        import fakelib as lib
        import json
    assert isinstance(json, ModuleProxy) and json.dumps([1]) == "[1]"
    assert lib.double._options.include_generators is False and json.dumps._options.include_generators is False
    assert_restored(before)


def test_enable_rejects_bad_arguments():
    with pytest.raises(ValueError, match="top-level package"):
        lazytrace.enable("fakelib.ops")
    with pytest.raises(ValueError, match="top-level package"):
        lazytrace.enable("lazytrace")
    with pytest.raises(TypeError, match="unexpected options"):
        lazytrace.enable("fakelib", args=(1,))
    with pytest.raises(TypeError, match="needs the names"):
        lazytrace.enable()


def test_threads_importing_and_calling_at_once(torch_fw):
    barrier = threading.Barrier(2)
    results, errors = {}, []
    x = torch_fw.rand(4)

    def worker(i):
        try:
            barrier.wait()
            from fakelib.ops import outer
            import fakelib as lib
            results[i] = (outer, lib, [outer(x) for _ in range(20)])
        except Exception as exc:       # pragma: no cover - reported below
            errors.append(exc)

    with lazytrace.enable("fakelib"):
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    (f0, lib0, out0), (f1, lib1, out1) = results[0], results[1]
    assert f0 is f1 and lib0 is lib1 and isinstance(f0, lazytrace.LazyGraph)
    assert all(torch.equal(o, ops.outer(x)) for o in out0 + out1)
    assert f0.stats.traces == 1 and f0.stats.hits == 39


def run_python(tmp_path, code, *args, env=None):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), TESTS]), **(env or {})}
    proc = subprocess.run([sys.executable, *args], cwd=tmp_path, env=environment, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_reload_of_a_hooked_module(tmp_path):
    (tmp_path / "reloadlib").mkdir()
    source = tmp_path / "reloadlib" / "__init__.py"
    source.write_text("def scale(x):\n    return x * 2\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with lazytrace.enable("reloadlib"):
            import reloadlib
            x = torch.ones(2)
            assert torch.equal(reloadlib.scale(x), x * 2)
            source.write_text("def scale(x):\n    return x * 3\n")
            importlib.invalidate_caches()
            os.utime(source, (0, 10**9))       # a new mtime: the cached bytecode is stale
            assert importlib.reload(reloadlib) is reloadlib
            assert isinstance(reloadlib.scale, lazytrace.LazyGraph)
            assert torch.equal(reloadlib.scale(x), x * 3)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("reloadlib", None)


def test_first_import_inside_enable_and_python_m(tmp_path):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "main.py").write_text(textwrap.dedent("""
        import sys
        import lazytrace
        assert "fakelib" not in sys.modules
        lazytrace.enable("fakelib")
        import torch
        import fakelib
        from fakelib import double
        x = torch.ones(2)
        double(x); double(x)
        print(type(fakelib).__name__, type(double).__name__, double.stats.hits)
    """))
    out = run_python(tmp_path, "", "-m", "app.main")
    assert out.split() == ["ModuleProxy[fakelib]", "LazyGraph", "1"]


def test_kornia_imported_first_inside_enable_equals_eager(tmp_path):
    """The route a user takes: kornia's first import in the process happens under enable() (its
    submodules import one another through the hook), then functions through the proxy and through
    `from kornia.X import name`, compared exactly with real kornia on new inputs."""
    pytest.importorskip("kornia")
    out = run_python(tmp_path, """
        import sys
        import torch
        import lazytrace
        assert "kornia" not in sys.modules
        with lazytrace.enable("kornia"):
            import kornia
            from kornia.filters import gaussian_blur2d
            from kornia.color import rgb_to_hsv
        import kornia_cases                       # the real kornia, as sys.modules keeps it
        assert type(kornia).__name__ == "ModuleProxy[kornia]" and sys.modules["kornia"] is not kornia
        checked = hits = 0
        for name, real, make in kornia_cases.CASES:
            traced = kornia
            for part in name.split("."):
                traced = getattr(traced, part)
            for seed in (0, 1, 2):
                args = make(seed)
                got, want = traced(*args), real(*args)
                got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
                assert len(got) == len(want) and all(torch.equal(g, w) for g, w in zip(got, want)), (name, seed)
            checked += 1
            hits += traced.stats.hits
        x = torch.rand(1, 3, 16, 16)
        for fn, real in ((gaussian_blur2d, kornia_cases.KF.gaussian_blur2d), (rgb_to_hsv, kornia_cases.KC.rgb_to_hsv)):
            args = (x, (3, 3), (1.5, 1.5)) if real is kornia_cases.KF.gaussian_blur2d else (x,)
            assert isinstance(fn, lazytrace.LazyGraph) and torch.equal(fn(*args), real(*args)) and torch.equal(fn(*args), real(*args))
        print(checked, hits > checked)
    """, "script.py")
    checked, hit = out.split()
    assert int(checked) >= 30 and hit == "True"


def test_environment_variable_disables_everything(tmp_path):
    out = run_python(tmp_path, """
        import lazytrace, torch, fakelib
        with lazytrace.enable("fakelib"):
            import fakelib as lib
        traced = lazytrace.trace_graph(fakelib)
        x = torch.ones(2)
        traced.double(x); traced.double(x)
        print(lib is fakelib, traced.double.stats.traces, traced.double.stats.hits)
    """, "script.py", env={"LAZYTRACE_DISABLE": "1"})
    assert out.split() == ["True", "0", "0"]


def test_a_traced_class_mixes_with_abc_as_the_original_does():
    """A user class deriving from a traced class and abc.ABC (a metaclass conflict with the traced
    class's own metaclass, before): it is made as in eager, keeps ABC's rules (an abstract method
    stops instantiation) and the traced forward; a class that is not an ABC in eager keeps type's
    rules (an @abstractmethod-marked method does not stop instantiation)."""
    import abc

    with lazytrace.enable("fakelib"):
        import fakelib as lib

    def made(base, *mixins, abstract=False):
        body = {"extra": abc.abstractmethod(lambda self: None)} if abstract else {}
        return type("Mine", (base, *mixins), body)

    for base in (lib.Doubler, fakelib.Doubler):     # traced and eager alike
        mixed = made(base, abc.ABC)
        x = torch.rand(3)
        assert torch.equal(mixed()(x), fakelib.Doubler()(x)) and isinstance(mixed(), fakelib.Doubler)
        with pytest.raises(TypeError, match="abstract"):
            made(base, abc.ABC, abstract=True)()
        assert isinstance(made(base, abstract=True)(), base)    # not an ABC: instantiable
    traced_mixed = made(lib.Doubler, abc.ABC)()
    traced_mixed(torch.rand(3)), traced_mixed(torch.rand(3))
    assert traced_mixed.forward.stats.hits == 1

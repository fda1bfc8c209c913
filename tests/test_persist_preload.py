"""Preload and prewarm: a fresh process loads the stored graphs of a library when its proxy is made
(of a function when its LazyGraph is made), so first calls are plain graph hits; prewarm runs
only graphs without visible effects, and never surfaces their failures."""
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import lazytrace
from conftest import stored_once
from lazytrace.persist import CacheWarning, GraphStore, identity, prewarm, read_description

LIBRARY = '''
import numpy as np
import torch

def np_scaled(x, n):
    return (np.sum(x * np.float32(1.5), axis=1) + np.exp(x).mean())[:n]

def blur(x, sigma):
    k = torch.arange(5, dtype=torch.float32) - 2
    k = torch.exp(-(k * k) / (2 * sigma * sigma))
    k = (k / k.sum()).reshape(1, 1, 1, 5).repeat(x.shape[1], 1, 1, 1)
    return torch.conv2d(torch.nn.functional.pad(x, (2, 2, 0, 0), mode="reflect"), k, groups=x.shape[1])

def shifted(x, y):
    return (x + y).T.contiguous()

def noisy(x):
    return x + torch.rand_like(x)

def bump(x):
    x.add_(1.0)
    return x * 2

def solve(a):
    return torch.linalg.inv(a) @ a.sum(dim=0)

def branchy(x):
    if x.sum() > 0:
        return x * 2
    return x - 1
'''


@pytest.fixture
def lib(temp_library):
    name, _ = temp_library(LIBRARY)
    return __import__(name)


def fresh(lib, cache, code: str, prewarm_on=False) -> dict:
    """Run `code` in a new process after `with enable(lib, cache=cache, prewarm=...): import lib as
    traced` (the real module is `real`; the RNG seeded before); `summary` is the library's summary right after the import,
    `warned` the CacheWarnings of the import. Returns the JSON it prints last."""
    prelude = f"""
        import json, sys, warnings, torch, lazytrace
        sys.path.insert(0, {os.path.dirname(lib.__file__)!r})
        cache = {str(cache)!r}
        torch.manual_seed(0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with lazytrace.enable({lib.__name__!r}, cache=cache, prewarm={prewarm_on}) as layer:
                import {lib.__name__} as traced
        real = sys.modules[{lib.__name__!r}]
        warned = [str(w.message) for w in caught if w.category.__name__ == "CacheWarning"]
        summary = layer.summary()[{lib.__name__!r}]
    """
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(prelude) + textwrap.dedent(code)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def store_calls(lib, cache, *calls):
    traced = lazytrace.trace_graph(lib, cache=cache)
    for name, args in calls:
        getattr(traced, name)(*args)
    return traced


def stored(cache):
    return sorted(cache.glob("*/*.lzt"))


def test_a_fresh_process_preloads_at_import_and_first_calls_are_hits(lib, tmp_path):
    cache = tmp_path / "cache"
    store_calls(lib, cache, ("blur", (torch.rand(1, 3, 8, 8), 1.5)), ("shifted", (torch.rand(3, 4), torch.rand(3, 4))))
    result = fresh(lib, cache, """
        at_import = {name: getattr(traced, name).stats.as_dict() for name in ("blur", "shifted")}
        x, y, z = torch.rand(1, 3, 8, 8), torch.rand(3, 4), torch.rand(3, 4)     # new inputs
        ok = [torch.equal(traced.blur(x, 1.5), real.blur(x, 1.5)), torch.equal(traced.shifted(y, z), real.shifted(y, z))]
        after = {name: getattr(traced, name).stats.as_dict() for name in ("blur", "shifted")}
        print(json.dumps({"summary": summary, "at_import": at_import, "after": after, "ok": ok, "warned": warned}))
    """)
    assert result["ok"] == [True, True] and result["warned"] == []
    assert result["summary"]["loaded"] == 2 and result["summary"]["traces"] == 0 and result["summary"]["calls"] == 0
    for name in ("blur", "shifted"):
        assert result["at_import"][name]["loaded"] == 1
        after = result["after"][name]
        assert after["loaded"] == 1 and after["traces"] == 0 and after["hits"] == after["calls"] == 1


def test_a_function_preloads_when_its_lazy_graph_is_made_up_to_max_signatures(lib, tmp_path):
    cache = tmp_path / "cache"
    maker = lazytrace.trace_graph(lib.shifted, cache=cache)
    for n in (2, 3, 4):
        maker(torch.rand(n, 3), torch.rand(n, 3))
    for age, path in enumerate(sorted(stored(cache), key=lambda p: p.stat().st_mtime)):
        os.utime(path, (1e9 + age, 1e9 + age))      # used in order n=2, 3, 4
    bounded = lazytrace.trace_graph(lib.shifted, cache=cache, max_signatures=2)
    assert bounded.stats.loaded == 2 and len(bounded.signatures) == 2
    assert bounded.stats.not_preloaded == {"more signatures stored than max_signatures": 1}
    assert all("args[0]" in "".join(s.signature) for s in bounded.signatures)
    for n in (3, 4):                                 # the two most recently used: hits
        x, y = torch.rand(n, 3), torch.rand(n, 3)
        assert torch.equal(bounded(x, y), lib.shifted(x, y))
    assert bounded.stats.hits == 2 and bounded.stats.loaded == 2 and bounded.stats.traces == 0
    x, y = torch.rand(2, 3), torch.rand(2, 3)       # the oldest: loaded at its call, as before
    assert torch.equal(bounded(x, y), lib.shifted(x, y))
    assert bounded.stats.loaded == 3 and bounded.stats.traces == 0


def test_numpy_signatures_are_preloaded_and_prewarmed(lib, tmp_path):
    import numpy as np
    cache = tmp_path / "cache"
    lazytrace.trace_graph(lib.np_scaled, cache=cache)(np.random.rand(4, 5).astype(np.float32), 3)
    again = lazytrace.trace_graph(lib.np_scaled, cache=cache, prewarm=True)
    assert again.stats.loaded == 1 and again.stats.prewarmed == 1
    x = np.random.rand(4, 5).astype(np.float32)
    assert np.array_equal(again(x, 3), lib.np_scaled(x, 3))
    assert again.stats.hits == 1 and again.stats.traces == 0 and again.stats.loaded == 1


def test_stale_entries_are_not_preloaded_and_the_call_traces(lib, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    store_calls(lib, cache, ("blur", (torch.rand(1, 3, 8, 8), 1.5)))
    source = open(lib.__file__).read()
    with open(lib.__file__, "w") as f:                 # the function's code changes
        f.write(source.replace("mode=\"reflect\"", "mode=\"replicate\""))
    result = fresh(lib, cache, """
        warnings.simplefilter("error", lazytrace.persist.CacheWarning)    # stale is a miss, not damage
        x = torch.rand(1, 3, 8, 8)
        ok = torch.equal(traced.blur(x, 1.5), real.blur(x, 1.5))
        print(json.dumps({"summary": summary, "ok": ok, "warned": warned, "after": traced.blur.stats.as_dict()}))
    """)
    assert result["ok"] and result["summary"]["loaded"] == 0 and result["warned"] == []
    assert result["after"]["traces"] == 1 and result["after"]["loaded"] == 0
    assert list(result["after"]["not_preloaded"]) == ["stored under another key (another version of the function, "
                                                      "its library, the framework or lazytrace, or another Python)"]

    with open(lib.__file__, "w") as f:
        f.write(source)
    identity.clear_caches()
    x, y = torch.rand(3, 4), torch.rand(3, 4)
    lazytrace.trace_graph(lib.shifted, cache=cache)(x, y)
    assert lazytrace.trace_graph(lib.shifted, cache=cache).stats.loaded == 1
    real = identity.importlib_metadata.version       # the framework's version changes
    monkeypatch.setattr(identity.importlib_metadata, "version", lambda d: "99.0" if d == "torch" else real(d))
    identity.clear_caches()
    upgraded = lazytrace.trace_graph(lib.shifted, cache=cache)
    assert upgraded.stats.loaded == 0
    assert torch.equal(upgraded(x, y), lib.shifted(x, y)) and upgraded.stats.traces == 1


def _rewrite_call(path, change):
    from safetensors.torch import load, save
    data = path.read_bytes()
    content, metadata = read_description(data)
    change(content["call"])
    path.write_bytes(save(load(data), metadata={**metadata, "lazytrace": json.dumps(content)}))


@pytest.mark.parametrize("damage", ["garbage", "truncated", "huge_call", "bad_dtype", "pickled_call"])
def test_a_damaged_file_is_refused_at_import_with_a_warning_and_traced_again(lib, tmp_path, damage):
    cache = tmp_path / "cache"
    store_calls(lib, cache, ("blur", (torch.rand(1, 3, 8, 8), 1.5)))
    (path,) = stored(cache)
    if damage == "garbage":
        path.write_bytes(os.urandom(path.stat().st_size))
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:-50])
    elif damage == "huge_call":     # would make an array of 10^12 elements
        _rewrite_call(path, lambda call: call["args"][0]["A"].__setitem__(0, [10**6, 10**6]))
    elif damage == "bad_dtype":
        _rewrite_call(path, lambda call: call["args"][0]["A"].__setitem__(2, ["torch", "load"]))
    else:
        _rewrite_call(path, lambda call: call["args"].__setitem__(0, {"p": "80049500"}))
    result = fresh(lib, cache, """
        x = torch.rand(1, 3, 8, 8)
        ok = torch.equal(traced.blur(x, 1.5), real.blur(x, 1.5))
        print(json.dumps({"summary": summary, "ok": ok, "warned": warned, "after": traced.blur.stats.as_dict()}))
    """)
    assert len(result["warned"]) == 1 and path.name in result["warned"][0]
    assert result["summary"]["loaded"] == 0
    assert result["ok"] and result["after"]["traces"] == 1 and result["after"]["stored"] == 1


def test_preload_follows_eviction(lib, tmp_path):
    cache = tmp_path / "cache"
    maker = lazytrace.trace_graph(lib.shifted, cache=cache)
    for n in (2, 3, 4):
        maker(torch.rand(n, 3), torch.rand(n, 3))
    files = stored(cache)
    assert len(lazytrace.trace_graph(lib.shifted, cache=cache).graphs) == 3
    store = GraphStore(cache, max_bytes=max(f.stat().st_size for f in files) + 1)
    assert len(store.evict()) == 2 and len(stored(cache)) == 1
    after = lazytrace.trace_graph(lib.shifted, cache=store)
    assert after.stats.loaded == 1 and len(after.graphs) == 1


def test_preloading_while_other_processes_write_never_sees_a_partial_file(lib, tmp_path):
    cache = tmp_path / "cache"
    prelude = (f"import json, sys, warnings, torch, lazytrace.persist; sys.path.insert(0, {os.path.dirname(lib.__file__)!r}); "
               f"import {lib.__name__} as lib; cache = {str(cache)!r}\n")
    writer = """
        f = lazytrace.trace_graph(lib.shifted, cache=cache)
        for n in range(2, 12):
            f(torch.rand(n, 3), torch.rand(n, 3))
    """
    reader = """
        warnings.simplefilter("error", lazytrace.persist.CacheWarning)
        most = 0
        for _ in range(30):
            f = lazytrace.trace_graph(lib.shifted, cache=cache)
            most = max(most, f.stats.loaded)
            for graph in f.graphs:          # every preloaded graph replays right on new inputs
                n = graph.key[0][0][1][0]
                x, y = torch.rand(n, 3), torch.rand(n, 3)
                assert torch.equal(f(x, y), lib.shifted(x, y))
            assert f.stats.traces == 0
        print(json.dumps({"most": most}))
    """
    procs = [subprocess.Popen([sys.executable, "-c", prelude + textwrap.dedent(code)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for code in (writer, writer, reader)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    assert len(stored(cache)) == 10


# ---- prewarm ----------------------------------------------------------------------------------

def test_prewarm_runs_only_graphs_without_visible_effects(lib, tmp_path):
    cache = tmp_path / "cache"
    store_calls(lib, cache, ("blur", (torch.rand(1, 3, 8, 8), 1.5)), ("noisy", (torch.rand(4),)),
                ("bump", (torch.rand(4),)))
    code = """
        state = torch.get_rng_state()
        import hashlib
        x = torch.rand(4)      # after the import: the RNG draws what it draws without lazytrace
        print(json.dumps({"summary": summary, "rng": hashlib.sha256(state.numpy().tobytes()).hexdigest(),
                          "draw": x.tolist(), "warned": warned}))
    """
    warmed, plain = fresh(lib, cache, code, prewarm_on=True), fresh(lib, cache, code)
    assert warmed["summary"]["loaded"] == plain["summary"]["loaded"] == 3
    assert warmed["rng"] == plain["rng"] and warmed["draw"] == plain["draw"]      # the RNG did not move
    assert warmed["summary"]["prewarmed"] == 1 and plain["summary"]["prewarmed"] == 0
    reasons = warmed["summary"]["not_prewarmed"]
    assert list(reasons["draws random numbers (the global RNG streams would move)"]) == [f"{lib.__name__}.noisy"]
    assert list(reasons["writes into its inputs or other arrays the caller can see"]) == [f"{lib.__name__}.bump"]


def test_prewarm_refuses_attribute_writes():
    class Holder:
        pass

    def fn(holder, x):
        holder.seen = x
        return x + 1

    graph = lazytrace.trace_graph(fn, arg_stateful_idxs=[[0]], args=(Holder(), torch.rand(3)))
    assert "attributes" in prewarm.refusal(graph._plan)
    plain = lazytrace.trace_graph(lambda x: x * 2 + 1, args=(torch.rand(3),))
    assert prewarm.refusal(plain._plan) is None


def test_a_graph_whose_prewarm_fails_still_works_on_real_inputs(lib, tmp_path):
    cache = tmp_path / "cache"
    a = torch.eye(3) + 0.1 * torch.rand(3, 3)
    store_calls(lib, cache, ("solve", (a,)), ("branchy", (-torch.rand(4),)))
    result = fresh(lib, cache, """
        a = torch.eye(3) + 0.1 * torch.rand(3, 3)   # constant-filled inputs: singular, and sum > 0
        x = -torch.rand(4)
        ok = [torch.allclose(traced.solve(a), real.solve(a)), torch.equal(traced.branchy(x), real.branchy(x))]
        print(json.dumps({"summary": summary, "ok": ok, "after": {n: getattr(traced, n).stats.as_dict()
                                                                  for n in ("solve", "branchy")}}))
    """, prewarm_on=True)
    assert result["ok"] == [True, True]
    assert result["summary"]["prewarmed"] == 0 and result["summary"]["loaded"] == 2
    reasons = result["summary"]["not_prewarmed"]
    assert any(r.startswith("raised") and f"{lib.__name__}.solve" in per for r, per in reasons.items())
    assert f"{lib.__name__}.branchy" in reasons["a guard does not hold for constant-filled inputs"]
    for stats in result["after"].values():
        assert stats["hits"] == stats["calls"] == 1 and stats["traces"] == 0


def test_prewarm_setting_follows_the_environment_and_rejects_bad_values(monkeypatch):
    monkeypatch.delenv(prewarm.ENV_PREWARM, raising=False)
    assert prewarm.wanted(None) is False and prewarm.wanted(True) is True
    monkeypatch.setenv(prewarm.ENV_PREWARM, "1")
    assert prewarm.wanted(None) is True and prewarm.wanted(False) is False
    with pytest.raises(TypeError, match="prewarm"):
        lazytrace.trace_graph(lambda x: x, prewarm="yes")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_signatures_are_preloaded_only_where_prewarm_may_start_the_device(lib, tmp_path):
    cache = tmp_path / "cache"
    code = """
        import json, sys, torch, lazytrace
        sys.path.insert(0, {folder!r})
        import {name} as lib
        f = lazytrace.trace_graph(lib.shifted, cache={cache!r}, prewarm={prewarm})
        at_creation = {{"loaded": f.stats.loaded, "prewarmed": f.stats.prewarmed,
                        "started": torch.cuda.is_initialized()}}
        x, y = torch.rand(3, 4, device="cuda"), torch.rand(3, 4, device="cuda")
        ok = torch.equal(f(x, y), lib.shifted(x, y))
        print(json.dumps({{"at_creation": at_creation, "ok": ok, **f.stats.as_dict()}}))
    """

    def run(prewarm_on):
        source = code.format(folder=os.path.dirname(lib.__file__), name=lib.__name__, cache=str(cache),
                             prewarm=prewarm_on)
        out = subprocess.run([sys.executable, "-c", textwrap.dedent(source)], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = run(False)
    assert first["ok"] and first["stored"] == 1 and first["traces"] == 1
    plain, warmed = run(False), run(True)
    assert plain["at_creation"] == {"loaded": 0, "prewarmed": 0, "started": False}     # left to the call
    assert plain["ok"] and plain["loaded"] == 1 and plain["traces"] == 0
    assert warmed["at_creation"] == {"loaded": 1, "prewarmed": 1, "started": True}
    assert warmed["ok"] and warmed["hits"] == 1 and warmed["traces"] == 0


# ---- what a preloaded graph depended on is checked again at its first call ------------------

#: thirty calls down to _value(): deeper than the guards follow (reads._CALLS, 24; only the
#: module's data hash covers the globals _value reads)
CHAIN = "".join(f"def _l{i}():\n    return _l{i + 1}()\n\n" for i in range(1, 30)) + "def _l30():\n    return _value()\n"

DEEP = CHAIN + '''
import numpy as np

SCALE = 2.0

def _value():
    return SCALE * 2 + 1

def deep(x):
    return np.sin(x) * _l1()

def _helper(x):
    return x * 2

def helped(x):
    return np.cos(_helper(x))
'''


@pytest.fixture
def deep_lib(temp_library):
    name, folder = temp_library(DEEP)
    return __import__(name), folder / f"{name}.py"


def test_a_module_global_set_between_preload_and_the_first_call_is_not_replayed_stale(deep_lib, tmp_path):
    import numpy as np
    lib, _ = deep_lib
    cache = tmp_path / "cache"
    maker = lazytrace.trace_graph(lib.deep, cache=cache)
    maker(np.random.rand(2))
    maker(np.random.rand(3))
    again = lazytrace.trace_graph(lib.deep, cache=cache)        # preloaded (the data hash matches now)
    assert again.stats.loaded == 2
    lib.SCALE = 9.0                                              # the user configures the library
    for n in (3, 2, 3, 2):          # the most recent signature (its fast path at once) and the other
        x = np.random.rand(n)
        assert np.array_equal(again(x), lib.deep(x))
    assert again.stats.traces == 2
    unchanged = lazytrace.trace_graph(lib.deep, cache=cache)    # nothing changed since: the preloaded graphs hit
    assert unchanged.stats.loaded == 2
    for n in (3, 2, 3):
        x = np.random.rand(n)
        assert np.array_equal(unchanged(x), lib.deep(x))
    assert unchanged.stats.traces == 0 and unchanged.stats.hits == 3


CLASSY = CHAIN + '''
import numpy as np

class Config:
    GAIN = 2.0

class Inner:
    def __init__(self):
        self.scale = 2.0

class Settings:
    def __init__(self):
        self.inner = Inner()

SETTINGS = Settings()

def _value():
    return Config.GAIN + SETTINGS.inner.scale

def deep(x):
    return np.sin(x) * _l1()
'''


@pytest.mark.parametrize("where", ["class attribute", "attribute of an object's object"])
def test_a_class_attribute_or_nested_setting_set_between_preload_and_the_first_call_is_seen(where, temp_library, tmp_path):
    """The module data hash covers a class of the module's own package (`Config.GAIN = 5.0`) and
    objects held by its objects (`SETTINGS.inner.scale`): both were left out of it, so a
    preloaded graph replayed the value of the process that stored it."""
    import numpy as np
    name, _ = temp_library(CLASSY)
    lib = __import__(name)
    cache = tmp_path / "cache"
    maker = lazytrace.trace_graph(lib.deep, cache=cache)
    maker(np.random.rand(2))
    again = lazytrace.trace_graph(lib.deep, cache=cache)
    assert again.stats.loaded == 1
    if where == "class attribute":
        lib.Config.GAIN = 5.0
    else:
        lib.SETTINGS.inner.scale = 5.0
    for _ in range(3):
        x = np.random.rand(2)
        assert np.array_equal(again(x), lib.deep(x))
    assert again.stats.traces == 1


CLASS_READS = '''
import numpy as np

class Config:
    GAIN = 2.0

    class Inner:
        SCALE = 3.0

class Sub(Config):
    pass

def _make():
    class Made:
        K = 2.0
    return Made

MADE = _make()

def gained(x):
    return np.sin(x) * Config.GAIN * Config.Inner.SCALE

def inherited(x):
    return np.sin(x) * Sub.GAIN

def made(x):
    return np.sin(x) * MADE.K
'''


@pytest.mark.parametrize("fn, change", [
    ("gained", lambda lib: setattr(lib.Config, "GAIN", 5.0)),
    ("gained", lambda lib: setattr(lib.Config.Inner, "SCALE", 5.0)),
    ("inherited", lambda lib: setattr(lib.Sub, "GAIN", 7.0)),      # set on the subclass: was absent there
    ("inherited", lambda lib: setattr(lib.Config, "GAIN", 7.0)),
])
def test_a_graph_reading_class_attributes_is_stored_and_its_checks_hold_after_loading(fn, change, temp_library, tmp_path):
    """A class attribute read (`Config.GAIN`, a nested class's, one inherited) is checked in the
    class's namespace, stored by the class's module and qualified name: the graph is stored,
    loaded by a new LazyGraph, hits while nothing changes, and traces again once it does (was
    not stored at all: 'it has no stored form')."""
    import numpy as np
    name, _ = temp_library(CLASS_READS)
    lib = __import__(name)
    cache = tmp_path / "cache"
    stored_once(lib, fn, cache)
    again = lazytrace.trace_graph(getattr(lib, fn), cache=cache)
    assert again.stats.loaded == 1
    x = np.random.rand(2)
    assert np.array_equal(again(x), getattr(lib, fn)(x)) and again.stats.hits == 1
    change(lib)
    for _ in range(2):
        x = np.random.rand(2)
        assert np.array_equal(again(x), getattr(lib, fn)(x))
    assert again.stats.traces == 1 and again.stats.guard_failures > 0


def test_a_class_its_name_does_not_find_is_not_stored_and_says_which(temp_library, tmp_path):
    import numpy as np
    name, _ = temp_library(CLASS_READS)
    lib = __import__(name)
    lazy = lazytrace.trace_graph(lib.made, cache=tmp_path / "cache")
    x = np.random.rand(2)
    assert np.array_equal(lazy(x), lib.made(x))
    assert lazy.stats.stored == 0
    assert any("_make.<locals>.Made" in reason for reason in lazy.stats.not_stored), lazy.stats.not_stored
    lib.MADE.K = 4.0
    assert np.array_equal(lazy(x), lib.made(x))


def test_a_helper_redefined_by_a_reload_in_the_same_process_is_not_replayed_stale(deep_lib, tmp_path):
    import importlib
    import numpy as np
    lib, path = deep_lib
    cache = tmp_path / "cache"
    x = np.random.rand(3)
    assert np.array_equal(lazytrace.trace_graph(lib.helped, cache=cache)(x), lib.helped(x))
    path.write_text(DEEP.replace("return x * 2", "return x * 3"))     # edited, then reloaded
    importlib.reload(lib)
    again = lazytrace.trace_graph(lib.helped, cache=cache)
    for _ in range(3):
        x = np.random.rand(3)
        assert np.array_equal(again(x), lib.helped(x))
    assert again.stats.loaded == 0 and again.stats.traces == 1


WARNS = '''
import numpy as np
import torch

def inverse(x):
    return 1.0 / (x - 0.5)          # the constant-filled prewarm input is 0.5: a division by zero

def implicit_softmax(x):
    return torch.nn.functional.softmax(x)      # implicit dim: a UserWarning at every call
'''


def test_prewarm_shows_no_warning_and_leaves_the_users_calls_theirs(temp_library, tmp_path):
    import numpy as np
    name, _ = temp_library(WARNS)
    lib = __import__(name)
    cache = tmp_path / "cache"
    lazytrace.trace_graph(lib.inverse, cache=cache)(np.random.rand(3) + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lazytrace.trace_graph(lib.implicit_softmax, cache=cache)(torch.rand(3))
    calls = []

    def handler(kind, flag):
        calls.append(kind)
    with warnings.catch_warnings(record=True) as caught, np.errstate(all="call"):
        warnings.simplefilter("always")
        old = np.seterrcall(handler)
        try:
            inverse = lazytrace.trace_graph(lib.inverse, cache=cache, prewarm=True)
            softmax = lazytrace.trace_graph(lib.implicit_softmax, cache=cache, prewarm=True)
        finally:
            np.seterrcall(old)
    assert inverse.stats.prewarmed == softmax.stats.prewarmed == 1
    assert [str(w.message) for w in caught] == [] and calls == []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x, y = np.random.rand(3) + 1, torch.rand(3)
        assert np.array_equal(inverse(x), lib.inverse(x)) and torch.equal(softmax(y), lib.implicit_softmax(y))
    assert sum("Implicit dimension" in str(w.message) for w in caught) == 2


CONFIGURED = CHAIN + '''
import enum
import numpy as np

class Mode(enum.Enum):
    FAST = 1
    EXACT = 2

class Config:
    def __init__(self, scale):
        self.scale = scale
        self.mode = Mode.FAST

MODE = Mode.FAST            # chosen at import (from the environment, a file ...)
CONFIG = Config(2.0)
TABLE = {"offset": 1.0, "names": ("a", "b")}
FACTOR = 2.0

def _value():
    return ((3.0 if MODE is Mode.FAST else 5.0) + CONFIG.scale + (CONFIG.mode is Mode.EXACT) + TABLE["offset"]) \
        * FACTOR

def configured(x):
    return np.sin(x) * _l1()
'''


@pytest.mark.parametrize("change", ["enum global", "config attribute", "enum attribute", "table item",
                                    "int for float"])
def test_module_data_covers_enum_members_and_config_objects_of_the_library(temp_library, tmp_path, change):
    import numpy as np
    name, _ = temp_library(CONFIGURED)
    lib = __import__(name)
    cache = tmp_path / "cache"
    lazytrace.trace_graph(lib.configured, cache=cache)(np.random.rand(3))
    for _ in range(2):              # unchanged: loaded (the module's data hash kept for its unchanged globals)
        assert lazytrace.trace_graph(lib.configured, cache=cache).stats.loaded == 1
    if change == "enum global":      # as another process choosing otherwise at import would have it
        lib.MODE = lib.Mode.EXACT
    elif change == "config attribute":
        lib.CONFIG.scale = 4.0
    elif change == "enum attribute":
        lib.CONFIG.mode = lib.Mode.EXACT
    elif change == "table item":     # in place: the module's globals are the same objects
        lib.TABLE["offset"] = 4.0
    else:
        lib.FACTOR = 2               # equal, another type: x * 2 and x * 2.0 differ for integer arrays
    again = lazytrace.trace_graph(lib.configured, cache=cache)
    x = np.random.rand(3)
    assert np.array_equal(again(x), lib.configured(x))
    assert again.stats.loaded == 0 and again.stats.traces == 1


@pytest.mark.parametrize("variable", ["LAZYTRACE_PREWARM", "LAZYTRACE_CACHE", "LAZYTRACE_DISABLE"])
def test_on_off_environment_settings_are_spelled_alike_and_other_values_are_refused(monkeypatch, tmp_path, variable):
    from lazytrace.persist import store
    read = {"LAZYTRACE_PREWARM": lambda: prewarm.wanted(None), "LAZYTRACE_CACHE": store.enabled_by_env,
            "LAZYTRACE_DISABLE": lambda: lazytrace.trace_graph(lambda x: x + 1)._disabled}[variable]
    for value, expected in [("1", True), (" True ", True), ("on", True), ("YES", True),
                            ("", False), ("0", False), ("off", False), ("No", False), ("false", False)]:
        monkeypatch.setenv(variable, value)
        assert read() is expected, value
    monkeypatch.setenv(variable, "2")        # LAZYTRACE_DISABLE=2 disabled, LAZYTRACE_PREWARM=2 was off: silently
    with pytest.raises(ValueError, match=f"{variable}='2'"):
        read()


LAZY_MODULE_LIBRARY = '''
import os
import torch

SCALE = float(os.environ.get("LAZYTRACE_TEST_SCALE", "2"))     # data computed at import

def unless_exporting(x):
    if torch.onnx.is_in_onnx_export():        # torch imports torch.onnx at this first use
        return x.clone()
    return x * SCALE + 1
'''


def test_a_graph_reading_a_framework_module_imported_at_first_use_preloads(temp_library, tmp_path, monkeypatch):
    """kornia's resize, rescale and denormalize read `torch.onnx.is_in_onnx_export()`; torch
    imports `torch.onnx` at that first use, so a fresh process has not imported it when the
    graphs preload: they were all dropped as 'changed' (silently) and traced again."""
    name, _ = temp_library(LAZY_MODULE_LIBRARY)
    lib = __import__(name)
    cache = tmp_path / "cache"
    import torch.onnx       # imported in the process that stores (by an earlier call), as in a kornia warm-up
    store_calls(lib, cache, ("unless_exporting", (torch.rand(2, 3),)))
    code = """
        lazy_before = "torch.onnx" in sys.modules
        x = torch.rand(2, 3)
        ok = torch.equal(traced.unless_exporting(x), real.unless_exporting(x))
        print(json.dumps({"summary": summary, "ok": ok, "lazy_before": lazy_before,
                          "after": traced.unless_exporting.stats.as_dict()}))
    """
    result = fresh(lib, cache, code)
    assert result["ok"] and not result["lazy_before"]
    assert result["summary"]["loaded"] == 1, result
    assert result["after"]["traces"] == 0 and result["after"]["hits"] == 1, result["after"]
    monkeypatch.setenv("LAZYTRACE_TEST_SCALE", "3")        # the module's data differs in that process
    result = fresh(lib, cache, code)
    assert result["ok"] and result["summary"]["loaded"] == 0
    assert result["after"]["traces"] == 1 and result["after"]["loaded"] == 0
    assert list(result["after"]["not_preloaded"]) == [
        "the code or module data its trace ran changed since it was stored (a function replaced, a library global "
        "set): its first call traces anew"]



@pytest.mark.parametrize("imported_at_store", [True, False])
def test_a_framework_function_replaced_after_the_preload_before_the_first_call(temp_library, tmp_path,
                                                                               imported_at_store):
    """The preload passes over `torch.onnx.is_in_onnx_export` while torch.onnx is not imported;
    imported and replaced before the first call, the stored graph (the other branch) must not
    replay: the call traces anew and returns what eager returns. Not imported in the process that
    stored it either (torch imported it during the trace), the read was not recorded at all."""
    name, _ = temp_library(LAZY_MODULE_LIBRARY)
    lib = __import__(name)
    cache = tmp_path / "cache"
    if imported_at_store:
        import torch.onnx
        store_calls(lib, cache, ("unless_exporting", (torch.rand(2, 3),)))
    else:
        stored_by = fresh(lib, cache, """
            before = "torch.onnx" in sys.modules
            traced.unless_exporting(torch.rand(2, 3))
            print(json.dumps({"before": before, "stats": traced.unless_exporting.stats.as_dict()}))
        """)
        assert not stored_by["before"] and stored_by["stats"]["stored"] == 1, stored_by
    result = fresh(lib, cache, """
        lazy_before = "torch.onnx" in sys.modules
        import torch.onnx
        torch.onnx.is_in_onnx_export = lambda: True
        ok = []
        for _ in range(3):
            x = torch.rand(2, 3)
            ok.append(torch.equal(traced.unless_exporting(x), real.unless_exporting(x)))
        print(json.dumps({"summary": summary, "ok": ok, "lazy_before": lazy_before,
                          "after": traced.unless_exporting.stats.as_dict()}))
    """)
    assert not result["lazy_before"] and result["summary"]["loaded"] == 1
    assert result["ok"] == [True, True, True], result
    assert result["after"]["traces"] >= 1 or result["after"]["eager"] >= 1, result["after"]

ASSERTING_LIBRARY = '''
import torch

def checked(x):
    torch._assert_async((x >= 0).all(), "x must be non-negative")     # kornia's equalize checks values so
    return x.sqrt()
'''


def test_a_graph_with_torchs_private_assert_op_is_stored_and_still_checks(temp_library, tmp_path):
    """kornia's equalize calls torch._assert_async, which torch's list of overridable functions
    leaves out: its graphs were never stored ('cannot be found again by its name')."""
    name, _ = temp_library(ASSERTING_LIBRARY)
    lib = __import__(name)
    cache = tmp_path / "cache"
    first = lazytrace.trace_graph(lib.checked, cache=cache)
    first(torch.rand(4))
    assert first.stats.stored == 1 and not first.stats.not_stored, first.stats
    again = lazytrace.trace_graph(lib.checked, cache=cache)         # preloaded from the file
    assert again.stats.loaded == 1
    x = torch.rand(4)
    assert torch.equal(again(x), lib.checked(x)) and again.stats.traces == 0
    with pytest.raises(RuntimeError):
        lib.checked(-x)
    with pytest.raises(RuntimeError):              # the loaded graph still runs the check
        again(-x)


def test_torchs_private_assert_op_replaced_after_the_trace_is_seen(temp_library, tmp_path, monkeypatch):
    """A graph calls torch._assert_async by name (a guard of the graph): one replaced after the
    trace, or before a preloaded graph's first call, runs, as in eager."""
    name, _ = temp_library(ASSERTING_LIBRARY)
    lib = __import__(name)
    first = lazytrace.trace_graph(lib.checked, cache=tmp_path / "cache")
    first(torch.rand(4))
    again = lazytrace.trace_graph(lib.checked, cache=tmp_path / "cache")       # preloaded
    assert again.stats.loaded == 1

    def refusing(cond, msg=None):
        raise ValueError("refused by the user's check")
    monkeypatch.setattr(torch, "_assert_async", refusing)
    for graph in (first, again):
        for _ in range(3):
            with pytest.raises(ValueError, match="refused"):
                graph(torch.rand(4))

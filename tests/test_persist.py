"""The persistent graph cache: a fresh process replays stored graphs without tracing; anything
that could make a stored graph wrong misses; damaged or hostile files are refused."""
import json
import os
import pickle
import subprocess
import sys
import textwrap
import time
import warnings

import pytest
import torch
from safetensors.torch import load as st_load, save as st_save

from conftest import run_fresh_python

import lazytrace
from lazytrace.persist import CacheWarning, CorruptEntry, GraphStore, codec, identity, read_description

LIBRARY = '''
import numpy as np
import torch

def np_features(x, n):
    k = x[0] * 0 + np.float32(1.5)
    y = np.sum(x * k, axis=1) + np.float32(0.5)
    z = np.exp(x).astype(np.float64)[:, :n]
    return y, np.add.reduce(z, axis=0), x.mean(axis=0), x[..., None]

def blur(x, sigma):
    k = torch.arange(5, dtype=torch.float32) - 2
    k = torch.exp(-(k * k) / (2 * sigma * sigma))
    k = (k / k.sum()).reshape(1, 1, 1, 5).repeat(x.shape[1], 1, 1, 1)
    y = torch.nn.functional.pad(x, (2, 2, 0, 0), mode="reflect")
    return torch.conv2d(y, k, groups=x.shape[1])

def branchy(x):
    if x.sum() > 0:
        return x * 2, x.shape
    return x - 1, x.shape

def shifted(x, y):
    return (x + y).T.contiguous()

SCALE = torch.ones(3)
GAIN = 2.0

def gained(x):
    return x * GAIN

def uses_global(x):
    return x * SCALE

OFFSETS = [0.0]

def late(x):
    try:
        return x * LATE
    except NameError:
        return 1 / (x * OFFSETS[0])
'''


@pytest.fixture
def lib(temp_library):
    name, _ = temp_library(LIBRARY)
    return __import__(name)


def run_fresh(lib, cache_dir, code: str) -> dict:
    """Run `code` in a new Python process that has the library as `lib` and `cache` set; return
    the JSON it prints last."""
    prelude = f"""
        import json, sys, torch, lazytrace
        sys.path.insert(0, {os.path.dirname(lib.__file__)!r})
        import {lib.__name__} as lib
        cache = {str(cache_dir)!r}
    """
    return run_fresh_python(prelude, code)


def stored_files(cache_dir):
    return sorted(cache_dir.glob("*/*.lzt"))


def test_fresh_process_replays_stored_graphs_without_tracing(lib, tmp_path):
    cache = tmp_path / "cache"
    blur = lazytrace.trace_graph(lib.blur, cache=cache)
    x = torch.rand(1, 3, 8, 8)
    assert torch.equal(blur(x, 1.5), lib.blur(x, 1.5))
    blur(torch.rand(2, 3, 16, 16), 0.7)
    assert blur.stats.traces == 2 and blur.stats.stored == 2
    assert len(stored_files(cache)) == 2

    result = run_fresh(lib, cache, """
        blur = lazytrace.trace_graph(lib.blur, cache=cache)
        ok = []
        for shape, sigma in (((1, 3, 8, 8), 1.5), ((2, 3, 16, 16), 0.7), ((1, 3, 8, 8), 1.5)):
            x = torch.rand(*shape)                  # new inputs, never seen by the first process
            ok.append(torch.equal(blur(x, sigma), lib.blur(x, sigma)))
        print(json.dumps({"ok": ok, **blur.stats.as_dict()}))
    """)
    assert result["ok"] == [True, True, True]
    assert result["traces"] == 0 and result["loaded"] == 2 and result["hits"] == 3


def test_guards_on_module_globals_are_stored_and_checked_after_loading(lib, tmp_path):
    cache = tmp_path / "cache"
    lazytrace.trace_graph(lib.gained, cache=cache)(torch.rand(3))
    assert len(stored_files(cache)) == 1
    result = run_fresh(lib, cache, """
        gained = lazytrace.trace_graph(lib.gained, cache=cache)
        x = torch.rand(3)
        ok = [torch.equal(gained(x), x * 2.0)]
        loaded, traces = gained.stats.loaded, gained.stats.traces
        lib.GAIN = 3.0                            # the stored graph's check sees the change
        ok.append(torch.equal(gained(x), x * 3.0))
        print(json.dumps({"ok": ok, "loaded": loaded, "traces_before": traces, **gained.stats.as_dict()}))
    """)
    assert result["ok"] == [True, True]
    assert result["loaded"] == 1 and result["traces_before"] == 0 and result["traces"] == 1


def test_checks_of_unset_globals_and_signed_zeros_are_stored_and_checked_after_loading(lib, tmp_path):
    """A global unset at the trace (set later) and the sign of a zero in a global list: both
    checked by a graph loaded in another process."""
    cache = tmp_path / "cache"
    lazytrace.trace_graph(lib.late, cache=cache)(torch.rand(3))
    assert len(stored_files(cache)) == 1
    result = run_fresh(lib, cache, """
        late = lazytrace.trace_graph(lib.late, cache=cache)
        ok = []
        for step in range(6):
            if step == 2:
                lib.OFFSETS[0] = -0.0
            if step == 4:
                lib.LATE = 3.0
            x = torch.rand(3) + 0.5
            ok.append(torch.equal(late(x), lib.late(x)))
        print(json.dumps({"ok": ok, **late.stats.as_dict()}))
    """)
    assert result["ok"] == [True] * 6
    assert result["loaded"] == 1 and result["traces"] == 2 and result["hits"] == 4


def test_a_stored_guard_on_a_module_not_imported_is_skipped_and_the_file_kept(lib, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    lazytrace.trace_graph(lib.gained, cache=cache)(torch.rand(3))
    files = [(f, f.read_bytes()) for f in stored_files(cache)]
    monkeypatch.delitem(sys.modules, lib.__name__)       # loading a graph never imports anything
    fresh = lazytrace.trace_graph(lib.gained, cache=cache)
    x = torch.rand(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)      # not a damaged file: no warning
        assert torch.equal(fresh(x), x * 2.0)
    assert fresh.stats.loaded == 0 and fresh.stats.traces == 1
    assert [(f, f.read_bytes()) for f in stored_files(cache)] == files


def test_other_signature_in_fresh_process_traces(lib, tmp_path):
    cache = tmp_path / "cache"
    lazytrace.trace_graph(lib.blur, cache=cache)(torch.rand(1, 3, 8, 8), 1.5)
    result = run_fresh(lib, cache, """
        blur = lazytrace.trace_graph(lib.blur, cache=cache)
        x = torch.rand(1, 3, 8, 8)
        same = torch.equal(blur(x, 1.25), lib.blur(x, 1.25))     # sigma is keyed by value
        print(json.dumps({"same": same, **blur.stats.as_dict()}))
    """)
    assert result["same"] and result["traces"] == 1 and result["hits"] == 0
    assert result["loaded"] == 1        # the stored signature was preloaded, and is not this one


def test_guard_variants_of_one_signature_are_merged_and_replayed(lib, tmp_path):
    cache = tmp_path / "cache"
    pos, neg = torch.rand(4) + 0.1, -torch.rand(4) - 0.1
    first = lazytrace.trace_graph(lib.branchy, cache=cache)     # two processes, one branch each
    second = lazytrace.trace_graph(lib.branchy, cache=cache)
    first(pos)
    second(neg)
    files = stored_files(cache)
    assert len(files) == 1
    content, _ = read_description(files[0].read_bytes())
    assert len(content["graphs"]) == 2

    third = lazytrace.trace_graph(lib.branchy, cache=cache)
    for x in (neg * 3, pos * 3, neg):
        out, shape = third(x)
        assert torch.equal(out, lib.branchy(x)[0]) and shape == x.shape
    assert third.stats.traces == 0 and third.stats.loaded == 2


def test_numpy_graphs_are_stored_and_replayed(lib, tmp_path):
    import numpy as np
    cache = tmp_path / "cache"
    x = np.random.rand(3, 4).astype(np.float32)
    first = lazytrace.trace_graph(lib.np_features, cache=cache)
    first(x, 2)
    assert first.stats.stored == 1
    again = lazytrace.trace_graph(lib.np_features, cache=cache)
    y = np.random.rand(3, 4).astype(np.float32)
    for got, want in zip(again(y, 2), lib.np_features(y, 2)):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    assert again.stats.loaded == 1 and again.stats.traces == 0 and again.stats.hits == 1


def test_versions_and_edits_miss(lib, tmp_path):
    cache = tmp_path / "cache"
    folder = os.path.dirname(lib.__file__)
    dist = os.path.join(folder, f"{lib.__name__}-1.0.dist-info")
    os.mkdir(dist)
    with open(os.path.join(dist, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: {lib.__name__}\nVersion: 1.0\n")
    with open(os.path.join(dist, "top_level.txt"), "w") as f:
        f.write(lib.__name__ + "\n")
    identity.clear_caches()
    assert identity.distribution_versions(lib.__name__) == [[lib.__name__, "1.0"]]
    lazytrace.trace_graph(lib.shifted, cache=cache)(torch.rand(3, 4), torch.rand(3, 4))
    code = """
        f = lazytrace.trace_graph(lib.shifted, cache=cache)
        x, y = torch.rand(3, 4), torch.rand(3, 4)
        same = torch.equal(f(x, y), lib.shifted(x, y))
        print(json.dumps({"same": same, **f.stats.as_dict()}))
    """
    assert run_fresh(lib, cache, code)["loaded"] == 1            # unchanged: a hit

    with open(os.path.join(dist, "METADATA"), "w") as f:        # a new release of the library
        f.write(f"Metadata-Version: 2.1\nName: {lib.__name__}\nVersion: 1.1\n")
    result = run_fresh(lib, cache, code)
    assert result["same"] and result["loaded"] == 0 and result["traces"] == 1

    source = open(lib.__file__).read()                           # an edit of the function
    with open(lib.__file__, "w") as f:
        f.write(source.replace("return (x + y).T.contiguous()", "return (x - y).T.contiguous()"))
    result = run_fresh(lib, cache, code)
    assert result["same"] and result["loaded"] == 0 and result["traces"] == 1


def test_an_edit_of_a_helper_in_another_package_misses(temp_library, tmp_path):
    """The key names the function's own package; a helper it calls from another package (a
    utilities module of the user's) ran during the trace too: editing it must miss, not replay
    the helper's old arithmetic. Seen through a name imported from it and through the module."""
    helper_name, _ = temp_library("def helper(x):\n    return x * 2\n")
    lib = __import__(temp_library(f"""
import {helper_name} as helpers
from {helper_name} import helper

def direct(x):
    return helper(x) + 1

def through_module(x):
    return helpers.helper(x) - 1
""")[0])
    cache = tmp_path / "cache"
    x = torch.rand(3)
    for fn in (lib.direct, lib.through_module):
        lazytrace.trace_graph(fn, cache=cache)(x)
    code = """
        out = {}
        for name in ("direct", "through_module"):
            fn = getattr(lib, name)
            f = lazytrace.trace_graph(fn, cache=cache)
            x = torch.rand(3)
            out[name] = [torch.equal(f(x), fn(x)), f.stats.loaded]
        print(json.dumps(out))
    """
    assert run_fresh(lib, cache, code) == {"direct": [True, 1], "through_module": [True, 1]}
    helper_file = os.path.join(os.path.dirname(lib.__file__), f"{helper_name}.py")
    with open(helper_file, "w") as f:
        f.write("def helper(x):\n    return x * 30\n")
    assert run_fresh(lib, cache, code) == {"direct": [True, 0], "through_module": [True, 0]}
    assert run_fresh(lib, cache, code) == {"direct": [True, 1], "through_module": [True, 1]}  # stored anew


def test_a_global_choosing_another_function_at_import_misses(temp_library, tmp_path, monkeypatch):
    """`ACT = torch.tanh if <environment> else torch.relu`: the same file, the same code, another
    function in another process. The stored graph of the relu process must not replay there."""
    lib = __import__(temp_library("""
import os
import torch

def _double(x):
    return x * 2

def _triple(x):
    return x * 3

ACT = torch.tanh if os.environ.get("LT_TEST_ACT") == "tanh" else torch.relu
HELPER = _triple if os.environ.get("LT_TEST_ACT") == "tanh" else _double

def activated(x):
    return ACT(x) + 1

def helped(x):
    return HELPER(x) + 1
""")[0])
    cache = tmp_path / "cache"
    x = torch.rand(3) - 0.5
    for fn in (lib.activated, lib.helped):
        lazytrace.trace_graph(fn, cache=cache)(x)
    code = """
        import os
        out = {"act": lib.ACT.__name__}
        for name in ("activated", "helped"):
            fn = getattr(lib, name)
            f = lazytrace.trace_graph(fn, cache=cache)
            x = torch.rand(3) - 0.5
            out[name] = [torch.equal(f(x), fn(x)), f.stats.loaded]
        print(json.dumps(out))
    """
    assert run_fresh(lib, cache, code) == {"act": "relu", "activated": [True, 1], "helped": [True, 1]}
    monkeypatch.setenv("LT_TEST_ACT", "tanh")          # inherited by the fresh process
    assert run_fresh(lib, cache, code) == {"act": "tanh", "activated": [True, 0], "helped": [True, 0]}


def test_framework_version_is_part_of_the_key(lib, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    x, y = torch.rand(3, 4), torch.rand(3, 4)
    lazytrace.trace_graph(lib.shifted, cache=cache)(x, y)
    again = lazytrace.trace_graph(lib.shifted, cache=cache)
    again(x, y)
    assert again.stats.loaded == 1
    real = identity.importlib_metadata.version
    monkeypatch.setattr(identity.importlib_metadata, "version", lambda d: "99.0" if d == "torch" else real(d))
    identity.clear_caches()
    upgraded = lazytrace.trace_graph(lib.shifted, cache=cache)
    assert torch.equal(upgraded(x, y), lib.shifted(x, y))
    assert upgraded.stats.loaded == 0 and upgraded.stats.traces == 1


def _compiled(source: str, name="f"):
    space = {}
    exec(compile(textwrap.dedent(source), "<test>", "exec"), space)
    return space[name]


def test_function_digest_follows_code_and_defaults_not_the_process():
    digest = identity.function_digest
    base = _compiled("def f(x, k=2):\n    return x * k + 3\n")
    assert digest(base) == digest(_compiled("def f(x, k=2):\n    return x * k + 3\n"))
    assert digest(base) != digest(_compiled("def f(x, k=3):\n    return x * k + 3\n"))      # a default
    assert digest(base) != digest(_compiled("def f(x, k=2):\n    return x * k - 3\n"))      # the code
    assert digest(base) != digest(_compiled("def f(x, k=2):\n    return x * k + 3.0\n"))    # 3 vs 3.0
    assert digest(base) != digest(_compiled("def f(x, *, k=2):\n    return x * k + 3\n"))
    nested = "def f(x):\n    def g(y):\n        return y + {}\n    return g(x)\n"
    assert digest(_compiled(nested.format(1))) != digest(_compiled(nested.format(2)))
    two = _compiled("def f(x):\n    return ('a', x * 1)\n")            # same bytecode, constants swapped
    consts = list(two.__code__.co_consts)
    i, j = consts.index("a"), consts.index(1)
    consts[i], consts[j] = consts[j], consts[i]
    swapped = _compiled("def f(x):\n    return ('a', x * 1)\n")
    swapped.__code__ = two.__code__.replace(co_consts=tuple(consts))
    assert digest(swapped) != digest(two)
    replaced = _compiled("def f(x, k=2):\n    return x * k + 3\n")     # code swapped at run time
    replaced.__code__ = _compiled("def f(x, k=2):\n    return x / k + 3\n").__code__
    assert digest(replaced) != digest(base)


def test_function_digest_is_the_same_in_every_process():
    """Set constants (frozensets) are hashed in sorted order: PYTHONHASHSEED changes nothing."""
    code = textwrap.dedent("""
        import textwrap
        from lazytrace.persist import identity
        space = {}
        exec("def f(x, mode='a'):\\n    return x if mode in {'a', 'b', 'c', 'd'} else -x\\n", space)
        print(identity.function_digest(space["f"]))
    """)
    digests = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2", "3")}
    assert len(digests) == 1 and len(digests.pop().strip()) == 64


def test_defaults_without_a_text_form_are_covered_by_the_source(lib, tmp_path):
    marker = object()
    assert identity.function_digest(lib.shifted)
    no_source = _compiled("def f(x, k=None):\n    return x\n")
    no_source.__defaults__ = (marker,)
    with pytest.raises(codec.NotStorable, match="source"):
        identity.function_digest(no_source)
    lib.shifted.__defaults__ = (marker,)          # its source is in the library file: still stored
    try:
        f = lazytrace.trace_graph(lib.shifted, cache=tmp_path / "cache")
        f(torch.rand(2, 3), torch.rand(2, 3))
        assert f.stats.stored == 1
    finally:
        lib.shifted.__defaults__ = None


# ---- damaged and hostile files ------------------------------------------------------------------

def _stored(lib, cache):
    x = torch.rand(1, 3, 8, 8)
    lazytrace.trace_graph(lib.blur, cache=cache)(x, 1.5)
    (path,) = stored_files(cache)
    return path, x


def _retraced_safely(lib, cache, path, x, fresh=None):
    """A LazyGraph made now (the file is refused as it preloads) or earlier (`fresh`: refused at
    its first call) warns naming the file, and traces."""
    with pytest.warns(CacheWarning, match=str(path.name)):
        fresh = fresh or lazytrace.trace_graph(lib.blur, cache=cache)
        out = fresh(x, 1.5)
    assert torch.equal(out, lib.blur(x, 1.5))
    assert fresh.stats.loaded == 0 and fresh.stats.traces == 1
    fresh(x, 1.5)
    return fresh


@pytest.mark.parametrize("when", ["preload", "call"])
@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "header_only"])
def test_corrupt_files_are_skipped_with_a_warning_and_retraced(lib, tmp_path, damage, when):
    cache = tmp_path / "cache"
    early = lazytrace.trace_graph(lib.blur, cache=cache) if when == "call" else None   # nothing to preload yet
    path, x = _stored(lib, cache)
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) - 40], "garbage": os.urandom(len(data)), "empty": b"",
                      "header_only": data[:8]}[damage])
    _retraced_safely(lib, cache, path, x, early)
    again = lazytrace.trace_graph(lib.blur, cache=cache)      # the new trace replaced the file
    again(x, 1.5)
    assert again.stats.loaded == 1


class Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _rewrite(path, change):
    """Rewrite a stored file's description with change(content) (arrays kept)."""
    data = path.read_bytes()
    content, metadata = read_description(data)
    change(content)
    arrays = st_load(data)
    path.write_bytes(st_save(arrays, metadata={**metadata, "lazytrace": json.dumps(content)}))


def test_a_pickle_in_place_of_a_graph_file_is_never_unpickled(lib, tmp_path):
    cache = tmp_path / "cache"
    path, x = _stored(lib, cache)
    marker = tmp_path / "pwned"
    path.write_bytes(pickle.dumps(Evil(str(marker))))
    _retraced_safely(lib, cache, path, x)
    assert not marker.exists()


@pytest.mark.parametrize("attack", ["call_outside", "module_walk", "file_reader", "kwarg_injection",
                                    "pickled_literal", "unknown_tag", "bad_reference"])
def test_tampered_descriptions_are_refused(lib, tmp_path, attack):
    cache = tmp_path / "cache"
    path, x = _stored(lib, cache)
    marker = tmp_path / "pwned"

    def change(content):
        node = content["graphs"][0]["nodes"][0]
        if attack == "call_outside":
            node["call"] = "builtins:exec"
        elif attack == "module_walk":
            node["call"] = "torch:os.system"
        elif attack == "file_reader":
            node["call"] = "torch:load"
        elif attack == "kwarg_injection":
            node["kwargs"].append([f"x=open({str(marker)!r}, 'w'), y", 1])
        elif attack == "pickled_literal":
            node["args"].append({"p": pickle.dumps(Evil(str(marker))).hex()})
        elif attack == "unknown_tag":
            node["args"][0] = {"code": f"open({str(marker)!r}, 'w')"}
        else:
            node["args"][0] = {"v": ["n", 99, 0]}
    _rewrite(path, change)
    _retraced_safely(lib, cache, path, x)
    assert not marker.exists()


@pytest.mark.parametrize("where", ["header", "literal"])
def test_a_description_nested_too_deep_is_refused(lib, tmp_path, where):
    """JSON nested deeper than Python's recursion limit (in the header, or a literal nested just
    under json's own limit that the decoder walks) is a damaged file, not a RecursionError at the call."""
    cache = tmp_path / "cache"
    path, x = _stored(lib, cache)
    if where == "header":
        data = path.read_bytes()
        _, metadata = read_description(data)
        path.write_bytes(st_save(st_load(data), metadata={**metadata, "lazytrace": "[" * 10**5 + "]" * 10**5}))
    else:
        _rewrite(path, lambda content: content["graphs"][0]["nodes"][0]["args"].append(
            json.loads("[" * 900 + "]" * 900)))
    _retraced_safely(lib, cache, path, x)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_link_or_special_file_in_place_of_a_graph_file_is_refused(lib, tmp_path, kind):
    """What lazytrace never writes in its directory is refused unread: a symbolic link (to
    /dev/zero or a huge file it read whole; its target was touched as a used cache file) or a
    FIFO (opening it blocked the call)."""
    cache = tmp_path / "cache"
    path, x = _stored(lib, cache)
    target = tmp_path / "elsewhere.lzt"
    target.write_bytes(path.read_bytes())            # even a valid graph file
    os.utime(target, (1000, 1000))
    path.unlink()
    if kind == "symlink":
        path.symlink_to(target)
    else:
        os.mkfifo(path)
    _retraced_safely(lib, cache, path, x)
    assert target.stat().st_mtime == 1000 and not path.is_symlink()      # the new trace replaced it
    assert path.is_file() and path.stat().st_size > 0


def test_a_file_copied_under_another_key_is_refused(lib, tmp_path):
    cache = tmp_path / "cache"
    path, x = _stored(lib, cache)
    lazytrace.trace_graph(lib.blur, cache=cache)(torch.rand(1, 3, 16, 16), 1.5)
    other = next(p for p in stored_files(cache) if p != path)
    other.write_bytes(path.read_bytes())            # a graph for 8x8 under the 16x16 name
    fresh = lazytrace.trace_graph(lib.blur, cache=cache)
    y = torch.rand(1, 3, 16, 16)
    with pytest.warns(CacheWarning, match="another key"):
        assert torch.equal(fresh(y, 1.5), lib.blur(y, 1.5))
    assert fresh.stats.traces == 1


def test_resolution_only_reaches_framework_calls():
    backend = lazytrace.backends.get_backend("torch")
    assert codec.resolve(backend, "torch.nn.functional:pad") is torch.nn.functional.pad
    assert codec.resolve(backend, "torch:Tensor.add") is torch.Tensor.add
    for ref in ("builtins:eval", "os:system", "torch:load", "torch:save", "torch:os.system", "torch:hub.load",
                "torch:Tensor.__reduce_ex__", "torch:_C._nn.os", "torch:nn.modules.module.torch.load", "torch"):
        with pytest.raises(CorruptEntry):
            codec.resolve(backend, ref)


# ---- what is not stored ---------------------------------------------------------------------

def test_graphs_that_cannot_be_data_are_not_stored(lib, tmp_path):
    cache = tmp_path / "cache"
    x = torch.rand(3)
    g = lazytrace.trace_graph(lib.uses_global, cache=cache)
    assert torch.equal(g(x), x * lib.SCALE)
    assert g.stats.stored == 0 and any("reached by itself" in r for r in g.stats.not_stored)

    nested = lazytrace.trace_graph(lambda t: t * 3.0 + 1.0, cache=cache)
    nested(x)
    assert nested.stats.stored == 0 and any("nested function" in r for r in nested.stats.not_stored)
    assert stored_files(cache) == []


ENV_LIBRARY = """
import os
from os import environ, getenv

def by_module(x):
    return x * 3.0 if os.environ.get("LT_PROBE_FLAG") else x

def by_name(x):
    return x * 3.0 if environ.get("LT_PROBE_FLAG") else x

def by_getenv(x):
    return x * 3.0 if getenv("LT_PROBE_FLAG") else x
"""


@pytest.mark.parametrize("fn", ["by_module", "by_name", "by_getenv"])
def test_a_function_reading_the_environment_is_not_stored(temp_library, tmp_path, monkeypatch, fn):
    # another process (another shell) has other variables: a stored branch would be replayed there
    name, _ = temp_library(ENV_LIBRARY)
    lib = __import__(name)
    monkeypatch.delenv("LT_PROBE_FLAG", raising=False)
    cache = tmp_path / "cache"
    g = lazytrace.trace_graph(getattr(lib, fn), cache=cache)
    x = torch.rand(3)
    assert torch.equal(g(x), x)
    assert g.stats.stored == 0 and any("environment" in r for r in g.stats.not_stored)
    monkeypatch.setenv("LT_PROBE_FLAG", "1")
    result = run_fresh(lib, cache, f"""
        g = lazytrace.trace_graph(lib.{fn}, cache=cache)
        x = torch.rand(3)
        print(json.dumps({{"same": torch.equal(g(x), x * 3.0), **g.stats.as_dict()}}))
    """)
    assert result["same"] and result["loaded"] == 0


IMPORT_TIME_LIBRARY = """
import os
SCALE = float(os.environ.get("LT_PROBE_SCALE", "2"))

class Ops:
    @staticmethod
    def scale():
        return SCALE

def l1(): return l2()
def l2(): return l3()
def l3(): return l4()
def l4(): return SCALE

def by_method(x):
    return x * Ops.scale()

def deep(x):
    return x * l1()
"""


@pytest.mark.parametrize("fn", ["by_method", "deep"])
def test_a_global_computed_at_import_read_by_unseen_code_misses_in_another_process(
        temp_library, tmp_path, monkeypatch, fn):
    # the guards do not see SCALE (a method, a helper deeper than they follow); the module's
    # data globals are part of what a stored graph checks at load
    name, _ = temp_library(IMPORT_TIME_LIBRARY)
    lib = __import__(name)
    cache = tmp_path / "cache"
    lazytrace.trace_graph(getattr(lib, fn), cache=cache)(torch.rand(3))
    assert len(stored_files(cache)) == 1
    code = f"""
        g = lazytrace.trace_graph(lib.{fn}, cache=cache)
        x = torch.rand(3)
        print(json.dumps({{"same": torch.equal(g(x), x * lib.SCALE), **g.stats.as_dict()}}))
    """
    assert run_fresh(lib, cache, code)["loaded"] == 1          # same environment: replayed
    monkeypatch.setenv("LT_PROBE_SCALE", "5")
    result = run_fresh(lib, cache, code)
    assert result["same"] and result["loaded"] == 0 and result["traces"] == 1


def test_a_process_of_other_module_data_adds_its_graph_and_keeps_the_stored_one(temp_library, tmp_path, monkeypatch):
    """Processes whose libraries computed other data at import (a config flag, kornia's checks
    switch) share a file: each one's trace is added beside the others'. The second process used
    to drop the first one's graph (it kept only what matched its own data): a warm-up was lost,
    and two configurations retraced each other's signature in turn."""
    name, _ = temp_library(IMPORT_TIME_LIBRARY)
    lib = __import__(name)
    cache = tmp_path / "cache"
    lazytrace.trace_graph(lib.by_method, cache=cache)(torch.rand(3))      # SCALE 2 (as warmed)
    code = """
        g = lazytrace.trace_graph(lib.by_method, cache=cache)
        x = torch.rand(3)
        print(json.dumps({"same": torch.equal(g(x), x * lib.SCALE), **g.stats.as_dict()}))
    """
    monkeypatch.setenv("LT_PROBE_SCALE", "5")
    first = run_fresh(lib, cache, code)
    assert first["same"] and first["loaded"] == 0 and first["stored"] == 1
    for scale in ("2", "5"):          # both kept: each replays without tracing
        monkeypatch.setenv("LT_PROBE_SCALE", scale)
        result = run_fresh(lib, cache, code)
        assert result["same"] and result["loaded"] == 1 and result["traces"] == 0, (scale, result)
    assert len(stored_files(cache)) == 1


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and two CPUs")
def test_a_machine_fact_read_in_python_misses_in_a_process_that_differs(temp_library, tmp_path):
    name, _ = temp_library("import os\ndef per_cpu(x):\n    return x * len(os.sched_getaffinity(0))\n")
    lib = __import__(name)
    cache = tmp_path / "cache"
    lazytrace.trace_graph(lib.per_cpu, cache=cache)(torch.rand(3))
    result = run_fresh(lib, cache, """
        import os
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        g = lazytrace.trace_graph(lib.per_cpu, cache=cache)
        x = torch.rand(3)
        print(json.dumps({"same": torch.equal(g(x), lib.per_cpu(x)), **g.stats.as_dict()}))
    """)
    assert result["same"]


def test_environment_variable_opts_in(lib, tmp_path, monkeypatch):
    cache = tmp_path / "from-env"
    monkeypatch.setenv("LAZYTRACE_CACHE", "1")
    monkeypatch.setenv("LAZYTRACE_CACHE_DIR", str(cache))
    f = lazytrace.trace_graph(lib.shifted)
    f(torch.rand(2, 2), torch.rand(2, 2))
    assert f.stats.stored == 1 and len(stored_files(cache)) == 1
    off = lazytrace.trace_graph(lib.shifted, cache=False)       # an explicit False wins
    off(torch.rand(2, 2), torch.rand(2, 2))
    assert off.stats.loaded == 0 and off.stats.stored == 0


def test_bad_cache_setting_is_a_clear_error(lib):
    with pytest.raises(TypeError, match="cache="):
        lazytrace.trace_graph(lib.shifted, cache=3)(torch.rand(2), torch.rand(2))


# ---- the store ------------------------------------------------------------------------------

def test_eviction_removes_least_recently_used(tmp_path):
    store = GraphStore(tmp_path, max_bytes=3500)
    paths = [store.path("m", f"f{i}", f"{i:040d}") for i in range(3)]
    for i, p in enumerate(paths):
        store.update(p, lambda current: b"x" * 1000)
        os.utime(p, (1000 + i, 1000 + i))
    store.read(paths[0])                                 # used now: the most recent
    fourth = store.path("m", "f3", "3" * 40)
    store.update(fourth, lambda current: b"y" * 1000)   # 4000 bytes > 3500: one must go
    assert [p.exists() for p in paths] == [True, False, True] and fourth.exists()
    assert store.size() <= 3500


@pytest.mark.skipif(not hasattr(os, "fchmod"), reason="POSIX file modes")
def test_stored_files_get_the_modes_of_ordinary_files(tmp_path):
    """A file is readable by whom the umask allows, as any file the user writes (mkstemp's 0600
    made a cache warmed by one user, e.g. at a container's build, unreadable to the service's)."""
    old = os.umask(0o022)
    os.umask(old)
    path = GraphStore(tmp_path).path("m", "f", "0" * 40)
    GraphStore(tmp_path).update(path, lambda current: b"data")
    assert path.stat().st_mode & 0o777 == 0o666 & ~old


def test_a_file_larger_than_the_bound_is_refused_unread(tmp_path):
    store = GraphStore(tmp_path, max_bytes=100)
    path = store.path("m", "f", "0" * 40)
    path.parent.mkdir()
    path.write_bytes(b"x" * 101)
    with pytest.raises(CorruptEntry, match="larger"):
        store.read(path)
    path.write_bytes(b"x" * 100)
    assert store.read(path) == b"x" * 100


def test_reads_touch_a_file_at_most_once_a_minute(tmp_path):
    store = GraphStore(tmp_path)
    path = store.path("m", "f", "0" * 40)
    store.update(path, lambda current: b"data")
    now = time.time()
    os.utime(path, (now - 10, now - 10))
    assert store.read(path) == b"data" and abs(path.stat().st_mtime - (now - 10)) < 1
    os.utime(path, (now - 120, now - 120))
    assert store.read(path) == b"data" and path.stat().st_mtime >= now - 1
    assert store.read(path.with_name("missing.lzt")) is None


def test_concurrent_writers_lose_nothing(lib, tmp_path):
    cache = tmp_path / "cache"
    code = """
        f = lazytrace.trace_graph(lib.shifted, cache=cache)
        for n in range(2, 10):
            f(torch.rand(n, 3), torch.rand(n, 3))
        print(json.dumps(f.stats.as_dict()))
    """
    prelude = f"import json, sys, torch, lazytrace; sys.path.insert(0, {os.path.dirname(lib.__file__)!r}); " \
              f"import {lib.__name__} as lib; cache = {str(cache)!r}\n"
    procs = [subprocess.Popen([sys.executable, "-c", prelude + textwrap.dedent(code)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1])["stored"] >= 0
    assert len(stored_files(cache)) == 8
    assert not list(cache.glob("*/.tmp-*"))
    fresh = lazytrace.trace_graph(lib.shifted, cache=cache)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        for n in range(2, 10):
            x, y = torch.rand(n, 3), torch.rand(n, 3)
            assert torch.equal(fresh(x, y), lib.shifted(x, y))
    assert fresh.stats.traces == 0 and fresh.stats.loaded == 8


def test_walking_a_plan_gives_what_its_generated_code_gives():
    """A graph loaded from disk runs its first call by walking the plan (no code generation)."""
    pytest.importorskip("kornia")
    from kornia_cases import CASES
    from lazytrace.graph import interpret
    compared = 0
    for name, fn, make in CASES:
        lazy = lazytrace.trace_graph(fn)
        lazy(*make(0))
        args = make(1)
        graph = lazy.graph_for(*args)
        if graph is None:
            continue
        leaves = lazy._signature.key(args, {})[1]
        walked, generated = (_outcome(lambda: interpret.run(graph._plan, leaves, graph.backend)),
                             _outcome(lambda: graph.fn(*leaves)))
        for a, b in zip(*(torch.utils._pytree.tree_leaves(x) for x in (walked, generated))):
            assert type(a) is type(b) and (torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b), name
        compared += 1
    assert compared >= 40


def _outcome(call):
    try:
        return call()
    except lazytrace.GuardFailed as exc:       # a guard fails alike in both (data-dependent checks)
        return ("guard failed", exc.args)


def test_an_unusable_cache_directory_never_fails_the_call(lib, tmp_path):
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the cache directory should be")
    f = lazytrace.trace_graph(lib.shifted, cache=blocked)
    x, y = torch.rand(3, 4), torch.rand(3, 4)
    with pytest.warns(CacheWarning) as record:
        assert torch.equal(f(x, y), lib.shifted(x, y))
    messages = " | ".join(str(w.message) for w in record)
    assert "skipped the cache file" in messages and "graph not stored" in messages
    assert f.stats.stored == 0 and f.stats.traces == 1 and f.stats.not_stored
    assert torch.equal(f(x, y), lib.shifted(x, y)) and f.stats.hits == 1


FRAMEWORK_FUNCTIONS = '''
def jax_sine(x):
    import jax.numpy as jnp
    return jnp.sin(x) * 2

def tf_sine(x):
    import tensorflow as tf
    return tf.sin(x) * 2
'''


@pytest.mark.parametrize("framework", ["jax", "tensorflow"])
def test_jax_and_tensorflow_graphs_are_stored_with_the_cache_on(temp_library, tmp_path, framework):
    import numpy as np
    module = pytest.importorskip(framework)
    name, _ = temp_library(FRAMEWORK_FUNCTIONS)
    lib = __import__(name)
    fn = lib.jax_sine if framework == "jax" else lib.tf_sine
    make = (lambda a: module.numpy.asarray(a)) if framework == "jax" else module.constant
    lazy = lazytrace.trace_graph(fn, cache=tmp_path / "cache", prewarm=True)
    for _ in range(3):
        x = make(np.random.rand(3).astype(np.float32))
        assert np.array_equal(np.asarray(lazy(x)), np.asarray(fn(x)))
    assert lazy.stats.traces == 1 and lazy.stats.hits == 2 and lazy.stats.stored == 1 and not lazy.stats.not_stored
    again = lazytrace.trace_graph(fn, cache=tmp_path / "cache")
    x = make(np.random.rand(3).astype(np.float32))
    assert np.array_equal(np.asarray(again(x)), np.asarray(fn(x)))
    assert again.stats.loaded == 1 and again.stats.traces == 0 and again.stats.hits == 1


def test_the_module_data_hash_follows_changes_and_keeps_no_replaced_global_alive(temp_library):
    import gc
    import weakref
    name, _ = temp_library("import torch\nWEIGHT = torch.ones(3)\nSCALE = 2.0\nTABLE = [1.0, (2, 3)]\n")
    lib = __import__(name)
    first = identity.module_data(name)
    assert identity.module_data(name) == first            # kept: the same objects
    old = weakref.ref(lib.WEIGHT)
    lib.WEIGHT = torch.zeros(3)                            # not data: the same hash, and the old one is freed
    gc.collect()
    assert old() is None and identity.module_data(name) == first
    lib.TABLE[1] = (2, 4)                                  # in place
    second = identity.module_data(name)
    assert second != first
    lib.SCALE = 2                                          # equal, but another type
    assert identity.module_data(name) not in (first, second)


def test_the_module_data_memo_sees_every_change_of_the_globals_and_of_sets_in_place(temp_library):
    name, _ = temp_library("MODES = {'a', 'b'}\nGAIN = 1.5\n")
    lib = __import__(name)
    first = identity.module_data(name)
    assert identity.module_data(name) == first                 # the memo: nothing changed
    lib.MODES.add("c")                                         # in place
    added = identity.module_data(name)
    assert added != first
    lib.MODES.discard("c")
    assert identity.module_data(name) == first                 # the same data again
    lib.GAIN = 2.5
    assert identity.module_data(name) != first
    lib.GAIN = 1.5
    assert identity.module_data(name) == first
    vars(lib)["GAIN"] = 1.5                                    # set to an equal value (another object)
    lib.LATE = 3                                               # a new global
    assert identity.module_data(name) != first
    del lib.LATE
    assert identity.module_data(name) == first


WATCHED_LIBRARY = """
class Base:
    LEVEL = 1


class Config(Base):
    SCALE = 2.0
    TABLE = [1, 2]
    LOOKUP = {"a": [1.0]}

    def method(self):
        return self.SCALE


class Inner:
    def __init__(self):
        self.scale = 0.5
        self.sizes = [3, 5]


class Settings:
    def __init__(self):
        self.gain = 1.5
        self.inner = Inner()
        self.modes = {"x": {1, 2}}


class Other:
    def __init__(self):
        self.gain = 1.5


SETTINGS = Settings()
OTHER = Other()
TABLES = ({"k": [1, 2]}, {3, 4})
ROWS = [{"a": 1}, (2, [3])]
"""


def _change(lib, what):
    {"class attribute": lambda: setattr(lib.Config, "SCALE", 3.0),
     "base class attribute": lambda: setattr(lib.Base, "LEVEL", 2),
     "class list in place": lambda: lib.Config.TABLE.append(3),
     "class dict value in place": lambda: lib.Config.LOOKUP["a"].append(2.0),
     "class method replaced": lambda: setattr(lib.Config, "method", lambda self: 0),
     "object attribute": lambda: setattr(lib.SETTINGS, "gain", 2.5),
     "object attribute deleted": lambda: delattr(lib.SETTINGS, "gain"),
     "nested object attribute": lambda: setattr(lib.SETTINGS.inner, "scale", 0.25),
     "nested object list": lambda: lib.SETTINGS.inner.sizes.__setitem__(0, 7),
     "object dict of sets": lambda: lib.SETTINGS.modes["x"].add(9),
     "object class reassigned": lambda: setattr(lib.OTHER, "__class__", lib.Inner),
     "dict in a tuple": lambda: lib.TABLES[0]["k"].append(5),
     "set in a tuple": lambda: lib.TABLES[1].discard(3),
     "dict in a list": lambda: lib.ROWS[0].update(a=2),
     "list in a tuple in a list": lambda: lib.ROWS[1][1].append(4)}[what]()


@pytest.mark.parametrize("what", ["class attribute", "base class attribute", "class list in place",
                                  "class dict value in place", "class method replaced", "object attribute",
                                  "object attribute deleted", "nested object attribute", "nested object list",
                                  "object dict of sets", "object class reassigned", "dict in a tuple",
                                  "set in a tuple", "dict in a list", "list in a tuple in a list"])
def test_the_module_data_memo_gives_the_hash_of_the_data_now_after_any_change_in_place(what, temp_library):
    # the memo watches classes, dicts and objects by CPython's version numbers (persist/versions.py):
    # after any change its hash is the one computed afresh, and without a change it is kept as it is
    name, _ = temp_library(WATCHED_LIBRARY)
    lib = __import__(name)
    first = identity.module_data(name)
    memo = identity._data_memo[name]
    assert identity.module_data(name) == first and identity._data_memo[name] is memo     # nothing changed
    memos = identity.memos_of([name])           # what a preloaded graph's first call checks (LazyGraph._confirm)
    assert identity.still_memoized(memos)
    _change(lib, what)
    if what != "class method replaced":
        assert not identity.still_memoized(memos)        # then _confirm compares the hash made afresh
    seen = identity.module_data(name)
    identity._data_memo.pop(name)
    assert seen == identity.module_data(name)                  # the memo's answer = a fresh computation
    if what != "class method replaced":                        # methods are no data
        assert seen != first


def test_the_version_readers_follow_cpythons_own_numbers():
    versions = pytest.importorskip("lazytrace.persist.versions")
    testcapi = pytest.importorskip("_testcapi")
    if versions.type_view(int) is None and versions._TYPE_OFFSET is None:
        pytest.skip("no class version tags on this Python")

    class Probe:
        pass
    view, tag = versions.type_view(Probe)
    assert tag == testcapi.type_get_version(Probe) != 0
    Probe.x = 1
    assert view.value == 0
    assert versions.type_view(Probe)[1] not in (0, tag)
    d = {}
    before = versions.dict_version(d)
    d["a"] = 1
    assert versions.dict_version(d) != before


STATE_LIBRARY = """
import torch


def by_mkldnn(x):
    return x * (2.0 if torch.backends.mkldnn.enabled else 3.0)
"""


def test_a_graph_reading_framework_state_is_stored_with_its_check(temp_library, tmp_path):
    # torch.backends.mkldnn.enabled (kornia's ssim reads it) is checked by the stored graph too
    name, _ = temp_library(STATE_LIBRARY)
    lib = __import__(name)
    cache = tmp_path / "cache"
    g = lazytrace.trace_graph(lib.by_mkldnn, cache=cache)
    x = torch.rand(3)
    assert torch.equal(g(x), x * 2.0) and g.stats.stored == 1
    result = run_fresh(lib, cache, """
        g = lazytrace.trace_graph(lib.by_mkldnn, cache=cache)
        x = torch.rand(3)
        same = torch.equal(g(x), x * 2.0)
        with torch.backends.mkldnn.flags(enabled=False):
            same = same and torch.equal(g(x), x * 3.0)
        print(json.dumps({"same": same, **g.stats.as_dict()}))
    """)
    assert result["same"] and result["loaded"] == 1 and result["traces"] == 1

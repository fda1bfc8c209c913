"""The persistent graph cache for JAX and TensorFlow: a fresh process replays stored graphs
without tracing (weak-typed and bfloat16 constants, PRNG keys, tf.Variables read live), a
framework version change misses, files naming calls outside the framework are refused."""
import json
import os
import warnings

import numpy as np
import pytest
from conftest import run_fresh_python
from safetensors.numpy import load as st_load, save as st_save

import lazytrace
from lazytrace import cli
from lazytrace.backends import get_backend
from lazytrace.persist import CacheWarning, CorruptEntry, codec, identity, read_description

jax = pytest.importorskip("jax")
jnp = jax.numpy

JAX_LIBRARY = '''
import jax
import jax.numpy as jnp

def mix(x):
    y = jnp.sin(x) * 2 + jnp.sum(x, axis=0) + jax.nn.relu(x) - x[0]
    return y + jnp.exp(x).mean() + x ** 2 + abs(x) ** 0.5, jax.lax.exp(x)

def weak(x):
    return x * (jnp.exp(0.5) * 2)          # a weak-typed constant (of Python numbers): x's dtype wins

def bf16(x):
    return x * jnp.asarray([1.5, 2.25, -3.0], dtype=jnp.bfloat16)

def noise(key, x):
    return x + jax.random.normal(key, x.shape)

def branchy(x):
    if x.sum() > 0:
        return x * 2
    return x - 1

def clipped(x):
    if (x > -1).all().item():         # x.item(): a guard on the value read back (True)
        return x * 2
    return x

def looped(x):
    return jax.lax.fori_loop(0, 3, lambda i, v: v * 2 + i, x)
'''

TF_LIBRARY = '''
import tensorflow as tf

def mix(x):
    y = tf.math.sin(x) * 2.0 + tf.reduce_sum(x) + tf.nn.relu(x)[0]
    return x * x + y, tf.cast(y, tf.bfloat16)

def bf16(x):
    return x * 1.5 - 0.25          # the numbers replay as cached bfloat16 tensors (stored arrays)

def with_variable(x, v):
    return tf.matmul(x, v) + v[0]
'''


def make_lib(temp_library, source):
    name, _ = temp_library(source)
    return __import__(name)


def run_fresh(lib, cache, code: str) -> dict:
    """Run `code` in a new process with the library imported as `lib` and `cache` set; return the
    JSON it prints last."""
    prelude = f"""
        import json, sys, warnings
        import numpy as np
        import lazytrace, lazytrace.persist
        sys.path.insert(0, {os.path.dirname(lib.__file__)!r})
        import {lib.__name__} as lib
        cache = {str(cache)!r}
        warnings.simplefilter("error", lazytrace.persist.CacheWarning)
    """
    return run_fresh_python(prelude, code)


def stored_files(cache):
    return sorted(cache.glob("*/*.lzt"))


# ---- JAX -------------------------------------------------------------------------------------

@pytest.fixture
def jlib(temp_library):
    return make_lib(temp_library, JAX_LIBRARY)


def _jax_calls():
    x = jnp.asarray(np.random.rand(3, 4).astype(np.float32))
    b = jnp.asarray(np.random.rand(3).astype(np.float32), dtype=jnp.bfloat16)
    return [("mix", (x,)), ("weak", (b,)), ("bf16", (b,)), ("noise", (jax.random.key(1), x)),
            ("noise", (jax.random.PRNGKey(1), x)), ("branchy", (x,)), ("clipped", (x,))]


def test_jax_graphs_replay_in_a_fresh_process_without_tracing(jlib, tmp_path):
    cache = tmp_path / "cache"
    for name, args in _jax_calls():
        lazy = lazytrace.trace_graph(getattr(jlib, name), cache=cache)
        lazy(*args)
        assert lazy.stats.stored == 1 and not lazy.stats.not_stored, (name, lazy.stats)
    result = run_fresh(jlib, cache, """
        import jax, jax.numpy as jnp
        rng = np.random.default_rng(5)
        x = jnp.asarray(rng.random((3, 4), dtype=np.float32))              # new inputs
        b = jnp.asarray(rng.random(3, dtype=np.float32), dtype=jnp.bfloat16)
        calls = [("mix", (x,)), ("weak", (b,)), ("bf16", (b,)), ("noise", (jax.random.key(7), x)),
                 ("noise", (jax.random.PRNGKey(7), x)), ("branchy", (x,)), ("branchy", (-x,)), ("clipped", (x,))]
        graphs = {name: lazytrace.trace_graph(getattr(lib, name), cache=cache, prewarm=True)
                  for name in dict(calls)}
        preloaded = {name: g.stats.loaded for name, g in graphs.items()}
        same = []
        for name, args in calls:
            got, want = jax.tree.leaves(graphs[name](*args)), jax.tree.leaves(getattr(lib, name)(*args))
            same.append([name, all(g.dtype == w.dtype and g.aval.weak_type == w.aval.weak_type
                                   and np.array_equal(np.asarray(g, np.float32), np.asarray(w, np.float32))
                                   for g, w in zip(got, want))])
        print(json.dumps({"same": same, "preloaded": preloaded,
                          "stats": {name: g.stats.as_dict() for name, g in graphs.items()}}))
    """)
    assert all(ok for _, ok in result["same"]), result["same"]
    # both key kinds of `noise` preloaded; branchy's stored guard holds for x, fails for -x: traced
    assert result["preloaded"] == {"mix": 1, "weak": 1, "bf16": 1, "noise": 2, "branchy": 1, "clipped": 1}
    for name, stats in result["stats"].items():
        assert stats["traces"] == (1 if name == "branchy" else 0), (name, stats)
        assert stats["hits"] == (1 if name == "branchy" else stats["calls"]), (name, stats)
    assert result["stats"]["mix"]["prewarmed"] == 1


#: new inputs of different placement and dtype: uncommitted (jnp.asarray), committed to its
#: device (jax.device_put(x, device): jit compiles the two apart), bfloat16 (run here and in the
#: fresh process)
FIRST_CALLS = """
def first_calls(rng):
    x = jnp.asarray(rng.random((3, 4), dtype=np.float32))
    b = jnp.asarray(rng.random(3, dtype=np.float32), dtype=jnp.bfloat16)
    return [("mix", (x,)), ("weak", (jax.device_put(b, jax.devices()[0]),)), ("bf16", (b,))]
"""


@pytest.mark.parametrize("prewarm", [True, False])
def test_a_prewarmed_jax_first_call_compiles_nothing(jlib, tmp_path, prewarm):
    """After prewarm, the user's first calls in a fresh process (new inputs of the stored
    signatures, committed or not) stage no jaxpr, compile no XLA program and take no Python
    dispatch path of jit (each op a hit of JAX's C++ dispatch cache); a plain preload leaves
    all that to those calls (what the counters see). Outputs equal eager's."""
    cache = tmp_path / "cache"
    space = {"jax": jax, "jnp": jnp, "np": np}
    exec(FIRST_CALLS, space)
    for name, args in space["first_calls"](np.random.default_rng(0)):
        lazytrace.trace_graph(getattr(jlib, name), cache=cache)(*args)
    result = run_fresh(jlib, cache, f"""
        import collections
        import jax, jax.numpy as jnp
        from jax._src import dispatch, pjit
        exec({FIRST_CALLS!r})
        names = ("mix", "weak", "bf16")
        graphs = {{name: lazytrace.trace_graph(getattr(lib, name), cache=cache, prewarm={prewarm})
                  for name in names}}
        calls = first_calls(np.random.default_rng(5))         # new inputs, made before counting
        jax.block_until_ready([args for _, args in calls])
        seen = collections.Counter()
        events = (dispatch.JAXPR_TRACE_EVENT, dispatch.BACKEND_COMPILE_EVENT)
        jax.monitoring.register_event_duration_secs_listener(
            lambda event, _secs, **_: seen.update([event] if event in events else []))
        infer = pjit._infer_params                      # jit's Python path: a miss of its C++ cache

        def counted(*a, **k):
            seen["python dispatch"] += 1
            return infer(*a, **k)
        pjit._infer_params = counted
        outs = [graphs[name](*args) for name, args in calls]
        first = dict(seen)
        pjit._infer_params = infer
        same = []
        for (name, args), out in zip(calls, outs):
            got, want = jax.tree.leaves(out), jax.tree.leaves(getattr(lib, name)(*args))
            same.append(all(g.dtype == w.dtype and g.aval.weak_type == w.aval.weak_type and
                            g.sharding == w.sharding and np.array_equal(np.asarray(g, np.float32),
                                                                        np.asarray(w, np.float32))
                            for g, w in zip(got, want)))
        print(json.dumps({{"first": first, "same": same,
                          "stats": {{name: g.stats.as_dict() for name, g in graphs.items()}}}}))
    """)
    assert all(result["same"]), result
    stats = result["stats"]
    assert all(s["loaded"] == 1 and s["traces"] == 0 and s["hits"] == s["calls"] for s in stats.values()), stats
    if prewarm:
        assert all(s["prewarmed"] == 1 for s in stats.values()), stats
        assert result["first"] == {}, result["first"]
    else:
        assert result["first"].get("/jax/core/compile/backend_compile_duration", 0) > 0, result["first"]
        assert result["first"].get("python dispatch", 0) > 0, result["first"]


def test_a_jax_graph_stored_with_other_devices_misses(temp_library, tmp_path):
    """Code reading the number of devices in Python (len(jax.devices()), jax.device_count()) bakes
    it: a process with other devices (jax_num_cpu_devices, XLA_FLAGS, CUDA_VISIBLE_DEVICES) replayed
    the other process's count."""
    lib = make_lib(temp_library, "import jax\ndef per_device(x):\n    return x * len(jax.devices())\n")
    cache = tmp_path / "cache"

    def run(devices):
        return run_fresh(lib, cache, f"""
            import jax, jax.numpy as jnp
            jax.config.update("jax_num_cpu_devices", {devices})
            g = lazytrace.trace_graph(lib.per_device, cache=cache)
            x = jnp.arange(3.0)
            print(json.dumps({{"same": bool((g(x) == lib.per_device(x)).all()), **g.stats.as_dict()}}))
        """)
    assert run(2)["stored"] == 1
    other = run(1)
    assert other["same"] and other["loaded"] == 0 and other["traces"] == 1
    again = run(2)
    assert again["same"] and again["loaded"] == 1 and again["traces"] == 0


def test_jax_constants_keep_weak_type_and_bfloat16_after_loading(jlib, tmp_path):
    cache = tmp_path / "cache"
    b = jnp.asarray([0.5, 1.0, 2.0], dtype=jnp.bfloat16)
    for name in ("weak", "bf16"):
        lazytrace.trace_graph(getattr(jlib, name), cache=cache)(b)
    for name in ("weak", "bf16"):
        loaded = lazytrace.trace_graph(getattr(jlib, name), cache=cache)
        assert loaded.stats.loaded == 1
        (constant,) = loaded.graphs[0]._plan.constants
        if name == "weak":
            assert constant.obj.aval.weak_type and constant.obj.dtype == jnp.float32
        else:
            assert constant.obj.dtype == jnp.bfloat16 and not constant.obj.aval.weak_type
        out = loaded(b)
        assert out.dtype == jnp.bfloat16 and np.array_equal(out, getattr(jlib, name)(b))
        assert loaded.stats.traces == 0


def test_a_jax_graph_without_a_name_for_each_call_is_not_stored(jlib, tmp_path):
    x = jnp.arange(4.0)
    lazy = lazytrace.trace_graph(jlib.looped, cache=tmp_path / "cache")
    assert np.array_equal(lazy(x), jlib.looped(x))
    assert lazy.stats.stored == 0 and len(lazy.stats.not_stored) == 1
    assert np.array_equal(lazy(x + 1), jlib.looped(x + 1)) and lazy.stats.hits == 1


# ---- TensorFlow --------------------------------------------------------------------------------

@pytest.fixture
def tlib(temp_library):
    pytest.importorskip("tensorflow")
    return make_lib(temp_library, TF_LIBRARY)


@pytest.mark.parametrize("setting", ["devices", "threads"])
def test_a_tf_graph_stored_under_another_device_or_thread_configuration_misses(temp_library, tmp_path, setting):
    """Code reading TensorFlow's configuration in Python (its logical devices, thread pools) bakes it:
    a process configured otherwise replayed the other process's values."""
    pytest.importorskip("tensorflow")
    lib = make_lib(temp_library, "import tensorflow as tf\n"
                                 "def scaled(x):\n"
                                 "    return x * (len(tf.config.list_logical_devices('CPU'))\n"
                                 "                + tf.config.threading.get_inter_op_parallelism_threads())\n")
    cache = tmp_path / "cache"
    configure = {"devices": "tf.config.set_logical_device_configuration(tf.config.list_physical_devices('CPU')[0], "
                            "[tf.config.LogicalDeviceConfiguration()] * 2)",
                 "threads": "tf.config.threading.set_inter_op_parallelism_threads(3)"}[setting]

    def run(configured):
        return run_fresh(lib, cache, f"""
            import tensorflow as tf
            if {configured}:
                {configure}
            g = lazytrace.trace_graph(lib.scaled, cache=cache)
            x = tf.ones(2)
            print(json.dumps({{"same": bool(tf.reduce_all(g(x) == lib.scaled(x))), **g.stats.as_dict()}}))
        """)
    assert run(False)["stored"] == 1
    other = run(True)
    assert other["same"] and other["loaded"] == 0 and other["traces"] == 1
    again = run(False)
    assert again["same"] and again["loaded"] == 1 and again["traces"] == 0


def test_preloading_tf_graphs_leaves_tensorflow_unstarted(temp_library, tmp_path):
    """A library's stored TF graphs preloaded at import must not start TensorFlow's context (they
    rebuilt tensors then): the user's device configuration after the import raised RuntimeError
    'Virtual devices cannot be modified after being initialized'. They load at the first call."""
    pytest.importorskip("tensorflow")
    lib = make_lib(temp_library, "import tensorflow as tf\ndef double(x):\n    return x * 2.0 + 1.0\n")
    cache = tmp_path / "cache"
    code = """
        import tensorflow as tf
        g = lazytrace.trace_graph(lib.double, cache=cache)          # preloads here
        try:
            tf.config.set_logical_device_configuration(tf.config.list_physical_devices('CPU')[0],
                                                       [tf.config.LogicalDeviceConfiguration()] * 2)
            configured = True
        except RuntimeError:
            configured = False
        x = tf.constant([1.0, 2.0])
        print(json.dumps({"configured": configured, "same": bool(tf.reduce_all(g(x) == lib.double(x))),
                          **g.stats.as_dict()}))
    """
    assert run_fresh(lib, cache, code)["stored"] == 1
    result = run_fresh(lib, cache, code)
    assert result["configured"] and result["same"] and result["loaded"] == 1 and result["traces"] == 0


def test_tensorflow_graphs_replay_in_a_fresh_process_and_read_variables_live(tlib, tmp_path):
    import tensorflow as tf
    cache = tmp_path / "cache"
    x = tf.constant(np.random.rand(3).astype(np.float32))
    m = tf.constant(np.random.rand(2, 3).astype(np.float32))
    v = tf.Variable(np.random.rand(3, 3).astype(np.float32))
    for name, args in (("mix", (x,)), ("bf16", (tf.cast(x, tf.bfloat16),)), ("with_variable", (m, v))):
        lazy = lazytrace.trace_graph(getattr(tlib, name), cache=cache)
        lazy(*args)
        assert lazy.stats.stored == 1 and not lazy.stats.not_stored, (name, lazy.stats)
    result = run_fresh(tlib, cache, """
        import tensorflow as tf
        rng = np.random.default_rng(3)
        x = tf.constant(rng.random(3, dtype=np.float32))                  # new inputs
        m = tf.constant(rng.random((2, 3), dtype=np.float32))
        v = tf.Variable(rng.random((3, 3), dtype=np.float32))
        graphs = {name: lazytrace.trace_graph(getattr(lib, name), cache=cache, prewarm=True)
                  for name in ("mix", "bf16", "with_variable")}
        preloaded = {name: g.stats.loaded for name, g in graphs.items()}

        def same(name, *args):
            got, want = tf.nest.flatten(graphs[name](*args)), tf.nest.flatten(getattr(lib, name)(*args))
            return all(g.dtype == w.dtype and np.array_equal(g.numpy(), w.numpy()) for g, w in zip(got, want))
        ok = [same("mix", x), same("bf16", tf.cast(x, tf.bfloat16)), same("with_variable", m, v)]
        before = graphs["with_variable"](m, v).numpy()
        v.assign(v * 3.0 + 1.0)                                            # read live: the output follows
        ok.append(same("with_variable", m, v) and not np.array_equal(graphs["with_variable"](m, v).numpy(), before))
        print(json.dumps({"ok": ok, "preloaded": preloaded,
                          "stats": {name: g.stats.as_dict() for name, g in graphs.items()}}))
    """)
    assert result["ok"] == [True, True, True, True]
    assert result["preloaded"] == {"mix": 1, "bf16": 1, "with_variable": 1}
    for name, stats in result["stats"].items():
        assert stats["traces"] == 0 and stats["hits"] == stats["calls"] > 0, (name, stats)


@pytest.mark.parametrize("prewarm", [True, False])
def test_tf_prewarm_starts_the_context_a_plain_preload_leaves_it_to_the_user(tlib, tmp_path, prewarm):
    """A TF graph's key names the logical devices, known once TensorFlow's context starts. A
    process that calls trace_graph(..., prewarm=True) before making any tensor: prewarm runs the
    graphs, so it starts the context and preloads them (it had left them all to their first call).
    Without prewarm the context is left alone: the user can still configure devices."""
    import tensorflow as tf
    cache = tmp_path / "cache"
    lazy = lazytrace.trace_graph(tlib.mix, cache=cache)
    lazy(tf.constant(np.random.rand(3).astype(np.float32)))
    assert lazy.stats.stored == 1
    result = run_fresh(tlib, cache, f"""
        import tensorflow as tf
        from tensorflow.python.eager import context
        mix = lazytrace.trace_graph(lib.mix, cache=cache, prewarm={prewarm})
        started = context.context()._initialized
        if not started:        # the user's own configuration is still allowed
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()])
        x = tf.constant(np.random.default_rng(5).random(3, dtype=np.float32))
        ok = all(np.array_equal(g.numpy(), w.numpy()) for g, w in zip(mix(x), lib.mix(x)))
        print(json.dumps({{"started": started, "ok": ok, "stats": mix.stats.as_dict()}}))
    """)
    stats = result["stats"]
    assert result["ok"] and result["started"] is prewarm
    assert stats["traces"] == 0 and stats["loaded"] == 1 and stats["hits"] == 1, stats
    assert stats["prewarmed"] == (1 if prewarm else 0), stats
    if not prewarm:
        assert list(stats["not_preloaded"]) == ["TensorFlow's context has not started: the devices its key "
                                                "names are not known yet"], stats


# ---- both ----------------------------------------------------------------------------------------

def _one_stored(framework, temp_library, cache):
    """(function, a call's arguments) of a graph stored for `framework`."""
    if framework == "jax":
        lib = make_lib(temp_library, JAX_LIBRARY)
        fn, args = lib.mix, (jnp.asarray(np.random.rand(3, 4).astype(np.float32)),)
    else:
        tf = pytest.importorskip("tensorflow")
        lib = make_lib(temp_library, TF_LIBRARY)
        fn, args = lib.mix, (tf.constant(np.random.rand(3).astype(np.float32)),)
    lazy = lazytrace.trace_graph(fn, cache=cache)
    lazy(*args)
    assert lazy.stats.stored == 1
    return fn, args


def _equal(a, b):
    return all(np.array_equal(np.asarray(x, np.float32), np.asarray(y, np.float32)) for x, y in zip(a, b))


@pytest.mark.parametrize("framework", ["jax", "tensorflow"])
def test_a_framework_version_change_is_a_miss(framework, temp_library, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    fn, args = _one_stored(framework, temp_library, cache)
    assert lazytrace.trace_graph(fn, cache=cache).stats.loaded == 1
    backend = get_backend(framework)
    changed = "jaxlib" if framework == "jax" else backend.distribution[0]     # tensorflow-cpu here
    real = identity.importlib_metadata.version
    monkeypatch.setattr(identity.importlib_metadata, "version", lambda d: "99.0" if d == changed else real(d))
    identity.clear_caches()
    upgraded = lazytrace.trace_graph(fn, cache=cache)
    assert upgraded.stats.loaded == 0
    assert _equal(upgraded(*args), fn(*args)) and upgraded.stats.traces == 1


@pytest.mark.parametrize("framework", ["jax", "tensorflow"])
@pytest.mark.parametrize("call", ["os:system", "builtins:exec", "{root}:os.system", "{root}.io:write_file"])
def test_a_file_naming_a_call_outside_the_framework_is_refused(framework, call, temp_library, tmp_path):
    cache = tmp_path / "cache"
    fn, args = _one_stored(framework, temp_library, cache)
    (path,) = stored_files(cache)
    data = path.read_bytes()
    content, metadata = read_description(data)
    node = content["graphs"][0]["nodes"][0]
    node["call"] = call.format(root=framework)
    node.pop("params", None)
    marker = tmp_path / "pwned"
    node["args"] = [f"echo > {marker}"]
    path.write_bytes(st_save(st_load(data), metadata={**metadata, "lazytrace": json.dumps(content)}))
    with pytest.warns(CacheWarning, match=path.name):
        fresh = lazytrace.trace_graph(fn, cache=cache)
        out = fresh(*args)
    assert _equal(out, fn(*args)) and fresh.stats.loaded == 0 and fresh.stats.traces == 1
    assert not marker.exists()


@pytest.mark.parametrize("framework", ["jax", "tensorflow"])
def test_resolution_only_reaches_framework_array_calls(framework):
    if framework == "tensorflow":
        tf = pytest.importorskip("tensorflow")
        good = {"tensorflow.math:sin": tf.math.sin, "tensorflow:Tensor.__mul__": tf.Tensor.__mul__}
        bad = ["tensorflow:print", "tensorflow:py_function", "tensorflow.io:write_file", "tensorflow.io:read_file",
               "tensorflow:io.write_file", "tensorflow.python.ops.gen_io_ops:write_file", "tensorflow:load_op_library",
               "tensorflow:numpy_function", "tensorflow.python.framework.ops:_EagerTensorBase.__reduce__",
               "tensorflow:saved_model.load", "os:system", "builtins:eval"]
    else:
        good = {"jax.numpy:sin": jnp.sin, "jax.lax:exp_p": jax.lax.exp_p, "jax.nn:relu": jax.nn.relu}
        bad = ["jax.numpy:load", "jax.numpy:save", "jax:debug.callback", "jax.experimental:io_callback",
               "jax._src.callback:io_callback_p", "jax:numpy.os", "jax._src.numpy.ufuncs:os.system",
               "jax:jit", "os:system", "builtins:eval", "builtins:open"]
    backend = get_backend(framework)
    for ref, obj in good.items():
        assert codec.resolve(backend, ref) is obj
    for ref in bad:
        with pytest.raises(CorruptEntry):
            codec.resolve(backend, ref)


def test_loading_a_jax_graph_imports_nothing(monkeypatch):
    import sys
    from lazytrace.persist import Unavailable
    backend = get_backend("jax")
    for module in ("jax._src.scipy.special", "jax.example_libraries.optimizers"):
        monkeypatch.delitem(sys.modules, module, raising=False)
        with pytest.raises(Unavailable):          # the file is kept; the call traces
            codec.resolve(backend, f"{module}:erf")
        assert module not in sys.modules


@pytest.mark.parametrize("framework", ["jax", "tensorflow"])
def test_cache_ls_and_info_show_the_entries(framework, temp_library, tmp_path, capsys):
    cache = tmp_path / "cache"
    fn, _ = _one_stored(framework, temp_library, cache)
    assert cli.main(["cache", "ls", "--cache-dir", str(cache)]) == 0
    listing = capsys.readouterr().out
    assert f"  {fn.__module__}  mix  " in listing and "1 files" in listing
    assert cli.main(["cache", "--cache-dir", str(cache), "info"]) == 0
    assert f"{fn.__module__}" in capsys.readouterr().out


@pytest.mark.parametrize("params", [
    {"t": ["primitive", {"d": [["start_indices", {"t": ["a", "b"]}]]}]},      # parameters it never had
    {"t": ["primitive", {"d": [["f", {"p": "80049500"}]]}]},                 # a tag no literal has
    {"t": ["custom"]},                                                       # another kind of call
    {"t": ["method", "__reduce__"]}])
def test_tampered_jax_call_parameters_never_fail_the_call(jlib, tmp_path, params):
    cache = tmp_path / "cache"
    x = jnp.asarray(np.random.rand(3, 4).astype(np.float32))
    lazytrace.trace_graph(jlib.mix, cache=cache)(x)
    (path,) = stored_files(cache)
    data = path.read_bytes()
    content, metadata = read_description(data)
    node = next(n for n in content["graphs"][0]["nodes"] if n["call"] == "jax.lax:slice_p")
    node["params"] = params
    path.write_bytes(st_save(st_load(data), metadata={**metadata, "lazytrace": json.dumps(content)}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheWarning)     # refused at load, or the graph raises at its call
        fresh = lazytrace.trace_graph(jlib.mix, cache=cache)
        y = jnp.asarray(np.random.rand(3, 4).astype(np.float32))
        assert _equal(fresh(y), jlib.mix(y))


def test_a_jax_function_replaced_before_or_after_the_load_is_called_as_eager_calls_it(jlib, tmp_path):
    # `jnp.sin` records JAX's sin primitive, which does not name jnp.sin: the stored graph names the
    # framework functions its code read, so a jnp.sin replaced before the load misses, and one replaced
    # after it is seen by the loaded graph's checks
    cache = tmp_path / "cache"
    lazy = lazytrace.trace_graph(jlib.mix, cache=cache)
    lazy(jnp.asarray(np.random.rand(3, 4).astype(np.float32)))
    assert lazy.stats.stored == 1
    result = run_fresh(jlib, cache, """
        import jax, jax.numpy as jnp
        x = jnp.asarray(np.random.default_rng(3).random((3, 4), dtype=np.float32))
        original = jnp.sin
        jnp.sin = jnp.cos                                   # before the load
        before = lazytrace.trace_graph(lib.mix, cache=cache)
        same_before = all(np.array_equal(g, w) for g, w in zip(before(x), lib.mix(x)))
        jnp.sin = original
        after = lazytrace.trace_graph(lib.mix, cache=cache)
        same_loaded = all(np.array_equal(g, w) for g, w in zip(after(x), lib.mix(x)))
        jnp.sin = jnp.cos                                   # after the load and first call
        same_after = all(np.array_equal(g, w) for g, w in zip(after(x), lib.mix(x)))
        jnp.sin = original
        print(json.dumps({"same": [same_before, same_loaded, same_after], "before": before.stats.as_dict(),
                          "after": after.stats.as_dict()}))
    """)
    assert result["same"] == [True, True, True]
    assert result["before"]["loaded"] == 0 and result["before"]["traces"] == 1
    assert result["after"]["loaded"] == 1 and result["after"]["hits"] >= 1
    assert result["after"]["traces"] + result["after"]["eager"] >= 1      # the replaced jnp.sin was seen

"""to=: arrays converted at the boundary; framework-agnostic code becomes the named framework's graph."""
import numpy as np
import pytest
import torch

import lazytrace

einops = pytest.importorskip("einops", reason="einops is not installed (pip install -e '.[agnostic]')")
compat = pytest.importorskip("array_api_compat", reason="array-api-compat is not installed")


def agnostic(x):
    xp = compat.array_namespace(x)
    y = einops.rearrange(x, "b c h w -> b h w c")
    return xp.mean(y ** 2, axis=-1) + 1.0


@pytest.mark.parametrize("to", ["torch", "jax", "numpy"])
def test_agnostic_code_becomes_a_graph_of_the_named_framework(to, fw):
    if to == "jax":
        pytest.importorskip("jax")
    lazy = lazytrace.trace_graph(agnostic, to=to)
    target = lazytrace.backends.get_backend(to)
    for seed in range(4):
        data = np.random.default_rng(seed).random((2, 3, 4, 4), dtype=np.float32)
        out = lazy(fw.from_numpy(data))
        assert isinstance(out, target.array_types)
        assert np.allclose(np.asarray(out), agnostic(data), rtol=1e-6)
    # einops fills a global cache of backends on its first call with a new array type: that
    # trace is not kept (graph/reads.py), the next call traces again; every other call is a hit.
    # NumPy included: its tracer answers isinstance(x, np.ndarray) as the array does
    assert lazy.stats.traces <= 2 and lazy.stats.hits == 4 - lazy.stats.traces


def test_default_is_the_framework_of_the_inputs_and_mixing_needs_to():
    lazy = lazytrace.trace_graph(lambda a, b: a + b)
    assert isinstance(lazy(torch.ones(2), torch.ones(2)), torch.Tensor)
    with pytest.raises(TypeError, match="mix arrays of several frameworks.*pass to="):
        lazy(torch.ones(2), np.ones(2, dtype=np.float32))
    mixed = lazytrace.trace_graph(lambda a, b: a + b, to="numpy")
    out = mixed(torch.ones(2), np.ones(2, dtype=np.float32))
    assert isinstance(out, np.ndarray) and out.tolist() == [2.0, 2.0]


def test_graph_with_args_and_to_converts_at_each_call():
    graph = lazytrace.trace_graph(lambda x: x * 2, to="torch", args=(np.ones(3, dtype=np.float32),))
    assert "torch" in graph.backend.name
    assert torch.equal(graph(np.arange(3, dtype=np.float32)), torch.tensor([0.0, 2.0, 4.0]))


@pytest.mark.parametrize("to", ["tensorflow", "jax", "torch", "numpy"])
def test_operator_code_converted_into_each_framework(to, fw):
    if to in ("tensorflow", "jax"):
        pytest.importorskip(to)
    lazy = lazytrace.trace_graph(lambda x, y: (x * 2 + y) / 4, to=to)
    target = lazytrace.backends.get_backend(to)
    for seed in range(3):
        x, y = fw.rand(3, seed=seed), fw.rand(3, seed=seed + 9)
        out = lazy(x, y)
        assert isinstance(out, target.array_types)
        assert np.allclose(np.asarray(out), (fw.numpy(x) * 2 + fw.numpy(y)) / 4)
    assert lazy.stats.hits == 2


@pytest.mark.parametrize("name", ["jax", "tensorflow"])
def test_example_arrays_for_the_command_line(name):
    pytest.importorskip(name)
    backend = lazytrace.backends.get_backend(name)
    a = backend.example_array((2, 3), "float32", 0)
    assert isinstance(a, backend.array_types) and tuple(a.shape) == (2, 3)
    assert np.array_equal(np.asarray(a), lazytrace.backends.get_backend("numpy").example_array((2, 3), "float32", 0))
    with pytest.raises(ValueError, match="unknown numpy dtype"):
        backend.example_array((2,), "float33", 0)


def test_converted_arguments_never_share_the_callers_memory():
    """to= converts through a host copy, so the result shares no memory with the caller's array
    (torch and NumPy would share the buffer); what the function writes into its converted input
    is written back into the caller's array after the call, as without conversion, on the first
    call and on replay."""
    def double_in_place(x):
        x *= 2
        return x

    to_torch = lazytrace.trace_graph(double_in_place, to="torch")
    to_numpy = lazytrace.trace_graph(double_in_place, to="numpy")
    for step in range(3):
        data = np.arange(3, dtype=np.float32) + step
        tensor = torch.arange(3, dtype=torch.float32) + step
        out_torch, out_numpy = to_torch(data), to_numpy(tensor)
        doubled = [2.0 * step, 2.0 * step + 2, 2.0 * step + 4]
        assert out_torch.tolist() == out_numpy.tolist() == data.tolist() == tensor.tolist() == doubled
        out_torch += 1
        out_numpy += 1
        assert data.tolist() == tensor.tolist() == doubled
    assert to_torch.stats.hits == 2 and to_numpy.stats.hits == 2


def test_bfloat16_conjugate_and_odd_layouts_convert():
    jax = pytest.importorskip("jax")
    torch_to_jax = lazytrace.trace_graph(lambda x: x * 2, to="jax")
    jax_to_torch = lazytrace.trace_graph(lambda x: x * 2, to="torch")
    to_numpy = lazytrace.trace_graph(lambda x: x * 2, to="numpy")
    for step in range(3):
        values = [1.5 + step, -3.0, 0.0078125]
        out = torch_to_jax(torch.tensor(values, dtype=torch.bfloat16))
        assert out.dtype == jax.numpy.bfloat16 and np.array_equal(np.asarray(out, np.float32), np.float32(values) * 2)
        back = jax_to_torch(jax.numpy.asarray(values, jax.numpy.bfloat16))
        assert torch.equal(back, torch.tensor(values, dtype=torch.bfloat16) * 2)
        flipped = np.arange(4.0)[::-1] + step                     # negative strides
        assert torch.equal(jax_to_torch(flipped), torch.from_numpy(flipped.copy()) * 2)
        swapped = (np.arange(4.0) + step).astype(">f8")          # big-endian
        assert torch.equal(jax_to_torch(swapped), torch.arange(4.0, dtype=torch.float64).add(step) * 2)
        conj = torch.tensor([1 + 1j, 2 - 1j * step]).conj()       # a lazy conjugate view
        assert np.array_equal(to_numpy(conj), conj.resolve_conj().numpy() * 2)

"""Problems the kornia differential fuzzer (tests/fuzz_kornia.py) found in session 17, reduced."""
import contextlib

import pytest
import torch

import lazytrace


@contextlib.contextmanager
def default_device(device):
    torch.set_default_device(device)
    try:
        yield
    finally:
        torch.set_default_device(None)


def _first_use(number, context):
    """A graph traced in `context` whose number operand becomes the process's shared 0-d constant."""
    f, x = lazytrace.trace_graph(lambda x: x * number), torch.rand(3)
    with context:
        f(x)


def test_a_number_constant_first_made_under_a_meta_default_device_is_not_shared_as_meta():
    # (the number operand of a tensor op is a 0-d constant shared by every graph; made under the
    # default device "meta" it was a meta tensor: a later 0-d result came out on "meta", silently)
    _first_use(0.37125, default_device("meta"))
    g = lazytrace.trace_graph(lambda x: x.sum() * 0.37125)
    x = torch.rand(3)
    for _ in range(3):
        out = g(x)
        assert out.device.type == "cpu" and torch.equal(out, x.sum() * 0.37125)
    assert g.stats.hits == 2 and g.stats.eager == 0


def test_a_number_constant_first_made_in_inference_mode_can_be_saved_for_backward():
    # (an inference tensor: a later graph needing grad raised "Inference tensors cannot be saved
    # for backward" where eager does not; a graph that draws random numbers cannot fall back)
    _first_use(0.41125, torch.inference_mode())
    g = lazytrace.trace_graph(lambda x: (x * 0.41125, torch.rand(2)))
    x = torch.rand(3, requires_grad=True)
    for _ in range(3):
        torch.manual_seed(0)
        out, drawn = g(x)
        torch.manual_seed(0)
        assert torch.equal(out, x * 0.41125) and torch.equal(drawn, torch.rand(2))
    (grad,) = torch.autograd.grad(out.sum(), x)
    assert torch.equal(grad, torch.full((3,), 0.41125))
    assert g.stats.hits == 2


def test_a_number_constant_first_made_under_a_meta_default_device_leaves_random_graphs_replayable():
    _first_use(0.53125, default_device("meta"))
    g = lazytrace.trace_graph(lambda x: x * 0.53125 + torch.rand(3))
    x = torch.rand(3)
    for _ in range(3):
        torch.manual_seed(1)
        out = g(x)
        torch.manual_seed(1)
        assert torch.equal(out, x * 0.53125 + torch.rand(3))
    assert g.stats.hits == 2


class Tagged(torch.Tensor):
    pass


class TagNewTensors(torch.overrides.TorchFunctionMode):
    """A user's mode: tensors made by torch.tensor become Tagged."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out.as_subclass(Tagged) if func is torch.tensor else out


def test_a_number_constant_first_made_under_a_user_mode_is_a_plain_tensor():
    # (the mode around the first trace made the shared constant Tagged: later graphs, run without
    # the mode, returned Tagged results where eager returns plain tensors, silently)
    _first_use(0.61125, TagNewTensors())
    g = lazytrace.trace_graph(lambda x: x * 0.61125)
    x = torch.rand(3)
    for _ in range(3):
        out = g(x)
        assert type(out) is torch.Tensor and torch.equal(out, x * 0.61125)
    assert g.stats.hits == 2

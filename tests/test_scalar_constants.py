"""Python numbers in torch calls (`x * 0.5`, `x.add(1e-6)`) are replayed as 0-dim tensor constants
shared by every trace of the process (TorchBackend.specialize_args). Found by the kornia fuzzer's
slice running before test_kornia (session 17's CI): the first trace ran under
`torch.inference_mode()`, its constants were inference tensors, and every later graph with grad
raised at replay ("Inference tensors cannot be saved for backward"): 0 hits, eager at every call;
under `with torch.device("meta")` they were meta tensors, and later graphs raised likewise."""
import pytest
import torch

import lazytrace


def _scaling(a, b):
    # numbers of each test's own (the constants are made by the first trace that needs them)
    def _scaled(x):
        return (x * a + b).sin()
    return _scaled


@pytest.mark.parametrize("same_lazy_graph", [True, False], ids=["one LazyGraph", "a new LazyGraph"])
@pytest.mark.parametrize("mode", [torch.inference_mode, torch.no_grad, lambda: torch.device("meta")],
                         ids=["inference_mode", "no_grad", "meta default device"])
def test_constants_made_under_a_mode_serve_later_traces_with_grad(mode, same_lazy_graph, request):
    _scaled = _scaling(0.3701 + 0.001 * same_lazy_graph + 0.01 * len(request.node.name), 0.1123)
    first = lazytrace.trace_graph(_scaled)
    inputs = torch.rand(5), torch.rand(5)       # (CPU tensors: made before the meta default device)
    with mode():
        first(inputs[0])
        first(inputs[1])
    lazy = first if same_lazy_graph else lazytrace.trace_graph(_scaled)
    for seed in range(3):
        x = torch.rand(5, generator=torch.Generator().manual_seed(seed)).requires_grad_(True)
        x_ref = x.detach().clone().requires_grad_(True)
        out, ref = lazy(x), _scaled(x_ref)
        assert torch.equal(out, ref) and out.requires_grad
        (g,), (g_ref,) = torch.autograd.grad(out.sum(), x), torch.autograd.grad(ref.sum(), x_ref)
        assert torch.equal(g, g_ref)
    assert lazy.stats.hits == (3 if same_lazy_graph else 2) and lazy.stats.eager == 0

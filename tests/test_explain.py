"""A LazyGraph explains its traces: signatures, and what changed from the nearest earlier one."""
import warnings

import pytest
import torch

import lazytrace
from lazytrace.graph.explain import Change


def test_retrace_is_explained_against_the_nearest_not_the_last_signature(fw):
    lazy = lazytrace.trace_graph(lambda x, s: x * s)
    lazy(fw.rand(3), 1.0)
    lazy(fw.rand(5), 7.0)
    lazy(fw.rand(3), 2.0)                     # one leaf from trace 1, two from trace 2
    first, second, third = lazy.traces
    assert first.nearest is None and first.signature["args[0]"] == "3 float32"
    assert second.nearest == 1 and len(second.changes) == 2
    assert third.nearest == 1
    assert third.changes == (Change("args[1]", "1.0", "2.0"),)
    assert third.cause == "args[1]: 1.0 -> 2.0"


def test_structure_changes_are_named_by_path(fw):
    lazy = lazytrace.trace_graph(lambda x, pair=(1, 1), **extra: x * pair[0])
    lazy(fw.rand(2), pair=(1, 1))
    lazy(fw.rand(2), pair=(1, 3), scale=2)
    assert set(map(str, lazy.traces[1].changes)) == {"kwargs['pair'][1]: 1 -> 3", "kwargs['scale']: new argument 2"}


def test_failed_guard_evicted_signature_and_global_state_are_explained():
    def f(x):
        return x * 2 if x.max() > 0.5 else x - 1

    lazy = lazytrace.trace_graph(f, max_signatures=1)
    lazy(torch.ones(3))
    lazy(torch.zeros(3))                              # same signature, the branch flips
    assert lazy.traces[1].changes == ()
    assert "read back from an array changed" in lazy.traces[1].cause
    assert "torch.Tensor.__bool__ gave True" in lazy.traces[1].cause
    with torch.no_grad():
        lazy(torch.ones(3))
    assert lazy.traces[2].changes == (Change("torch.is_grad_enabled()", "True", "False"),)
    lazy(torch.ones(3))                               # evicted by the no_grad signature
    assert lazy.traces[3].nearest == 2 and "left the cache (max_signatures=1" in lazy.traces[3].cause
    assert all(torch.equal(lazy(x), f(x)) for x in (torch.ones(3), torch.zeros(3)))


def test_signatures_and_explain(fw):
    lazy = lazytrace.trace_graph(lambda x, s: x * s)
    lazy(fw.rand(3), 2.0)
    lazy(fw.rand(4), 2.0)
    lazy(fw.rand(4), 2.0)
    sigs = lazy.signatures
    assert [s.signature["args[0]"] for s in sigs] == ["3 float32", "4 float32"]
    assert all(s.variants == 1 and s.eager_reason is None for s in sigs)
    text = lazy.explain()
    assert "2 traces, 3 calls, 1 graph hits" in text
    assert "trace 2 (nearest earlier: trace 1): args[0]: 3 float32 -> 4 float32" in text
    assert "cached signatures (2 of at most 64)" in text
    assert "  args[0]=4 float32, args[1]=2.0  [1 graph]" in text       # state shared by all: shown once


def test_eager_signature_lists_its_reason(torch_fw):
    lazy = lazytrace.trace_graph(lambda x: torch.tensor(x.numpy()) + 1)
    lazy(torch_fw.rand(2))
    [info] = lazy.signatures
    assert info.eager_reason and "hands array memory" in info.eager_reason and "eager:" in str(info)


def test_warning_uses_the_same_words_and_points_at_the_caller(fw):
    lazy = lazytrace.trace_graph(lambda x: x + 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 6):
            lazy(fw.rand(n))
    [w] = [w for w in caught if issubclass(w.category, lazytrace.RetraceWarning)]
    assert lazy.traces[-1].cause == "args[0]: 4 float32 -> 5 float32"
    assert lazy.traces[-1].cause in str(w.message) and "explain()" in str(w.message)
    assert w.filename == __file__


def test_module_state_changes_are_named(torch_fw):
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.5))
    lazytrace.trace_graph(model)
    x = torch_fw.rand(2, 3)
    model(x)
    model[0].weight.requires_grad_(False)
    model(x)
    model.eval()
    model(x)
    _, second, third = model.forward.traces
    assert second.changes == (Change("self.0.weight", "3x3 float32 grad", "3x3 float32"),)
    assert {c.path for c in third.changes} == {"self.training", "self.0.training", "self.1.training"}
    assert torch.equal(model(x), model[0](x))          # eval: dropout is the identity


def test_autocast_and_default_dtype_changes_are_named(torch_fw):
    lazy = lazytrace.trace_graph(lambda x: x @ x)
    x = torch_fw.rand(4, 4)
    lazy(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lazy(x)
    assert lazy.traces[1].changes == (Change("autocast", "off", "cpu bfloat16"),)


def test_signature_describes_the_global_state_of_the_key_not_the_one_the_call_left():
    def switch_grad_off(x):
        torch.set_grad_enabled(False)       # recorded: the graph switches it off too
        return x * 2

    lazy = lazytrace.trace_graph(switch_grad_off)
    try:
        lazy(torch.ones(3))
        assert not torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(True)
    assert lazy.traces[0].signature["torch.is_grad_enabled()"] == "True"
    assert lazy.signatures[0].signature["torch.is_grad_enabled()"] == "True"
    lazy(torch.zeros(3))                    # the same key (grad on): a hit
    torch.set_grad_enabled(True)
    assert lazy.stats.traces == 1 and lazy.stats.hits == 1


def test_first_trace_of_arrays_alone_is_described_when_read_as_when_traced(fw):
    """The first trace of a call of arrays alone is described when first read (PendingTrace):
    what traces, signatures and a retrace's changes show is describe_call's of the call."""
    from lazytrace.graph import explain

    def f(x, y, *, z):
        return x * y + z

    args, kwargs = (fw.rand(3), fw.rand(3)), {"z": fw.rand(3)}
    lazy = lazytrace.trace_graph(f)
    lazy(*args, **kwargs)
    assert lazy._undescribed is not None        # (nothing described yet)
    key, _, backends = lazy._signature.key(args, kwargs)
    expected = explain.describe_call(args, kwargs, lazy._signature, backends)
    assert list(expected) == ["args[0]", "args[1]", "kwargs['z']", *list(expected)[3:]]
    (first,) = lazy.traces
    assert first == explain.TraceRecord(1, expected, None, ())
    assert lazy.signatures[0].signature == expected and lazy._undescribed is None
    lazy(fw.rand(2, 3), args[1], z=kwargs["z"])
    assert lazy.traces[1].nearest == 1
    assert lazy.traces[1].changes == (explain.Change("args[0]", expected["args[0]"], "2x3 float32"),)


def test_retrace_before_reading_describes_the_pending_first_trace(fw):
    lazy = lazytrace.trace_graph(lambda x: x + 1)
    lazy(fw.rand(3))
    lazy(fw.rand(2, 3))                       # compared with the first trace, left pending until now
    assert lazy.traces[1].changes == (Change("args[0]", "3 float32", "2x3 float32"),)
    assert "trace 1: first call with args[0]=3 float32" in lazy.explain()
    same = lazytrace.trace_graph(lambda x, y: x + y)
    x = fw.rand(3)
    same(x, x)                                # the same array twice: described at once, as before
    assert same._undescribed is None and same.traces[0].signature["args[1]"] == "3 float32 (the same object as args[0])"

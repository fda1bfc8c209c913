"""Shortcuts on the trace's hot paths (TraceSession.on_call, PythonReads._code,
reads._process_facts) decide what the longer paths decided: these cases go through them."""
import platform
import sys
import types

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import lazytrace  # noqa: E402
from lazytrace.graph import reads  # noqa: E402

_backends = torch.backends                     # a submodule held by a global: `_backends.mkldnn.enabled`
_holder = types.ModuleType("lt_probe_holder")  # a user module holding torch: `_holder.torch.backends...`
_holder.torch = torch


def _through_submodule_alias(x):
    return x * (2 if _backends.mkldnn.enabled else 3)


def _through_a_module_holding_torch(x):
    return x * (2 if _holder.torch.backends.mkldnn.enabled else 3)


@pytest.mark.parametrize("fn", [_through_submodule_alias, _through_a_module_holding_torch])
def test_framework_state_read_through_a_chain_of_modules_is_checked(fn):
    lazy = lazytrace.trace_graph(fn)
    for _ in range(2):
        x = torch.rand(3)
        assert torch.equal(lazy(x), fn(x))
        with torch.backends.mkldnn.flags(enabled=not torch.backends.mkldnn.enabled):
            assert torch.equal(lazy(x), fn(x))
    assert lazy.stats.traces == 2 and lazy.stats.hits == 2


def _reference_process_facts() -> dict:
    """reads._process_facts as first written: _process_read asked for every name."""
    found = {}
    for module_name, names in reads._PROCESS_FACTS.items():
        module = sys.modules.get(module_name)
        if module is None:
            continue
        namespace = vars(module)
        for name in namespace if names is None else names:
            obj = namespace.get(name)
            if obj is not None and (names is not None or callable(obj)):
                found[id(obj)] = reads._process_read(module, name)
    return found


def test_process_facts_match_a_read_of_every_name(monkeypatch):
    import multiprocessing  # noqa: F401 - its cpu_count among the facts
    import socket  # noqa: F401
    probe = lambda: "probe"  # noqa: E731 - a function put into platform: read as a fact of the machine
    monkeypatch.setattr(platform, "lt_probe_reader", probe, raising=False)
    facts = reads._process_facts()
    assert facts == _reference_process_facts()
    assert facts[id(probe)] == "machine" and facts[id(platform.machine)] == "machine"
    import os
    assert facts[id(os.environ)] == "environment" and facts[id(os.getenv)] == "environment"
    monkeypatch.setitem(sys.modules, "socket", None)    # an import blocked by a None entry
    assert reads._process_facts() == {k: v for k, v in _reference_process_facts().items()}


def _machine_bound(x):
    return x * (2.0 if platform.machine() else 3.0)


def test_a_function_reading_a_fact_of_the_machine_is_noted():
    from lazytrace.backends import get_backend
    from lazytrace.graph.tracer import TraceSession
    session = TraceSession(get_backend("torch"))
    session.reads.start(_machine_bound)
    assert session.reads.machine and not session.reads.environment


def _list_and_keyword_arguments(x, y):
    pad = [1, 2, 0, 1]
    padded = F.pad(x, pad)
    pad[0] = 7                                  # the recorded call keeps the list it was given
    stacked = torch.stack([padded, padded * y.sum()], dim=0)
    return torch.cat(tensors=[stacked, stacked + 1], dim=1), torch.clamp(x, min=y.min(), max=y.max())


def test_list_and_keyword_arguments_are_replayed_on_new_inputs():
    lazy = lazytrace.trace_graph(_list_and_keyword_arguments)
    lazy(torch.rand(2, 3), torch.rand(4))
    for _ in range(3):
        x, y = torch.rand(2, 3), torch.rand(4)
        for got, want in zip(lazy(x, y), _list_and_keyword_arguments(x, y)):
            assert torch.equal(got, want)
    assert lazy.stats.traces == 1 and lazy.stats.hits == 3

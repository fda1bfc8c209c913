"""The per-call shortcuts of a trace (session 13): Backend.call_facts, the caller frame handed to
TorchBackend.run, the batched write counts. Each must give the answers the full questions give."""
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import lazytrace
from lazytrace.backends import get_backend
from lazytrace.backends.base import ASK_EVERY_CALL, Backend


class _Seen(TorchFunctionMode):
    """The callables torch hands a function mode, with their arguments."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append((func, args, kwargs or {}))
        return func(*args, **(kwargs or {}))


def _calls():
    x = torch.rand(2, 3)
    g = torch.rand(2, 3, requires_grad=True)
    g.sum().backward()
    with _Seen() as seen:
        torch.add(x, 2.0)
        x * 1.5
        x + x
        F.pad(x, [1, 1])
        torch.ones_like(x)
        x.to(x)
        g.grad
        x.clone().requires_grad_()
        torch.relu(x)
        x[x > 0.5]
        x[:, 1:]
        F.dropout(x, 0.5, training=False)
        torch.nonzero(x)
        x.sum().item()
        x.shape
        torch.where(x > 0.5)
        x.add_(1)
        y = torch.rand(2, 3)
        y.grad = torch.rand(2, 3)
    return seen.calls


@pytest.mark.parametrize("func, args, kwargs", _calls(), ids=lambda c: getattr(c, "__name__", None))
def test_call_facts_never_hide_an_answer(func, args, kwargs):
    # a flag False says the backend's method gives its plain answer for every call of `func`
    backend = get_backend("torch")
    facts = backend.call_facts(func)
    recorded, recorded_kwargs = tuple(f"arg{i}" for i in range(len(args))), dict(kwargs)
    if facts.fixed:
        assert backend.classify(func, args, kwargs) is facts.kind
    if not facts.metadata:
        assert backend.metadata_inputs(func, args, kwargs, args, kwargs) == ()
    if not facts.specializes:
        assert backend.specialize_args(func, args, kwargs, recorded) is recorded
    if not facts.replays:
        assert backend.replay_call(func, args, kwargs, recorded, recorded_kwargs) == \
            (func, recorded, recorded_kwargs)
    if not facts.caller_owned:
        assert not backend.caller_owned(func)
    if not facts.stores_arguments:
        assert not backend.stores_arguments(func)


def test_the_facts_of_a_backend_that_has_none_ask_every_question():
    assert Backend.call_facts(None, len) is ASK_EVERY_CALL
    assert not ASK_EVERY_CALL.fixed and all(getattr(ASK_EVERY_CALL, name) for name in (
        "metadata", "specializes", "replays", "caller_owned", "stores_arguments"))


def test_write_counts_are_each_write_count_with_inference_tensors_among_them():
    backend = get_backend("torch")
    a, b = torch.rand(2), torch.rand(2)
    b.add_(1)
    with torch.inference_mode():
        c = torch.rand(2)
    for tensors in ([a, b], [a, c, b], [c], []):
        assert backend.write_counts(tensors) == [backend.write_count(t) for t in tensors]


def test_a_warning_of_a_torch_wrapper_names_the_calling_line():
    # the walk to the code calling starts at the frame the tracer hands over (F.softmax's own,
    # inside handle_torch_function): torch's frames are passed, as from run's frame before
    def fn(x):
        return F.softmax(x) * 2

    x = torch.rand(2, 3)
    found = []
    for f in (fn, lazytrace.trace_graph(fn)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            f(x)
        found.append([(w.filename, w.lineno, w.category) for w in caught])
    assert found[0] == found[1] and found[0] and found[0][0][0] == __file__


def test_a_tensor_made_and_written_with_set_among_inference_outputs_is_seen():
    # check_input_writes compares all counts at once; an inference tensor among the outputs has none
    def fn(x, i):
        a = i[1:]               # a view of an inference tensor: one too, with no write count
        t = x * 3
        t.set_(x * 2)           # reaches no TorchFunctionMode
        return t + 1, a

    lazy = lazytrace.trace_graph(fn)
    with torch.inference_mode():
        i = torch.rand(3)
    for _ in range(3):
        x = torch.rand(3)
        got, _ = lazy(x, i)
        assert torch.equal(got, x * 2 + 1)
    assert lazy.stats.hits == 0


def test_a_lowered_wrappers_arguments_bind_as_signature_bind_binds_them():
    # Lowering binds a call by a plan kept per call shape (number of positional arguments, keyword
    # names): for every wrapper and shape, what signature.bind + apply_defaults give, or no binding
    import inspect
    import itertools
    from lazytrace.backends import torch_lowering

    checked = 0
    for wrapper, (bound_by, _) in torch_lowering._TABLE.items():
        signature = inspect.signature(bound_by)
        names = [p.name for p in signature.parameters.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        for count, k in itertools.product(range(9), range(3)):
            for chosen in itertools.combinations(names, k):
                args, kwargs = tuple(object() for _ in range(count)), {name: object() for name in chosen}
                try:
                    bound = signature.bind(*args, **kwargs)
                    bound.apply_defaults()
                    expected = dict(bound.arguments)
                except TypeError:
                    expected = None
                binding = torch_lowering._binding(signature, count, tuple(kwargs))
                got = None if binding is None else torch_lowering._bind(binding, args, kwargs)
                assert got == expected, (wrapper, count, chosen)
                assert got is None or all(got[n] is v or type(v) is tuple and got[n] == v for n, v in expected.items())
                checked += 1
    assert checked > 1000

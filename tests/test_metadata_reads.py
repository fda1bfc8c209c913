"""Metadata reads (`x.shape`, `x.dtype`, `x.dim()` ...) during a trace: the torch mode hands those
of torch's own that read metadata whatever their arguments to TraceSession.on_metadata, which
answers at once where the signature key fixes the array's metadata (an input's, or an array the
graph computes from them) and hands every other case to on_call (an external array's, a
data-dependent shape's: guarded). Each case is compared with eager on new inputs."""
import pytest

import lazytrace

torch = pytest.importorskip("torch")


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


def _like_eager(fn, *calls):
    """Each call's arguments through a LazyGraph of fn and through fn: equal results; the graph."""
    lazy = lazytrace.trace_graph(fn)
    for args in calls:
        expected, got = fn(*args), lazy(*args)
        assert _same(got, expected), (got, expected)
    return lazy


def _every_kind(t):
    """Every metadata read of the fast path, on `t`, as plain Python values."""
    return (tuple(t.shape), str(t.dtype), str(t.device), t.dim(), tuple(t.size()), t.size(-1), t.ndim, t.numel(),
            t.is_floating_point(), t.requires_grad, t.is_contiguous(), t.stride(), t.element_size(), len(t),
            t.nelement(), t.is_complex(), str(t.layout), t.is_leaf, t.get_device(), t.ndimension())


def _kinds_of_input_intermediate_and_view(x):
    y = x * 2                       # an intermediate
    v = y.transpose(0, 1)           # a view, not contiguous
    s = x[1:]                       # a view of the input
    described = (_every_kind(x), _every_kind(y), _every_kind(v), _every_kind(s))
    return x + len(repr(described)), described


def test_every_kind_on_inputs_intermediates_and_views_like_eager():
    lazy = _like_eager(_kinds_of_input_intermediate_and_view,
                       (torch.rand(3, 4),), (torch.rand(3, 4),),       # a hit
                       (torch.rand(5, 2),), (torch.rand(3, 4).double(),), (torch.rand(4, 3).t(),),
                       (torch.rand(3, 4, requires_grad=True),))
    assert lazy.stats.hits >= 1 and lazy.stats.traces == 5


def _shape_in_control_flow_and_as_argument(x):
    if x.shape[-1] > 4:                          # control flow
        x = x * 2
    else:
        x = x - 1
    flat = x.reshape(x.shape[0], -1)             # an argument
    pad = torch.zeros(x.size(0), x.dim(), dtype=x.dtype)
    return torch.cat([flat, pad], 1) * x.numel()


def test_shape_in_control_flow_and_as_an_argument_retraces_for_a_new_shape():
    lazy = _like_eager(_shape_in_control_flow_and_as_argument,
                       (torch.rand(2, 6),), (torch.rand(2, 6),), (torch.rand(2, 3),), (torch.rand(2, 3),),
                       (torch.rand(3, 2, 5),), (torch.rand(2, 6),))
    assert lazy.stats.traces == 3 and lazy.stats.hits == 3


def test_a_changed_dtype_or_device_retraces():
    def f(x):
        if x.dtype == torch.float64 or x.is_floating_point() is False:
            return x.sum()
        return (x * 3).to(x.device)
    _like_eager(f, (torch.rand(4),), (torch.rand(4).double(),), (torch.arange(4),), (torch.rand(4),))


# -- reads the signature key does not hold: on_call's path, guarded

def test_the_shape_of_a_data_dependent_result_is_checked_at_every_call():
    def f(x):
        picked = x[x > 0.5]                      # its shape depends on the data
        return x * picked.shape[0] + picked.dim() + len(picked)
    _like_eager(f, (torch.tensor([0.1, 0.9, 0.7]),), (torch.tensor([0.1, 0.2, 0.7]),),
                (torch.tensor([0.6, 0.9, 0.7]),), (torch.tensor([0.1, 0.2, 0.3]),))


_EXTERNAL = torch.ones(3)


def _reads_an_external_array(x):
    return x * _EXTERNAL.shape[0] + _EXTERNAL.numel()


def test_the_metadata_of_an_array_not_passed_in_is_checked_at_every_call():
    lazy = lazytrace.trace_graph(_reads_an_external_array)
    x = torch.rand(2)
    assert torch.equal(lazy(x), _reads_an_external_array(x))
    try:
        _EXTERNAL.resize_(5)                 # the same object, another shape
        assert torch.equal(lazy(x), _reads_an_external_array(x))
    finally:
        _EXTERNAL.resize_(3)
    assert torch.equal(lazy(x), _reads_an_external_array(x))


# -- the code reading metadata only: its global reads are watched (the reads walk stays)

_SCALE = 2


class _Helper:
    def scale(self, x):              # this frame makes metadata reads only
        return x.shape[-1] * _SCALE


_HELPERS = [_Helper()]               # (reached through a list: the trace's start does not see it)


def _through_a_helper(x):
    return x * _HELPERS[0].scale(x)


def test_a_global_read_by_code_making_metadata_reads_only_is_watched():
    global _SCALE
    lazy = lazytrace.trace_graph(_through_a_helper)
    x = torch.rand(3)
    assert torch.equal(lazy(x), _through_a_helper(x))
    try:
        _SCALE = 5
        assert torch.equal(lazy(x), _through_a_helper(x))
    finally:
        _SCALE = 2
    assert torch.equal(lazy(x), _through_a_helper(x))


def test_a_metadata_read_that_raises_and_is_caught_fails_the_trace():
    def f(x):
        try:
            n = x.size(3)                    # IndexError for a 1-d x
        except IndexError:
            n = -1
        return x * n
    lazy = _like_eager(f, (torch.rand(3),), (torch.rand(3),))
    assert lazy.stats.hits == 0
    assert any("raised during the trace" in reason for reason in lazy.stats.reasons)


def test_a_metadata_read_with_keywords_like_eager():
    def f(x):
        return x * x.size(dim=1) + x.stride(dim=0)
    _like_eager(f, (torch.rand(2, 3),), (torch.rand(2, 3),), (torch.rand(2, 5),))


def test_a_metadata_read_after_the_trace_ended_is_eager():
    def f(x):
        y = x + 1
        return y, (lambda: (y.shape, y.dim()))
    lazy = lazytrace.trace_graph(f)
    x = torch.rand(2, 3)
    for _ in range(2):                  # (a function result: the signature runs eagerly)
        out, later = lazy(x)
        assert later() == (torch.Size([2, 3]), 2) and torch.equal(out, x + 1)


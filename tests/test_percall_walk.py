"""The one stack walk per framework call (graph.reads.PythonReads.on_call): it notes the code of
the frames the trace's start could not see and, for a call that may be recorded, whether a frame
down to the trace's is in a try or with block (handlers.inside_except then says whether it may
catch). Each part must see every frame it saw when they walked separately."""
import pytest

import lazytrace

torch = pytest.importorskip("torch")

from cholesky_effects import matrix as _matrix, run_like_eager as _run_like_eager  # noqa: E402


# -- a try block in a frame below one the walk has seen already (the frame calling made an earlier call)

def _two_calls(m, acc):
    acc.add_(1)                         # the first call from this frame: the walk notes it
    return torch.linalg.cholesky(m)     # the second: what is below is checked for blocks alone


def _try_below_a_walked_frame(m, acc):
    try:
        return _two_calls(m, acc)
    except RuntimeError:
        return torch.zeros(3, 3)


def test_a_try_block_below_a_frame_walked_before_goes_on_as_in_eager():
    lazy = _run_like_eager(_try_below_a_walked_frame)
    assert lazy.stats.hits == 0
    assert "except clause" in next(iter(lazy.stats.reasons))


# -- the walk goes on noting code below a frame in a block

_OFFSET = 1.0


def _under_try(m, offset):
    try:
        return m + offset               # the first call from here: its frame is in a try block
    except RuntimeError:
        return m


def _reads_a_global(m):                 # (reached through a list: the trace's start does not see it)
    return _under_try(m, _OFFSET)       # a global the walk from the call above must note


_HELPERS = [_reads_a_global]


def _through_a_list(m):
    return _HELPERS[0](m)


def test_code_below_a_frame_in_a_try_block_is_noted():
    global _OFFSET
    lazy = lazytrace.trace_graph(_through_a_list)
    x = torch.ones(3)
    try:
        assert torch.equal(lazy(x), x + 1)
        _OFFSET = 2.0
        assert torch.equal(lazy(x), x + 2)      # a graph holding 1.0 would be wrong
    finally:
        _OFFSET = 1.0


# -- what is below a frame the walk has seen is taken from the first call made from it (it stays there
# until that frame returns): another frame of the same code, called from elsewhere, has its own

def _two_ops(x):
    y = x + 1                           # the first call from this frame: what is below is worked out
    return y * 2                        # the second: taken from the first


def _same_helper_in_and_out_of_a_try(x):
    a = _two_ops(x)
    try:
        b = _two_ops(a)                 # a new frame of the same code, the traced function in a try block
    except RuntimeError:
        b = a
    return _two_ops(b)                  # out of it again


def test_blocks_below_a_walked_frame_are_that_frames_own():
    from lazytrace.graph.ir import Kind
    lazy = lazytrace.trace_graph(_same_helper_in_and_out_of_a_try)
    x = torch.ones(3)
    assert torch.equal(lazy(x), _same_helper_in_and_out_of_a_try(x))
    marks = [node.guarded_by_except for node in lazy.graphs[0].nodes if node.kind is Kind.OP]
    assert marks == [False, False, True, True, False, False], marks

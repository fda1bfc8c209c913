"""A trace pauses the cyclic garbage collector's automatic collections (tracer._pause_collector)
and restores them exactly: the user's gc.disable(), thresholds the traced code sets, two threads."""
import gc
import threading

import pytest
import torch

import lazytrace


@pytest.fixture
def collector():
    """The collector as the test found it, put back after it."""
    enabled, threshold = gc.isenabled(), gc.get_threshold()
    yield
    gc.set_threshold(*threshold)
    (gc.enable if enabled else gc.disable)()


def _cyclic_garbage(n=3000):
    for _ in range(n):
        a = []
        a.append(a)


def test_no_automatic_collection_during_a_trace_and_thresholds_restored(collector):
    gc.enable()
    gc.set_threshold(700, 10, 10)
    inside = []
    collections = []

    def fn(x):
        inside.append(gc.get_threshold())
        _cyclic_garbage()               # > 700 tracked allocations: would start collections
        return x * 2

    callback = lambda phase, info: collections.append((phase, inside[:]))     # noqa: E731
    gc.callbacks.append(callback)
    try:
        lazy = lazytrace.trace_graph(fn)
        x = torch.rand(3)
        assert torch.equal(lazy(x), x * 2)
    finally:
        gc.callbacks.remove(callback)
    assert lazy.stats.traces == 1
    assert inside == [(10 ** 8, 10, 10)]      # (tracer._PAUSED_THRESHOLD)
    assert gc.get_threshold() == (700, 10, 10) and gc.isenabled()
    assert gc.collect() >= 0


def test_a_users_disabled_collector_stays_disabled(collector):
    gc.disable()
    lazy = lazytrace.trace_graph(lambda x: x + 1)
    lazy(torch.rand(3))
    assert not gc.isenabled() and gc.get_threshold()[0] != 0


def test_collector_switched_by_the_traced_function_stays_as_it_left_it(collector):
    gc.enable()
    threshold = gc.get_threshold()

    def disables(x):
        gc.disable()
        return x + 1

    def enables(x):
        gc.enable()
        return x + 2

    lazytrace.trace_graph(disables)(torch.rand(3))
    assert not gc.isenabled() and gc.get_threshold() == threshold
    lazytrace.trace_graph(enables)(torch.rand(3))
    assert gc.isenabled() and gc.get_threshold() == threshold

    def collects(x):
        _cyclic_garbage(10)
        assert gc.collect() >= 10       # an explicit collection still collects
        return x - 1

    x = torch.rand(3)
    assert torch.equal(lazytrace.trace_graph(collects)(x), x - 1)

    def sets_threshold(x):
        gc.set_threshold(500, 7, 7)
        return x * 3

    lazytrace.trace_graph(sets_threshold)(torch.rand(3))
    assert gc.get_threshold() == (500, 7, 7)        # the function's own setting stays


def test_a_users_threshold_zero_is_left_alone(collector):
    gc.set_threshold(0, 10, 10)
    lazytrace.trace_graph(lambda x: x * 5)(torch.rand(3))
    assert gc.get_threshold() == (0, 10, 10)


def test_two_threads_tracing_at_once_restore_the_thresholds(collector):
    gc.set_threshold(700, 10, 10)
    both_in = threading.Barrier(2, timeout=30)
    first_done = threading.Event()
    seen = {}

    def first(x):
        both_in.wait()
        return x + 1

    def second(x):
        both_in.wait()
        assert first_done.wait(30)
        seen["after the first ended"] = gc.get_threshold()
        return x + 2

    results = {}

    def run(name, fn, after=None):
        x = torch.ones(3)
        results[name] = lazytrace.trace_graph(fn)(x)
        if after is not None:
            after.set()

    threads = [threading.Thread(target=run, args=("first", first, first_done)),
               threading.Thread(target=run, args=("second", second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert torch.equal(results["first"], torch.ones(3) + 1) and torch.equal(results["second"], torch.ones(3) + 2)
    # the thread that paused collections restored them when its trace ended; the other left them
    assert gc.get_threshold() == (700, 10, 10)
    assert seen["after the first ended"] in {(700, 10, 10), (0, 10, 10)}


def _scaled(x):
    y = x * 2                   # an intermediate array held by this frame's locals
    z = y + 1
    return z.sum()


def test_a_trace_lets_go_of_the_frames_it_walked(collector):
    """The frames of the Python functions a trace walked (graph.reads) hold the function's
    intermediate arrays; they are freed when the trace ends, not at the next collection."""
    def chain(x):
        return _scaled(x) * 3

    def alive():
        return sum(1 for o in gc.get_objects() if type(o) is torch.Tensor and o.shape == (123, 457))

    x = torch.rand(123, 457)
    gc.collect()
    gc.disable()
    before = alive()
    lazy = lazytrace.trace_graph(chain)
    assert torch.equal(lazy(x), chain(x))
    assert lazy.stats.traces == 1 and alive() == before


def test_thresholds_restored_when_the_traced_function_raises(collector):
    gc.set_threshold(700, 10, 10)

    def fails(x):
        raise KeyError("no")

    with pytest.raises(KeyError):
        lazytrace.trace_graph(fails)(torch.rand(3))
    assert gc.get_threshold() == (700, 10, 10)

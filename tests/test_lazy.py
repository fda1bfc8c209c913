"""LazyGraph: caching policy, threads, warnings, switches."""
import os
import queue
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

import lazytrace
from conftest import calls


def test_cache_is_bounded_lru(fw):
    lazy = lazytrace.trace_graph(lambda x: x + 1, max_signatures=2)
    a, b, c = fw.rand(1), fw.rand(2), fw.rand(3)
    lazy(a), lazy(b), lazy(a), lazy(c)        # c evicts b (a was used more recently)
    assert len(lazy.graphs) == 2
    lazy(a)
    assert lazy.stats.traces == 3
    lazy(b)
    assert lazy.stats.traces == 4


def test_a_signature_evicted_by_another_thread_between_lookup_and_reorder_still_replays(fw):
    """The LRU reorder of a hit runs outside the lock: another thread's trace can evict that
    signature between the lookup and the reorder (move_to_end raised KeyError to the caller)."""
    from collections import OrderedDict
    lazy = lazytrace.trace_graph(lambda x: x + 1, max_signatures=3)
    a, b, c = fw.rand(1), fw.rand(2), fw.rand(3)
    lazy(a), lazy(b), lazy(c)

    class EvictedMeanwhile(OrderedDict):
        def get(self, key, default=None):
            found = super().get(key, default)
            self.pop(key, None)               # what another thread's eviction does at this moment
            return found
    lazy._fast = None
    lazy._cache = EvictedMeanwhile(lazy._cache)
    assert np.array_equal(np.asarray(lazy(a)), np.asarray(a) + 1)
    assert lazy.stats.hits == 1 and lazy.stats.traces == 3


def test_retrace_warning_names_the_changing_argument(fw):
    lazy = lazytrace.trace_graph(lambda x, s: x * s)
    with pytest.warns(lazytrace.RetraceWarning, match=r"args\[0\]: 4 float32 -> 5 float32"):
        for n in range(1, 6):
            lazy(fw.rand(n), 2.0)
    with pytest.warns(lazytrace.RetraceWarning, match=r"traced 10 times.*args\[1\]: 6.0 -> 7.0"):
        for s in range(3, 8):
            lazy(fw.rand(5), float(s))


def test_concurrent_first_calls_trace_once(fw):
    started = threading.Barrier(4)
    traced = queue.SimpleQueue()      # not a list: a list the function changes makes it eager

    def slow(x):
        traced.put(threading.get_ident())
        time.sleep(0.2)                 # a slow first call: the others wait for it
        return x * 2

    lazy = lazytrace.trace_graph(slow)
    x = fw.rand(8)
    results = [None] * 4

    def worker(i):
        started.wait()
        results[i] = lazy(x)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert traced.qsize() == 1 and lazy.stats.traces == 1 and lazy.stats.hits == 3
    assert all(fw.equal(r, x * 2) for r in results)


def test_a_trace_records_nothing_from_other_threads(fw):
    inside, go_on = threading.Event(), threading.Event()

    def fn(x):
        y = x + 1
        inside.set()
        go_on.wait(5)                   # another thread computes meanwhile
        return y * 2

    lazy = lazytrace.trace_graph(fn)
    t = threading.Thread(target=lambda: lazy(fw.rand(3)))
    t.start()
    inside.wait(5)
    other = fw.rand(3, seed=1)
    for _ in range(10):
        other = fw.xp.sin(other) + fw.xp.cos(other)     # no tracer here: must not be recorded
    go_on.set()
    t.join()
    assert len(calls(lazy.graphs[0])) == 2
    x = fw.rand(3, seed=2)
    assert fw.equal(lazy(x), (x + 1) * 2)


def test_guard_failures_never_run_graphs_with_side_effects(fw):
    def fn(x, out):
        out += x                         # visible effect first
        if (out > 1).any():              # then a value is read back
            return out * 2
        return out

    fw.require_mutation()
    lazy = lazytrace.trace_graph(fn)
    for seed in range(3):
        x, out = fw.rand(3, seed=seed), fw.rand(3, seed=seed + 5)
        ref_out = fw.copy(out)
        assert fw.equal(lazy(x, out), fn(x, ref_out)) and fw.equal(out, ref_out)
    assert lazy.stats.eager == 3
    assert "could not be undone" in next(iter(lazy.stats.reasons))


def test_disable_environment_variable_runs_everything_eagerly():
    code = ("import lazytrace, numpy as np\n"
            "f = lazytrace.trace_graph(lambda x: x + 1)\n"
            "f(np.ones(2)); f(np.ones(2))\n"
            "assert f.stats.traces == 0 and f.stats.hits == 0, f.stats\n")
    env = dict(os.environ, LAZYTRACE_DISABLE="1")
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_inspect_signature_and_docs_pass_through():
    import inspect

    def documented(x, factor: float = 2.0):
        """Multiply."""
        return x * factor

    lazy = lazytrace.trace_graph(documented)
    assert inspect.signature(lazy) == inspect.signature(documented)
    assert lazy.__doc__ == "Multiply." and lazy.__name__ == "documented"


def test_graph_raising_at_replay_defers_to_the_original():
    def fn(x, idx):
        return x[idx]                    # the index array's values are not part of the key

    lazy = lazytrace.trace_graph(fn)
    x = np.arange(4.0)
    assert lazy(x, np.array([1, 2]))[1] == 2.0
    with pytest.raises(IndexError):      # the original's own error, not a lazytrace one
        lazy(x, np.array([1, 9]))


def test_a_function_whose_code_is_replaced_traces_its_new_code():
    """IPython's autoreload (and other reload tools) replace a function's __code__ in place: the
    graphs of the old code were replayed; they are dropped and the new code is traced."""
    namespace = {"torch": torch}
    exec("def f(x):\n    return x * 2\n", namespace)
    exec("def g(x):\n    return x + 100\n", namespace)
    f = namespace["f"]
    lazy = lazytrace.trace_graph(f)
    x = torch.rand(3)
    assert torch.equal(lazy(x), x * 2) and torch.equal(lazy(x), x * 2) and lazy.stats.hits == 1
    f.__code__ = namespace["g"].__code__
    for _ in range(2):
        y = torch.rand(3)
        assert torch.equal(lazy(y), y + 100)
    assert lazy.stats.traces == 2 and lazy.stats.hits == 2

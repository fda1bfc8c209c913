"""Session 15 (tf15): the trace's op callback leaves TensorFlow's list while a recorded call runs
(backends/tensorflow.py _RandomWatch.pause); what it watches must still be seen around those calls."""
import numpy as np
import pytest

import lazytrace

tf = pytest.importorskip("tensorflow", reason="tensorflow is not installed (pip install -e '.[tensorflow]')")
from tensorflow.python.eager import context  # noqa: E402


def _callbacks():
    return list(context.context().op_callbacks)


def test_an_unseen_draw_after_recorded_calls_is_still_seen():
    lazy = lazytrace.trace_graph(lambda x: tf.nn.softmax(x * 2.0) + tf.random.normal([4]))
    x = tf.ones((4,))
    a, b = lazy(x), lazy(x)
    assert not np.array_equal(a, b)
    assert lazy.stats.eager == 2 and "random" in next(iter(lazy.stats.reasons))
    assert _callbacks() == []


def test_a_recorded_call_that_raises_puts_the_callback_back():
    def fn(x):
        try:
            tf.reshape(x, (3, 5))           # recorded call that fails (4 elements)
        except (tf.errors.InvalidArgumentError, ValueError):
            pass
        return x + tf.random.uniform([4])   # no tracer argument: unseen by dispatch
    lazy = lazytrace.trace_graph(fn)
    x = tf.ones((4,))
    a, b = lazy(x), lazy(x)
    assert not np.array_equal(a, b)
    assert lazy.stats.hits == 0
    assert _callbacks() == []


def test_callbacks_of_others_keep_seeing_every_op():
    seen = []

    def theirs(op_type, inputs, attrs, outputs, op_name=None, graph=None):
        seen.append(op_type)

    def added_inside(x):
        context.context().add_op_callback(theirs)       # after the trace's own: it stays in the list
        y = tf.nn.softmax(x * 2.0)
        return y + tf.random.normal([4])

    ctx = context.context()
    ctx.add_op_callback(theirs)                         # before the trace's own
    try:
        lazy = lazytrace.trace_graph(lambda x: tf.nn.softmax(x * 2.0))
        x = tf.ones((4,))
        lazy(x)
        assert "Softmax" in seen and "Mul" in seen      # ops of recorded calls reach theirs
        assert _callbacks() == [theirs]
    finally:
        ctx.remove_op_callback(theirs)
    seen.clear()
    lazy = lazytrace.trace_graph(added_inside)
    try:
        a, b = lazy(x), lazy(x)
        assert "Softmax" in seen
        assert not np.array_equal(a, b) and lazy.stats.eager == 2   # the draw is still caught
        assert _callbacks() == [theirs]
    finally:
        ctx.remove_op_callback(theirs)
    assert _callbacks() == []

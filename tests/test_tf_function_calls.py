"""A LazyGraph called inside tf.function (a Keras model's compiled step calling a traced library
function): its arguments are symbolic tensors, TensorFlow's own trace records the function's
calls, and AutoGraph converts the function as tf.function would have, not lazytrace's own code."""
import pytest

import lazytrace

tf = pytest.importorskip("tensorflow")


def _branchy(x):
    if tf.reduce_sum(x) > 0:        # a Python `if` on a tensor: AutoGraph makes it a tf.cond
        return tf.exp(x) * 2.5
    return x * 2.0 + 1.0


def test_a_lazy_graph_inside_tf_function_runs_as_the_function_would():
    lazy = lazytrace.trace_graph(_branchy)
    outer = tf.function(lambda x: lazy(x))
    for x in (tf.ones(3), -tf.ones(3), tf.constant([0.5, -2.0, 1.0])):
        tf.debugging.assert_equal(outer(x), tf.function(_branchy)(x))
    assert lazy.stats.traces == 0       # symbolic calls: nothing traced, nothing cached
    assert any("builds a graph" in reason for reason in lazy.stats.reasons)
    x = tf.ones(3)                      # eager calls trace and replay as ever
    lazy(x), lazy(x)
    assert lazy.stats.traces == 1 and lazy.stats.hits == 1
    tf.debugging.assert_equal(lazy(x), _branchy(x))


def test_autograph_off_gives_the_function_s_own_error():
    lazy = lazytrace.trace_graph(_branchy)
    with pytest.raises(TypeError) as plain:        # (OperatorNotAllowedInGraphError is a TypeError)
        tf.function(_branchy, autograph=False)(tf.ones(3))
    with pytest.raises(type(plain.value)):
        tf.function(lambda x: lazy(x), autograph=False)(tf.ones(3))


def test_autograph_does_not_convert_lazytrace_code():
    from tensorflow.python.autograph.impl import conversion
    lazy = lazytrace.trace_graph(_branchy)
    assert conversion.is_allowlisted(lazy.__call__) and conversion.is_allowlisted(lazytrace.trace_graph)
    assert not conversion.is_allowlisted(_branchy)

"""TensorFlow's AutoGraph (tf.function's conversion of Python control flow) and lazytrace: a
LazyGraph called inside a tf.function is called as it is, not converted with every lazytrace
function it calls (AutoGraph converts the code a converted function calls, unless a rule of its
configuration says not to: TensorFlow's own packages, NumPy ...). Registered for the moment
TensorFlow imports AutoGraph's configuration (lazytrace.backends), before any tf.function call,
whether or not lazytrace's TensorFlow backend was loaded yet; this module imports nothing else."""


def not_converted(config) -> None:
    """Put a rule that lazytrace's own modules are not converted first in AutoGraph's rules."""
    package = __name__.partition(".")[0]
    rules = getattr(config, "CONVERSION_RULES", None)
    if isinstance(rules, tuple) and hasattr(config, "DoNotConvert") and \
            not any(getattr(rule, "_prefix", None) == package for rule in rules):
        config.CONVERSION_RULES = (config.DoNotConvert(package), *rules)

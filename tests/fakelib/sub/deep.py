def halve(x):
    return x / 2


def probe_imports():
    """What this library's own imports see (all real modules when enabled)."""
    import importlib
    import fakelib
    import fakelib.ops as ops_alias
    from fakelib import ops
    from .. import blocks
    from fakelib.ops import double
    return [fakelib, ops_alias, ops, blocks, importlib.import_module("fakelib.sub"), double]

"""lazytrace: trace array code into simplified, cached, straight-line graphs.

    graph = lazytrace.trace_graph(fn, args=(x,))    # trace now
    lazy = lazytrace.trace_graph(fn)                # trace per signature on first call
    traced = lazytrace.trace_graph(kornia)          # a proxy module: every function lazily traced
    with lazytrace.enable("kornia"): import kornia  # the same, through imports

Importing lazytrace imports no array framework.
"""
from .api import TraceError, trace_graph
from .graph.codegen import GuardFailed
from .graph.ir import Graph, SignatureMismatch
from .graph.lazy import LazyGraph, RetraceWarning, stats
from .graph.signature import Unkeyable
from .importhook import disable, enable

__all__ = ["trace_graph", "enable", "disable", "Graph", "LazyGraph", "stats", "TraceError", "SignatureMismatch",
           "RetraceWarning", "GuardFailed", "Unkeyable"]
__version__ = "0.1.0"

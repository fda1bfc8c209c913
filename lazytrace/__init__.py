"""lazytrace: trace array code into simplified, cached, straight-line graphs.

    graph = lazytrace.trace_graph(fn, args=(x,))    # trace now
    lazy = lazytrace.trace_graph(fn)                # trace per signature on first call

Importing lazytrace imports no array framework.
"""
from .api import TraceError, trace_graph
from .graph.codegen import GuardFailed
from .graph.ir import Graph, SignatureMismatch
from .graph.lazy import LazyGraph, RetraceWarning, stats
from .graph.signature import Unkeyable

__all__ = ["trace_graph", "Graph", "LazyGraph", "stats", "TraceError", "SignatureMismatch",
           "RetraceWarning", "GuardFailed", "Unkeyable"]
__version__ = "0.1.0"

"""A small array library for the whole-library tests (trace_graph(module), enable())."""
import enum

from . import ops, sub
from .blocks import Doubler, Scaler
from .ops import add_scaled, cached_table, count_up, describe, double, fails, make_ones, outer

__all__ = ["ops", "sub", "double", "add_scaled", "outer", "count_up", "describe", "fails", "make_ones",
           "Doubler", "Scaler", "Mode", "SCALE"]

SCALE = 2.5


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"

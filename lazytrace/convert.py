"""`to=`: arrays of other frameworks are converted at the boundary of a traced
function, so the function runs, is traced and replays in the named framework.

Conversion goes through NumPy (`Backend.to_numpy` / `Backend.from_numpy`): a
host copy, which is what the CPU frameworks share; static and stateful
arguments are left alone. Results stay in the named framework. The copy is
always a new buffer (C order, native byte order): torch and NumPy would
otherwise share memory, and a function writing into its converted input
would write into the caller's array (a torch tensor behind autograd's back).
"""
from __future__ import annotations

import wrapt

from .backends import backend_for_type
from .graph.signature import walk


def convert_arguments(args: tuple, kwargs: dict, signature, target):
    """(args, kwargs) with every array leaf not owned by `target` converted into it."""
    def visit(path, leaf, kind):
        if kind != "array":
            return leaf
        owner = backend_for_type(type(leaf))
        if owner is target or owner is None:
            return leaf
        return target.from_numpy(host_copy(owner.to_numpy(leaf)))
    return walk(args, kwargs, signature, visit)


def host_copy(data):
    """A new C-contiguous NumPy array in native byte order holding `data`'s values."""
    import numpy as np        # only when arrays are converted: `import lazytrace` imports no framework
    dtype = data.dtype if data.dtype.isnative else data.dtype.newbyteorder("=")
    return np.array(data, dtype=dtype, order="C", copy=True)


class Converting(wrapt.ObjectProxy):
    """A LazyGraph or Graph whose calls first convert arrays into the `to=` framework;
    everything else (stats, graphs, source ...) is the wrapped object's."""

    def __init__(self, wrapped, signature, target):
        super().__init__(wrapped)
        self._self_signature = signature
        self._self_target = target

    def _self_convert(self, args, kwargs):
        return convert_arguments(args, kwargs, self._self_signature, self._self_target)

    def __call__(self, *args, **kwargs):
        args, kwargs = self._self_convert(args, kwargs)
        return self.__wrapped__(*args, **kwargs)

    def graph_for(self, *args, **kwargs):
        args, kwargs = self._self_convert(args, kwargs)
        return self.__wrapped__.graph_for(*args, **kwargs)

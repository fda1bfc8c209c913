"""`to=`: arrays of other frameworks are converted at the boundary of a traced
function, so the function runs, is traced and replays in the named framework.

Conversion goes through NumPy (`Backend.to_numpy` / `Backend.from_numpy`): a
host copy, which is what the CPU frameworks share; static and stateful
arguments are left alone. Results stay in the named framework. The copy is
always a new buffer (C order, native byte order): torch and NumPy would
otherwise share memory, and a function writing into its converted input
would write into the caller's array (a torch tensor behind autograd's back).
What a call writes into its converted arguments is written back into the
caller's arrays afterwards (`Backend.write_back`), or the call raises a
TypeError saying why it cannot be (an immutable or grad-requiring array, or
one sharing memory with another argument, which the function saw apart); the
same array passed twice is converted once, so the function sees one array.
"""
from __future__ import annotations

import wrapt

from .backends import backend_for_type, get_backend
from .graph.signature import walk


def convert_arguments(args: tuple, kwargs: dict, signature, target, converted: dict | None = None):
    """(args, kwargs) with every array leaf not owned by `target` converted into it. `converted`
    collects {id(leaf): (leaf, its path, its backend, the converted array)}."""
    made = {} if converted is None else converted

    def visit(path, leaf, kind):
        if kind != "array":
            return leaf
        owner = backend_for_type(type(leaf))
        if owner is target or owner is None:
            return leaf
        found = made.get(id(leaf))
        if found is None:
            found = made[id(leaf)] = (leaf, path, owner, target.from_numpy(host_copy(owner.to_numpy(leaf))))
        return found[3]
    return walk(args, kwargs, signature, visit)


def host_copy(data):
    """A new C-contiguous NumPy array in native byte order holding `data`'s values."""
    import numpy as np        # only when arrays are converted: `import lazytrace` imports no framework
    dtype = data.dtype if data.dtype.isnative else data.dtype.newbyteorder("=")
    return np.array(data, dtype=dtype, order="C", copy=True)


def write_back(converted, counts, target) -> None:
    """Carry what a call wrote into its converted arguments to the caller's arrays."""
    import numpy as np
    written = []
    for (leaf, path, owner, array), count in zip(converted, counts):
        if count is not None and target.write_count(array) == count:
            continue                      # the framework counts writes: none
        data, before = target.to_numpy(array), owner.to_numpy(leaf)
        if count is None and before.shape == data.shape and np.array_equal(before, data, equal_nan=True):
            continue
        reason = "its shape changed" if before.shape != data.shape else next(
            (f"it shares memory with {other[1]}, which the function saw as a separate copy" for other in converted
             if other[0] is not leaf and np.may_share_memory(before, other[2].to_numpy(other[0]))), None)
        written.append((leaf, path, owner, data, reason))
    for leaf, path, owner, data, reason in written:
        reason = reason or owner.write_back(leaf, data)
        if reason is not None:
            raise TypeError(f"the function wrote into {path}, a {owner.name} array converted for "
                            f"to={target.name!r}, and the write cannot reach that array: {reason}")


class Converting(wrapt.ObjectProxy):
    """A LazyGraph or Graph whose calls first convert arrays into the `to=` framework;
    everything else (stats, graphs, source ...) is the wrapped object's."""

    def __init__(self, wrapped, signature, target):
        super().__init__(wrapped)
        self._self_signature = signature
        self._self_target = target

    def __call__(self, *args, **kwargs):
        target, converted = self._self_target, {}
        args, kwargs = convert_arguments(args, kwargs, self._self_signature, target, converted)
        if not converted or not target.writable_arrays:
            return self.__wrapped__(*args, **kwargs)
        converted = list(converted.values())
        counts = [target.write_count(entry[3]) for entry in converted]
        try:
            out = self.__wrapped__(*args, **kwargs)
        except BaseException as exc:
            # what it wrote before raising reaches the caller's arrays too, as without conversion;
            # its own exception is the one the caller gets
            try:
                write_back(converted, counts, target)
            except TypeError as failed:
                exc.add_note(f"lazytrace: {failed}")
            raise
        write_back(converted, counts, target)
        return out

    def __reduce_ex__(self, protocol):
        """Pickled, copied and deep-copied as the LazyGraph (or Graph) it wraps is, with its target
        framework by name."""
        return _converting, (self.__wrapped__, self._self_target.name)

    def __copy__(self):
        return _converting(self.__wrapped__, self._self_target.name)

    def __deepcopy__(self, memo):
        import copy
        return _converting(copy.deepcopy(self.__wrapped__, memo), self._self_target.name)

    def graph_for(self, *args, **kwargs):
        args, kwargs = convert_arguments(args, kwargs, self._self_signature, self._self_target)
        return self.__wrapped__.graph_for(*args, **kwargs)


def _converting(wrapped, target: str) -> Converting:
    """(The signature is the wrapped LazyGraph's or Graph's own, rebuilt with it.)"""
    signature = wrapped._signature
    return Converting(wrapped, signature, get_backend(target))

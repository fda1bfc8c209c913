"""Numbers CPython keeps for its own caches, read to tell in O(1) that a dict or a class is unchanged.

- A dict's version (PEP 509, `ma_version_tag`): CPython 3.11-3.13 give every dict a number from one
  counter, taken anew at each change of any of its entries (dynamo's DICT_VERSION guard reads the
  same field).
- A class's version tag (`tp_version_tag`, the key of CPython's method cache): a number from one
  counter, given at an attribute lookup and zeroed by any change of the class's attributes, of its
  bases or of a base class's attributes (PyType_Modified); never given twice, even after
  `sys._clear_type_cache()` (CPython's test_type_cache checks that).

Both are read with ctypes at a fixed offset: the dict's from the PyDictObject layout, the class's
found once per process by calibration (the one 32-bit field of a new class that a lookup fills, a
change zeroes and the next lookup fills with another number). Where a field is not there (other
Pythons, 3.14+, free-threaded builds) or calibration finds no single field, the readers are None
and callers compare contents instead. A view reads memory: keep the object it reads alive.
"""
from __future__ import annotations

import ctypes
import sys
import sysconfig


def _has_versions() -> bool:
    return sys.implementation.name == "cpython" and (3, 11) <= sys.version_info[:2] <= (3, 13) \
        and not sysconfig.get_config_var("Py_GIL_DISABLED")


def _dict_offset() -> int | None:
    # PyDictObject: PyObject_HEAD, ma_used, ma_version_tag
    return object.__basicsize__ + ctypes.sizeof(ctypes.c_ssize_t) if _has_versions() else None


def _probe_class():
    class Probe:
        pass
    return Probe


def _lookup(cls) -> None:
    """An attribute lookup through the method cache: gives `cls` a version tag if it has none
    (type's own lookup: no metaclass __getattr__ runs)."""
    try:
        type.__getattribute__(cls, "_lazytrace_version_probe")
    except AttributeError:
        pass


def _type_offset() -> int | None:
    if not _has_versions():
        return None
    classes = [_probe_class(), _probe_class()]

    def read(cls, offset):
        return ctypes.c_uint32.from_address(id(cls) + offset).value
    for cls in classes:
        _lookup(cls)
    offsets = [o for o in range(0, type.__basicsize__, 4) if all(read(c, o) for c in classes)]
    before = {o: [read(c, o) for c in classes] for o in offsets}
    for cls in classes:
        cls.changed = True
    offsets = [o for o in offsets if not any(read(c, o) for c in classes)]
    for cls in classes:
        _lookup(cls)
    offsets = [o for o in offsets if all(read(c, o) not in (0, b) for c, b in zip(classes, before[o]))]
    return offsets[0] if len(offsets) == 1 else None


_DICT_OFFSET = _dict_offset()
_TYPE_OFFSET = _type_offset()


def dict_view(d: dict):
    """A ctypes view whose `.value` is `d`'s version now, or None where there is none."""
    return None if _DICT_OFFSET is None else ctypes.c_uint64.from_address(id(d) + _DICT_OFFSET)


def dict_version(d: dict) -> int | None:
    view = dict_view(d)
    return None if view is None else view.value


def type_view(cls: type):
    """(A ctypes view whose `.value` is `cls`'s version tag now, that tag), or None where there is
    no tag to watch: a tag of 0 after a lookup (a metaclass's own lookup, CPython out of tags)."""
    if _TYPE_OFFSET is None or not isinstance(cls, type):
        return None
    view = ctypes.c_uint32.from_address(id(cls) + _TYPE_OFFSET)
    if not view.value:
        _lookup(cls)
    return (view, view.value) if view.value else None

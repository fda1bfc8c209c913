"""Cheap fingerprints of the global Mersenne Twister generators (Python's `random`, NumPy's
legacy `np.random`), read from the generators' own memory.

A trace compares the global generators' states before and after it runs: a draw it cannot
record would be baked into the graph. Their public getters copy the 624-word state into
Python objects (`random.getstate()` ~12 us, `np.random.get_state()` ~60 us, each twice per
trace); one `ctypes.string_at` reads the same words in about 1 us. Where the words sit in
the object is found once per process on a probe generator of the same type, and checked
against the public getter after draws; where that fails (another Python, another layout),
the getter is used: slower, never wrong.
"""
from __future__ import annotations

import array
import ctypes
import random
import struct

_WORDS = 624                    # MT19937: 624 32-bit words of key, then a position
_KEY_BYTES = 4 * _WORDS
STATE_BYTES = 4 * _WORDS + 4    # the key, then the int position (NumPy's mt19937_state)
_POINTER = struct.Struct("@P")
POINTER_SIZE = _POINTER.size


def read(obj, offset: int, size: int) -> bytes:
    """`size` bytes of `obj`'s memory from `offset` on."""
    return read_address(id(obj) + offset, size)


def read_address(address: int, size: int) -> bytes:
    return view(address, size).raw          # (ctypes.string_at costs twice as much)


def view(address: int, size: int):
    """A ctypes array over the `size` bytes at `address`: its `.raw` reads them as they are then
    (held by the one who holds the object there, it reads the generator again with one attribute)."""
    tp = _CHARS.get(size)
    if tp is None:
        tp = _CHARS[size] = ctypes.c_char * size
    return tp.from_address(address)


#: size -> ctypes.c_char * size, held: ctypes keeps the array types it makes only until a
#: collection frees them, and making one anew costs ~60 us with JAX or TensorFlow loaded (after
#: gc.collect, a trace's 4 reads of the global generators took ~140 us of thread CPU instead of ~6)
_CHARS: dict = {}


def key_bytes(words) -> bytes:
    """The first 624 words of an MT19937 state, as they lie in memory."""
    return array.array("I", words[:_WORDS]).tobytes()


def find_pointer(obj, size: int, address: int) -> int | None:
    """The offset, in the first `size` bytes of `obj`'s memory, of a pointer to `address`."""
    raw = read(obj, 0, size)
    for offset in range(0, size - _POINTER.size + 1, _POINTER.size):
        if _POINTER.unpack_from(raw, offset)[0] == address:
            return offset
    return None


class PythonRandom:
    """Fingerprints of `random.Random` objects: their C state (an int position, then the 624
    words of key) read from memory, with `gauss_next` (the cached second Gaussian)."""

    def __init__(self):
        self._offset = self._locate()
        self._last = (None, None)       # (the last generator read, a view of its state: see view)

    @staticmethod
    def _locate() -> int | None:
        probe = random.Random(20261123)
        try:
            probe.random()
            raw = read(probe, 0, type(probe).__basicsize__)
            offset = raw.find(key_bytes(probe.getstate()[1]))
            if offset < 4:
                return None
            for draws in (1, 700):      # the position moves, then the whole key is twisted anew
                for _ in range(draws):
                    probe.random()
                if read(probe, offset - 4, 4 + _KEY_BYTES) != _python_words(probe.getstate()[1]):
                    return None
            return offset - 4
        except Exception:       # noqa: BLE001 - any surprise: the public getter
            return None

    def token(self, rng):
        """A value that changes whenever `rng` draws or is reseeded."""
        if self._offset is None or type(rng) is not random.Random:
            return rng.getstate()
        held, state = self._last
        if held is not rng:         # (holding it: its memory stays its own)
            held, state = self._last = rng, view(id(rng) + self._offset, 4 + _KEY_BYTES)
        return state.raw, getattr(rng, "gauss_next", None)

    def global_token(self):
        """A token of the generator behind the `random` module's functions (random.getstate()'s
        value where they are no random.Random's methods: replaced by a test's fake ...)."""
        rng = getattr(random.getstate, "__self__", None)
        held, state = self._last
        if rng is held and type(rng) is random.Random:     # (token's path, twice a trace)
            return state.raw, getattr(rng, "gauss_next", None)
        return self.token(rng) if isinstance(rng, random.Random) else random.getstate()


def _python_words(state) -> bytes:
    """random.getstate()[1] (624 words, then the position) as the C struct holds it."""
    return struct.pack("@i", state[_WORDS]) + key_bytes(state)

"""On/off settings read from the environment (LAZYTRACE_DISABLE, LAZYTRACE_CACHE,
LAZYTRACE_PREWARM), all spelled the same way; a value that is neither is an error naming it."""
from __future__ import annotations

import os

_ON = ("1", "true", "yes", "on")
_OFF = ("", "0", "false", "no", "off")
_Environ = os._Environ
#: name -> its key in os.environ's own dict (os.environ.encodekey(name))
_KEYS: dict = {}


def env_flag(name: str) -> bool:
    """Whether the environment variable `name` is on; ValueError for a value that is neither on nor off."""
    environ = os.environ
    if type(environ) is _Environ:       # read from its own dict: its get() runs ~70 Python bytecodes
        raw = environ._data.get(_KEYS.get(name) or _key(name))     # for a variable not set (most)
        if raw is None:
            return False
        text = environ.decodevalue(raw)
    else:
        text = environ.get(name, "")
    value = text.strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ValueError(f"{name}={text!r}: expected one of {', '.join(_ON)} (on) or 0, false, no, off (off)")


def _key(name: str):
    key = _KEYS[name] = os.environ.encodekey(name)
    return key

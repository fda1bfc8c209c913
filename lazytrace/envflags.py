"""On/off settings read from the environment (LAZYTRACE_DISABLE, LAZYTRACE_CACHE,
LAZYTRACE_PREWARM), all spelled the same way; a value that is neither is an error naming it."""
from __future__ import annotations

import os

_ON = ("1", "true", "yes", "on")
_OFF = ("", "0", "false", "no", "off")


def env_flag(name: str) -> bool:
    """Whether the environment variable `name` is on; ValueError for a value that is neither on nor off."""
    text = os.environ.get(name, "")
    value = text.strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ValueError(f"{name}={text!r}: expected one of {', '.join(_ON)} (on) or 0, false, no, off (off)")

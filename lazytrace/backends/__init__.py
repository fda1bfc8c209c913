"""Backend lookup. A framework's backend module is imported only when one of
that framework's arrays is first seen (or it is named with `to=`), so
`import lazytrace` imports no framework."""
from __future__ import annotations

import importlib
import random
import sys
from functools import lru_cache
from itertools import compress

import wrapt

from . import mtstate
from .base import Backend, CallKind

#: framework name -> (module whose presence tells it is in use, backend module)
_FRAMEWORKS = {
    "torch": ("torch", "lazytrace.backends.torch"),
    "numpy": ("numpy", "lazytrace.backends.numpy"),
    "jax": ("jax", "lazytrace.backends.jax"),
    "tensorflow": ("tensorflow", "lazytrace.backends.tensorflow"),
}
_NAMES, _MODULES = tuple(_FRAMEWORKS), tuple(module for module, _ in _FRAMEWORKS.values())
_ALIASES = {"np": "numpy", "pytorch": "torch", "tf": "tensorflow", "jnp": "jax"}

#: frameworks with a global random generator that code can draw from without passing arrays
_GLOBAL_RNGS = ("torch", "numpy")
_GLOBAL_RNG_MODULES = tuple((name, _FRAMEWORKS[name][0]) for name in _GLOBAL_RNGS)
#: framework -> (name, module) of the others' global generators (foreign_rng_tokens)
_FOREIGN_RNGS = {own: tuple(pair for pair in _GLOBAL_RNG_MODULES if pair[0] != own) for own in _FRAMEWORKS}

#: a LazyGraph called inside tf.function is not converted by AutoGraph (tf_autograph.py): set up
#: when TensorFlow imports AutoGraph's configuration, before its backend may be loaded
wrapt.register_post_import_hook("lazytrace.backends.tf_autograph:not_converted",
                                "tensorflow.python.autograph.core.config")

__all__ = ["Backend", "CallKind", "get_backend", "backend_for_type", "available", "foreign_rng_tokens",
           "generator_state"]


@lru_cache(maxsize=None)
def get_backend(name: str) -> Backend:
    """The backend for a framework name ('torch', 'numpy', or an alias: 'pytorch', 'np' ...):
    one object per framework, whatever name asked for it."""
    key = _ALIASES.get(name, name)
    if key not in _FRAMEWORKS:
        raise ValueError(f"unknown framework {name!r}; expected one of {sorted(_FRAMEWORKS)}")
    if key != name:
        return get_backend(key)
    return importlib.import_module(_FRAMEWORKS[key][1]).BACKEND_CLASS()


def available() -> list[str]:
    """Frameworks already imported in this process (their backends can be used
    without importing anything new)."""
    return list(compress(_NAMES, map(sys.modules.__contains__, _MODULES)))    # (no Python loop)


@lru_cache(maxsize=1024)
def backend_for_type(tp: type) -> Backend | None:
    """The backend owning arrays of type `tp`, or None if it is no array type."""
    for name in available():
        backend = get_backend(name)
        if issubclass(tp, backend.array_types):
            return backend
    return None


def foreign_rng_tokens(backend: Backend) -> tuple:
    """Fingerprints of the global random generators a trace of `backend` does not record: Python's
    `random` module, and those of the other frameworks in use (np.random.rand() in a torch
    function). A draw from one of them would be baked into a graph as one value."""
    tokens = [_python_layout().global_token()]
    modules = sys.modules
    for name, module in _FOREIGN_RNGS.get(backend.name, _GLOBAL_RNG_MODULES):
        if module in modules:     # (available(), for one name)
            tokens.append(get_backend(name).rng_token(None))
    return tuple(tokens)


#: names of calls that make a random generator seeded from the operating system's entropy when
#: given no seed (`np.random.default_rng()`, `random.Random()`, `os.urandom`): a generator made
#: inside the function is no state a trace can compare, and its draws would be baked as one value.
#: Code naming one runs eagerly (also when it passes a seed: the call's arguments are not read)
FRESH_ENTROPY = frozenset({"default_rng", "RandomState", "SeedSequence", "Random", "SystemRandom",
                           "urandom", "getrandom", "randbits", "token_bytes", "token_hex", "uuid4"})


def generator_state(backend: Backend, obj):
    """A fingerprint of the state of a random generator object that a trace of `backend` does not
    record (a `random.Random` instance, a global np.random.Generator in a torch or NumPy function),
    or None for other objects: the function reaches it by itself, and a draw from it would be
    baked into a graph as one value."""
    if isinstance(obj, random.Random):
        try:
            return _python_rng_token(obj)
        except NotImplementedError:     # random.SystemRandom: no state (like the time, not watched)
            return None
    for name in available():
        other = get_backend(name)
        state = other.generator_state(obj, tracing=other is backend)
        if state is not None:
            return state
    return None


@lru_cache(maxsize=1)
def _python_layout() -> mtstate.PythonRandom:
    return mtstate.PythonRandom()


def _python_rng_token(rng):
    """A fingerprint of a `random.Random` (the module's own one if `rng` is none)."""
    return _python_layout().token(rng) if isinstance(rng, random.Random) else random.getstate()

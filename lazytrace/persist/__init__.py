"""The persistent graph cache: graphs traced in one process replay in the next without tracing.

    lazy = lazytrace.trace_graph(fn, cache=True)       # or LAZYTRACE_CACHE=1 in the environment

A stored file is a safetensors file: the graphs' arrays, and in its metadata a JSON
description of the graphs (`codec`) with the full key it was stored under (`identity`).
Loading reads JSON and arrays only; nothing is unpickled or executed. A file that does not
decode, or whose key differs from the one asked for, is skipped with a `CacheWarning` naming it
and the function is traced again (the new trace replaces the file).
"""
from __future__ import annotations

import json
import sys
from collections import Counter
import logging
import warnings
from pathlib import Path
from typing import NamedTuple

from . import codec, identity
from .codec import CorruptEntry, NotStorable, Unavailable
from .store import GraphStore, StoredFile, default_directory, file_stem, store_for
from ..backends import available, get_backend

log = logging.getLogger("lazytrace")

__all__ = ["PersistentCache", "GraphStore", "StoredFile", "CacheWarning", "NotStorable", "CorruptEntry",
           "default_directory", "store_for", "read_file"]

#: variants (guard outcomes) of one signature kept in one file
MAX_STORED_VARIANTS = 4
#: largest JSON header a stored file may have (a bound against damaged length fields)
_MAX_HEADER = 64 * 2**20


class Preload(NamedTuple):
    """One stored signature of a function, read for preloading."""

    backend: object
    signature: str           # the signature key's stable text
    args: tuple              # a rebuilt call of the signature
    kwargs: dict
    plans: list
    data: list               # each plan's (module data (plan_data), memos (plan_memos)), checked again at its first call


class CacheWarning(UserWarning):
    """A stored graph file was skipped (damaged, tampered, or stored under another key)."""


class PersistentCache:
    """Loads and stores the graphs of one function (one LazyGraph)."""

    def __init__(self, store: GraphStore, fn, options, signature, extra=None):
        self.store = store
        self.reason: str | None = None          # why nothing of this function is stored, if so
        self._function = None
        self._fixed: dict = {}                  # backend name -> (key without the signature, as JSON)
        try:
            if extra is not None:
                raise NotStorable("a module's method: its graphs take the module's parameters live")
            if options.stateful or signature.stateful_argnums or signature.stateful_argnames:
                raise NotStorable("stateful objects are read live by its graphs")
            self._function = identity.function_identity(fn)
        except NotStorable as exc:
            self.reason = str(exc)
        self._options = [options.include_generators, options.array_caching, options.to,
                         options.return_backend_traced_fn,
                         sorted(signature.static_argnums), sorted(signature.static_argnames)]

    def _locate(self, key, backends):
        if self.reason is not None:
            raise NotStorable(self.reason)
        if len(backends) != 1:
            raise NotStorable("the call's arrays are of several frameworks, or none")
        backend = backends[0]
        if not backend.distribution:
            raise NotStorable(f"the {backend.name} backend does not store graphs on disk")
        return (backend, *self._ident(backend, identity.key_text(key, backend)))

    def _ident(self, backend, signature: str, start_devices=False) -> tuple[dict, Path]:
        """(full key, file path) of one signature (its stable text) of this function; with
        `start_devices` (prewarm), a runtime that has not started is started to know its devices."""
        fixed = self._fixed.get(backend.name)
        if fixed is None:      # the key's parts that do not depend on the call, once per backend
            ident = {**identity.environment(backend, start_devices), **self._function, "options": self._options}
            fixed = self._fixed[backend.name] = (ident, json.dumps(ident, sort_keys=True))
        module, _, function = self._function["function"].partition(":")
        return ({**fixed[0], "signature": signature},
                self.store.path(module, function, identity.digest(fixed[1], signature)))

    def signature_text(self, key, backend) -> str | None:
        try:
            return identity.key_text(key, backend)
        except NotStorable:
            return None

    def preload(self, limit: int, start_devices=False, skipped: Counter | None = None) -> list[Preload]:
        """The signatures stored for this function, most recently used first (at most `limit`),
        each with its plans and a rebuilt call of it (arrays of the stored description, filled
        with a constant). Files of other keys (an older version of the function or library) are
        passed over; damaged ones are skipped with a CacheWarning and deleted, as at a call.
        Signatures on an accelerator this process has not started are left to their first call
        unless `start_devices` (prewarm). Why a file of this function was left to its first call
        is counted in `skipped` (reason -> files)."""
        skipped = Counter() if skipped is None else skipped
        if self.reason is not None:
            return []
        module, _, function = self._function["function"].partition(":")
        out = []
        with identity.hashed_once():
            paths = self.store.listing(module).get(file_stem(module, function), ())
            for i, path in enumerate(paths):
                if len(out) >= limit:
                    skipped["more signatures stored than max_signatures"] += len(paths) - i
                    break
                try:
                    found = self._preload_file(path, start_devices)
                except Unavailable as exc:
                    log.info("lazytrace: %s not preloaded: %s", path, exc)
                    skipped[str(exc)] += 1
                except (CorruptEntry, OSError) as exc:
                    self._refused(path, exc)
                    skipped["a damaged file (refused with a CacheWarning)"] += 1
                else:
                    if found is not None:
                        out.append(found)
        return out

    def _preload_file(self, path: Path, start_devices: bool) -> Preload | None:
        data = self.store.read(path)
        if data is None:
            return None
        content, metadata = read_description(data)
        key, call = content.get("key"), content.get("call")
        framework = key.get("framework") if type(key) is dict else None
        signature = key.get("signature") if type(key) is dict else None
        if type(framework) is not list or not framework or type(signature) is not str:
            raise CorruptEntry("it holds no key")
        if framework[0] not in available():
            raise Unavailable(f"its framework {framework[0]!r:.40} is not imported")
        backend = get_backend(framework[0])
        ident, own_path = self._ident(backend, signature, start_devices)
        if own_path != path:        # an older version, another process's
            raise Unavailable("stored under another key (another version of the function, its library, the "
                              "framework or lazytrace, or another Python)")
        if call is None:
            raise Unavailable("stored without a description of its call (an older lazytrace)")
        try:        # first: its arrays would be moved to the device too
            args, kwargs = codec.decode_call(backend, call, start_devices)
        except CorruptEntry:
            raise
        except Exception as exc:    # noqa: BLE001 - e.g. a device this process does not have
            raise Unavailable(f"its call cannot be rebuilt here: {type(exc).__name__}: {exc}") from None
        plans = _plans(backend, data, content, metadata, ident)
        if not plans:
            raise Unavailable("the code or module data its trace ran changed since it was stored (a function "
                              "replaced, a library global set): its first call traces anew")
        return Preload(backend, signature, args, kwargs, plans, [(plan_data(p), plan_memos(p)) for p in plans])

    def _refused(self, path: Path, exc: Exception) -> None:
        warnings.warn(f"lazytrace: skipped the cache file {path}: {exc}; the function is traced again",
                      CacheWarning, stacklevel=3)
        if isinstance(exc, CorruptEntry):
            self.store.remove(path)

    def load(self, key, backends) -> tuple:
        """(backend, [plans]) stored for this key; (None, []) when there are none."""
        try:
            backend, ident, path = self._locate(key, backends)
        except (NotStorable, Unavailable):
            return None, []
        try:
            data = self.store.read(path)
            if data is None:
                return backend, []
            return backend, read_file(backend, data, ident)
        except Unavailable as exc:
            log.info("lazytrace: %s not used in this process: %s", path, exc)
            return backend, []
        except (CorruptEntry, OSError) as exc:
            self._refused(path, exc)
            return backend, []

    def save(self, key, backends, plans: list, call=None) -> None:
        """Store these plans (the variants of one signature), merged with those already stored
        by other processes, with `call` ((args, kwargs) of a call of the signature) described so
        that a new process can preload them. NotStorable says why a graph cannot be."""
        backend, ident, path = self._locate(key, backends)
        docs = [_encode(backend, plan) for plan in plans]
        try:
            described = codec.encode_call(backend, *call) if call is not None else None
        except NotStorable as exc:
            log.info("lazytrace: %s: stored without its call (not preloaded): %s", path.name, exc)
            described = None

        def merge(current):
            existing = []
            if current is not None:
                try:      # as stored, with the code state of the process that traced each (kept, not filtered)
                    existing = [(doc, named) for _, doc, named in _graphs(backend, current, ident)]
                except (CorruptEntry, Unavailable):
                    existing = []      # replaced by ours
            texts = {json.dumps(doc, sort_keys=True) for doc, _ in existing}
            new = [d for d in docs if json.dumps(d[0], sort_keys=True) not in texts]
            if not new:
                return None
            return _pack(backend, ident, (existing + new)[-MAX_STORED_VARIANTS:], described)

        self.store.update(path, merge)


def _encode(backend, plan) -> tuple[dict, dict]:
    """codec.encode, with the fingerprints of the packages whose code the trace ran (a helper
    of another package than the function's: an edit there must miss too) and what the globals
    holding code it read name (`ACT = torch.tanh if ... else torch.relu`, chosen at import)."""
    doc, arrays = codec.encode(backend, plan)
    # taken at its first store (right after its trace) and kept: a variant stored again with a
    # later one (its key's graphs are stored together) was traced under the code state of then,
    # not under that of now (a helper rebound or its code replaced since: its checks fail here,
    # but a process loading it under the new state would replay the old code)
    if plan.code_state is None:
        plan.code_state = identity.code_state(plan.packages, _code_globals(plan), plan.modules)
    doc["code"] = plan.code_state
    return doc, arrays


def _code_globals(plan) -> tuple:
    """(module, name) of the globals holding code a plan depends on: those its code read, and the
    framework functions it read through a framework module (`jnp.sin`: a backend recording lower
    calls, JAX's primitives, does not name them; one replaced before the load must miss), and the
    user classes' attributes holding code it read (`Helpers.scale`: "Helpers.scale" of its module)."""
    return (*plan.code_globals, *((m, n) for m, n, _ in plan.framework_functions),
            *((cls.__module__, f"{cls.__qualname__}.{attribute}") for cls, attribute in plan.class_code))


def _pack(backend, ident: dict, docs: list, call) -> bytes:
    arrays = {}
    for g, (_, named) in enumerate(docs):
        arrays.update({f"g{g}.{name}": array for name, array in named.items()})
    text = json.dumps({"key": ident, "graphs": [doc for doc, _ in docs], "call": call}, sort_keys=True)
    return backend.save_arrays(arrays, {"lazytrace": text})


def read_file(backend, data: bytes, ident: dict | None) -> list:
    """The plans stored in a file's bytes; CorruptEntry if it is damaged or was stored under
    another key than `ident` (None: any key)."""
    content, metadata = read_description(data)
    return _plans(backend, data, content, metadata, ident)


def _plans(backend, data: bytes, content: dict, metadata: dict, ident: dict | None) -> list:
    """The plans of a file usable here: with `ident`, those whose code and module data are as now."""
    plans = [(plan, doc) for plan, doc, _ in _graphs(backend, data, ident, content, metadata)
             if ident is None or unchanged(plan, doc.get("code"))]
    for plan, doc in plans:     # (stored again with a new variant: under the state it was traced under)
        plan.code_state = doc.get("code")
    return [plan for plan, _ in plans]


def _graphs(backend, data: bytes, ident: dict | None, content=None, metadata=None) -> list[tuple]:
    """(plan, stored description, {name: array}) of every graph in a file, whatever code state
    it was traced under; CorruptEntry as read_file."""
    if content is None:
        content, metadata = read_description(data)
    if ident is not None and content.get("key") != ident:
        raise CorruptEntry("it was stored under another key (renamed or tampered with)")
    try:
        arrays = backend.load_arrays(data, metadata)
    except Exception as exc:      # safetensors reports damage with its own error types
        raise CorruptEntry(f"its arrays do not load: {exc}") from None
    plans = []
    graphs = content.get("graphs")
    if type(graphs) is not list or not 1 <= len(graphs) <= MAX_STORED_VARIANTS:
        raise CorruptEntry("it holds no list of graphs")
    for g, doc in enumerate(graphs):
        prefix = f"g{g}."
        named = {name[len(prefix):]: a for name, a in arrays.items() if name.startswith(prefix)}
        if type(doc) is not dict:
            raise CorruptEntry("malformed graph description")
        plans.append((codec.decode(backend, doc, named), doc, named))
    return plans


def unchanged(plan, code) -> bool:
    """Whether the code and module data a stored plan's trace depended on are still `code` (its
    stored code_state), checked at load. A framework function read through a framework module
    this process has not imported yet (kornia's `torch.onnx.is_in_onnx_export()`: torch imports
    `torch.onnx` at its first use) is passed over: that module is as the framework's keyed
    version defines it, and no one has replaced its functions before importing it."""
    now = identity.code_state(plan.packages, _code_globals(plan), plan.modules, strict=False)
    if now == code:
        return True
    later = {(m, n) for m, n, f in plan.framework_functions if f is None and m not in sys.modules}
    if not later or type(code) is not dict or type(code.get("globals")) is not list:
        return False

    def imported(state):
        return {**state, "globals": [g for g in state["globals"] if not (type(g) is list and len(g) == 3
                                                                         and (g[0], g[1]) in later)]}
    try:
        return imported(now) == imported(code)
    except TypeError:      # an unhashable name in a tampered file: not as stored
        return False


def plan_data(plan) -> dict:
    """The data globals of the modules whose code a plan's trace ran, as they are now (hashes):
    checked again at the first call of a preloaded plan, since the user may set a library's
    global between the import that preloaded it and that call. (Its code changes only by a
    reload, whose new functions get LazyGraphs of their own, or by rebinding a function, which
    a graph does not see with or without the cache.)"""
    data = {m: identity.module_data(m) for m in plan.modules}
    data[None] = _imported_later(plan)
    return data


def _imported_later(plan) -> list:
    """The framework modules not imported when the plan was loaded (its functions passed over by
    unchanged()) that are imported now: one may have been replaced before the import
    (`torch.onnx.is_in_onnx_export = ...`), which the stored code state cannot be compared with
    any more, so the plan is dropped at its first call (traced anew)."""
    return sorted(m for m in _not_imported(plan) if m in sys.modules)


def _not_imported(plan) -> set:
    """The framework modules of the functions the plan read that were not imported at its load."""
    return {m for m, _, f in plan.framework_functions if f is None}


def plan_memos(plan) -> tuple:
    """The memos plan_data's hashes came from (taken right after it): while memos_hold(them), the
    plan's module data is unchanged, known without hashing or comparing (a first call's check)."""
    return identity.memos_of(plan.modules), tuple(_not_imported(plan))


def memos_hold(memos) -> bool:
    memo, later = memos
    return identity.still_memoized(memo) and not any(m in sys.modules for m in later)


def read_description(data: bytes) -> tuple[dict, dict]:
    """(stored description, safetensors metadata) from a file's header: JSON only."""
    if len(data) < 8:
        raise CorruptEntry("truncated (no header)")
    size = int.from_bytes(data[:8], "little")
    if size > len(data) - 8 or size > _MAX_HEADER:
        raise CorruptEntry("truncated (header longer than the file)")
    try:
        header = json.loads(data[8:8 + size])
        metadata = header["__metadata__"]
        content = json.loads(metadata["lazytrace"])
    except (ValueError, KeyError, TypeError, RecursionError) as exc:     # RecursionError: nested too deep
        raise CorruptEntry(f"not a lazytrace graph file ({type(exc).__name__}: {exc})") from None
    if type(content) is not dict or type(metadata) is not dict:
        raise CorruptEntry("not a lazytrace graph file")
    return content, metadata

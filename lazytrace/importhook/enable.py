"""lazytrace.enable(): imports of a library made elsewhere return its traced proxy.

Design. `sys.modules` is shared by the library and its users, so neither it nor a
`sys.meta_path` finder can hand different objects to different importers; only the import
call knows who imports. While any package is enabled, three process-wide entry points are
wrapped (and put back exactly when the last one is disabled):

- `builtins.__import__` (every `import` statement): its `globals` argument is the importer's
  module namespace;
- `importlib.import_module`: the importer is the caller's frame;
- `importlib.reload`: accepts a proxy, reloads the real module and makes its proxy forget
  what it handed out.

The real module is imported as usual, then, if the importer is not itself inside an enabled
package, it receives the proxy (`lazytrace.importhook.proxy`) instead. So `import kornia`,
`import kornia.color as kc`, `from kornia.filters import gaussian_blur2d` and
`importlib.import_module("kornia.geometry")` give traced objects, while kornia's own imports
(absolute or relative) see the real modules. `sys.modules` and `sys.meta_path` are never
touched, whether the library was imported before or not (modules first imported while
enabled stay imported afterwards, as real modules: unloading torch is not possible).

Limits: code that took a reference before enable() (`from importlib import import_module`,
an already imported module object) keeps the real thing; an import hook installed by
someone else on top of ours after enable() is left in place on disable (ours then passes
everything through); only top-level package names can be enabled. The hook state is one
process-wide object because what it wraps is process-wide.
"""
from __future__ import annotations

import builtins
import importlib
import logging
import sys
import threading

from ..graph.lazy import _disabled_by_env
from .proxy import ModuleProxy, TracedLibrary

log = logging.getLogger("lazytrace")


class Enabled:
    """The packages one enable() call made traced; also a context manager that disables them."""

    def __init__(self, hook: "ImportHook", libraries: dict[str, TracedLibrary]):
        self._hook = hook
        self.libraries = libraries
        self.active = set(libraries)         # names still hooked (disable() removes them)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._hook.remove(self)

    def summary(self) -> dict:
        """Per package: calls, graph hits, traces, eager calls with their reasons, skipped functions."""
        return {name: lib.summary() for name, lib in self.libraries.items()}


class ImportHook:
    """The wrapped import entry points and the stack of enable() calls they serve."""

    def __init__(self):
        self._lock = threading.RLock()
        self._layers: list[Enabled] = []
        self._active: dict[str, TracedLibrary] = {}     # package -> library (latest enable wins)
        self._saved: tuple | None = None

    # ---- enable / disable ------------------------------------------------------------
    def add(self, names, settings, include, exclude) -> Enabled:
        libraries = {name: TracedLibrary(name, settings, include, exclude) for name in names}
        layer = Enabled(self, libraries)
        with self._lock:
            self._layers.append(layer)
            self._refresh()
        return layer

    def remove(self, layer: Enabled, names=None) -> None:
        with self._lock:
            layer.active.difference_update(layer.libraries if names is None else names)
            self._layers = [x for x in self._layers if x.active]
            self._refresh()

    def disable(self, names) -> None:
        with self._lock:
            for layer in list(self._layers):
                self.remove(layer, names or None)

    def _refresh(self):
        active = {name: layer.libraries[name] for layer in self._layers for name in layer.active}
        for name in [n for n in self._active if n not in active]:   # in place, never emptied on the
            del self._active[name]                                  # way: the wrappers hold this dict
        self._active.update(active)
        if active and self._saved is None:
            self._install()
        elif not active and self._saved is not None:
            self._uninstall()

    def _install(self):
        self._saved = (builtins.__import__, importlib.import_module, importlib.reload)
        builtins.__import__ = self._make_import(self._saved[0])
        importlib.import_module = self._make_import_module(self._saved[1])
        importlib.reload = self._make_reload(self._saved[2])

    def _uninstall(self):
        saved, self._saved = self._saved, None
        for owner, name, original in ((builtins, "__import__", saved[0]), (importlib, "import_module", saved[1]),
                                      (importlib, "reload", saved[2])):
            if getattr(getattr(owner, name), "__lazytrace_hook__", None) is self:
                setattr(owner, name, original)
            else:
                log.warning("lazytrace: %s.%s was replaced after enable(); left as it is",
                            owner.__name__, name)

    # ---- the wrapped entry points -------------------------------------------------------
    def traced(self, module, importer: str | None):
        """What an importer named `importer` receives for `module`."""
        active = self._active
        name = getattr(module, "__name__", None)
        if not active or not isinstance(name, str):
            return module
        library = active.get(name.partition(".")[0])
        top = (importer or "").partition(".")[0]
        if library is None or top in active or top == "lazytrace":    # libraries, and lazytrace itself,
            return module                                              # see the real modules
        return library.proxy(module)

    def _make_import(self, original):
        traced, active = self.traced, self._active

        def __import__(name, globals=None, locals=None, fromlist=(), level=0):
            if level or name.partition(".")[0] not in active:    # relative: the importer is inside
                return original(name, globals, locals, fromlist, level)
            module = original(name, globals, locals, fromlist, level)
            if globals is None:
                globals = sys._getframe(1).f_globals
            return traced(module, globals.get("__name__"))

        __import__.__lazytrace_hook__ = self
        return __import__

    def _make_import_module(self, original):
        traced = self.traced

        def import_module(name, package=None):
            return traced(original(name, package), sys._getframe(1).f_globals.get("__name__"))

        import_module.__lazytrace_hook__ = self
        import_module.__doc__ = original.__doc__
        return import_module

    def _make_reload(self, original):
        def reload(module):
            real = module.__wrapped__ if isinstance(module, ModuleProxy) else module
            result = original(real)
            for library in list(self._active.values()):
                library.invalidate(real)
            return module if real is not module else result

        reload.__lazytrace_hook__ = self
        reload.__doc__ = original.__doc__
        return reload


_HOOK = ImportHook()


def enable(*packages: str, include=None, exclude=None, **options) -> Enabled:
    """Make `import <package>` (and its submodules, from-imports and importlib.import_module)
    return lazily traced proxies in the importing code, until disable() or the end of the
    `with` block. `options` are trace_graph()'s (include_generators=..., static_argnames=...).

    With LAZYTRACE_DISABLE=1 in the environment nothing is installed: imports return the
    real modules and everything runs eagerly.
    """
    from ..api import _as_patterns, trace_graph
    if not packages:
        raise TypeError("enable() needs the names of the packages to trace, e.g. enable('kornia')")
    for name in packages:
        if not isinstance(name, str) or not name.isidentifier() or name == "lazytrace":
            raise ValueError(f"enable() takes top-level package names such as 'kornia', got {name!r}")
    bad = {"args", "kwargs"} & options.keys()
    unknown = set(options) - set(trace_graph.__kwdefaults__) | bad
    if unknown:
        raise TypeError(f"enable() got unexpected options {sorted(unknown)}; it takes trace_graph()'s "
                        f"keyword options except args=/kwargs=")
    if _disabled_by_env():
        log.info("lazytrace: LAZYTRACE_DISABLE is set: enable%s installs nothing", packages)
        return Enabled(_HOOK, {})
    settings = {k: v for k, v in trace_graph.__kwdefaults__.items() if k not in ("args", "kwargs", "include", "exclude")}
    settings.update(options)
    return _HOOK.add(packages, settings, _as_patterns(include), _as_patterns(exclude))


def disable(*packages: str) -> None:
    """Stop tracing imports of these packages (all of them if none is named). Objects handed
    out earlier keep working."""
    _HOOK.disable(packages)

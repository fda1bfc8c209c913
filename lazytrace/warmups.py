"""Warm-up scripts: trace a library's common calls once and store the graphs on disk, so that
every later process replays them from the persistent cache without tracing.

A warm-up script is plain Python calling the library with representative inputs. It is run
with the library enabled (`lazytrace.enable(module, cache=...)`), so its `import kornia` gets
the traced proxy. Where it comes from, in order: the file passed in; an entry point named
after the module in the `lazytrace.warmups` group of any installed distribution (a module,
run as a script, or a callable, called); lazytrace's own `examples/warmup_<module>.py`.
"""
from __future__ import annotations

import runpy
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import importlib_metadata

from .graph.lazy import RetraceWarning

ENTRY_POINT_GROUP = "lazytrace.warmups"
_EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


class WarmupError(Exception):
    """No warm-up script for a module, or one that cannot run; the message says which."""


@dataclass
class WarmupReport:
    """What a warm-up did."""

    module: str
    script: str                   # where the script came from
    cache_dir: Path
    seconds: float
    functions: int                # functions of the module called
    traces: int                   # graphs traced
    loaded: int                   # graphs already stored (read back instead of traced)
    stored: int                   # graphs written to the cache
    eager: dict = field(default_factory=dict)       # reason -> {function: calls} run eagerly
    not_stored: dict = field(default_factory=dict)  # reason -> {function: count} not written

    def format(self) -> str:
        lines = [f"warm-up of {self.module} ({self.script}) in {self.seconds:.1f} s: "
                 f"{self.functions} functions, {self.traces} graphs traced, {self.loaded} already stored, "
                 f"{self.stored} stored in {self.cache_dir}"]
        for title, groups in (("ran eagerly (fallbacks)", self.eager), ("not stored", self.not_stored)):
            if groups:
                lines.append(f"{title}:")
                for reason, per in sorted(groups.items(), key=lambda kv: -sum(kv[1].values())):
                    names = ", ".join(sorted(n.rsplit(".", 1)[-1] for n in per))
                    lines.append(f"  {reason}  [{names}]")
        return "\n".join(lines)


def find_script(module: str, script=None) -> tuple[str, object]:
    """(description, runnable) of the warm-up for `module`: ("file", path), ("module", name)
    or ("callable", object). WarmupError if there is none."""
    if script is not None:
        path = Path(script)
        if not path.is_file():
            raise WarmupError(f"warm-up script {script} does not exist")
        return str(path), ("file", path)
    found = importlib_metadata.entry_points(group=ENTRY_POINT_GROUP, name=module)
    if found:
        ep = next(iter(found))
        where = f"entry point {ep.name} = {ep.value} ({ep.dist.name if ep.dist else 'unknown distribution'})"
        return where, ("callable", ep) if ep.attr else ("module", ep.module)
    shipped = _EXAMPLES / f"warmup_{module}.py"
    if shipped.is_file():
        return str(shipped), ("file", shipped)
    raise WarmupError(f"no warm-up script for {module!r}: pass one (--script FILE), or install a "
                      f"distribution with an entry point {module!r} in the {ENTRY_POINT_GROUP!r} group")


def warmup(module: str, script=None, cache=True, progress: bool = True, **options) -> WarmupReport:
    """Run the warm-up script of `module` with it traced and the persistent cache on; return what
    was traced and stored. `cache`: True (the default directory) or a directory; `options`
    are trace_graph()'s."""
    from .importhook import enable
    from .persist import store_for
    if not isinstance(module, str) or not module.isidentifier():
        raise WarmupError(f"warm-up takes a top-level module name such as 'kornia', got {module!r}")
    if cache is False or cache is None:
        raise WarmupError("a warm-up stores graphs: cache= must be True or a directory")
    try:
        store = store_for(cache)
    except ValueError as exc:       # a bad $LAZYTRACE_CACHE_MAX_MB
        raise WarmupError(str(exc)) from None
    where, (kind, target) = find_script(module, script)
    start = time.perf_counter()
    with enable(module, cache=store.directory, **options) as layer:
        library = layer.libraries.get(module)
        if library is None:
            raise WarmupError("LAZYTRACE_DISABLE is set: nothing would be traced")
        with _Progress(module, library.summary, enabled=progress), warnings.catch_warnings():
            warnings.simplefilter("ignore", RetraceWarning)     # several sizes per function: expected
            _run(kind, target)
        summary = library.summary()
    return WarmupReport(module=module, script=where, cache_dir=store.directory,
                        seconds=time.perf_counter() - start, functions=summary["functions"],
                        traces=summary["traces"], loaded=summary["loaded"], stored=summary["stored"],
                        eager=summary["reasons"], not_stored=summary["not_stored"])


def _run(kind: str, target) -> None:
    if kind == "file":
        saved = sys.argv
        sys.argv = [str(target)]
        try:
            runpy.run_path(str(target), run_name="__main__")
        finally:
            sys.argv = saved
    elif kind == "module":
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        target.load()()


class _Progress:
    """A progress bar (tqdm) of graphs traced or loaded, updated from the library's counters
    while the script runs (the script itself is plain Python and reports nothing)."""

    def __init__(self, module: str, summary, enabled: bool):
        self._summary = summary
        self._enabled = enabled
        self._module = module
        self._done = threading.Event()

    def __enter__(self):
        if self._enabled:
            from tqdm import tqdm
            self._bar = tqdm(desc=f"warming {self._module}", unit=" graphs", file=sys.stderr)
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def _poll(self):
        while not self._done.wait(0.2):
            self._update()

    def _update(self):
        s = self._summary()
        self._bar.n = s["traces"] + s["loaded"]
        self._bar.set_postfix(functions=s["functions"], stored=s["stored"], eager=s["eager"], refresh=False)
        self._bar.refresh()

    def __exit__(self, *exc):
        if self._enabled:
            self._done.set()
            self._thread.join()
            self._update()
            self._bar.close()

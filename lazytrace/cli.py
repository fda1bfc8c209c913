"""The `lazytrace` command (also `python -m lazytrace`). One subcommand per job:

    lazytrace show kornia.filters.gaussian_blur2d --args 1x3x32x32 "(5, 5)" "(1.5, 1.5)" --html blur.html

Each subcommand is an `add_<name>(subparsers)` function that registers its parser and sets
`run` to the function doing the work (returning the exit status).
"""
from __future__ import annotations

import argparse
import ast
import importlib
import re
import statistics
import sys
import time
from collections import Counter

from .graph.ir import Source

_ARRAY = re.compile(r"^(?P<shape>scalar|\d+(?:x\d+)*)(?::(?P<dtype>\w+))?$")

ARG_HELP = """\
argument syntax:
  1x3x32x32          a random float32 array of that shape (values in [0, 1))
  1x3x32x32:float64  another dtype (int64, uint8, bool...: random small integers / booleans)
  3:int64            a 1-D array; 'scalar:float32' a 0-dim one
  5  1.5  (5, 5)  None  True  'reflect'   Python values (a bare word like reflect is a string)
"""


class UsageError(Exception):
    """A command-line value lazytrace cannot use; the message says which and why."""


def resolve(target: str):
    """The object named 'package.module.attr' or 'package.module:attr.attr'."""
    module_name, _, attrs = target.partition(":")
    parts = module_name.split(".")
    if not attrs:
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError as exc:
                if exc.name is not None and not ".".join(parts[:cut]).startswith(exc.name):
                    raise              # the module exists but failed to import something itself
                continue
            return _getattrs(obj, parts[cut:], target)
        raise UsageError(f"cannot import any module of {target!r}")
    try:
        obj = importlib.import_module(module_name)
    except ModuleNotFoundError:
        raise UsageError(f"cannot import module {module_name!r} (from {target!r})") from None
    return _getattrs(obj, attrs.split("."), target)


def _getattrs(obj, names, target):
    for i, name in enumerate(names):
        try:
            obj = getattr(obj, name)
        except AttributeError:
            owner = ".".join([getattr(obj, "__name__", "?")] if i == 0 else names[:i])
            raise UsageError(f"{target!r}: {owner} has no attribute {name!r}") from None
    if not callable(obj):
        raise UsageError(f"{target!r} is a {type(obj).__name__}, not a function")
    return obj


def parse_value(text: str, backend, seed: int):
    """One --args / --kwargs value: an array spec (see ARG_HELP) or a Python literal."""
    match = _ARRAY.match(text.strip())
    if match and ("x" in match["shape"] or match["dtype"] or match["shape"] == "scalar"):
        shape = () if match["shape"] == "scalar" else tuple(int(d) for d in match["shape"].split("x"))
        try:
            return backend.example_array(shape, match["dtype"] or "float32", seed)
        except ValueError as exc:
            raise UsageError(f"{text!r}: {exc}") from None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        if text.isidentifier():
            return text
        raise UsageError(f"cannot read {text!r}: expected an array like 1x3x32x32:float32 or a Python "
                         f"value like 5, 1.5, (5, 5), 'reflect'") from None


def _medians_us(fns, args, kwargs, budget_s: float, max_rounds: int = 10000) -> list[float]:
    """Median time of each function, calling them in turn (so machine noise hits all alike)."""
    for fn in fns:
        for _ in range(3):
            fn(*args, **kwargs)
    samples = [[] for _ in fns]
    deadline = time.perf_counter() + budget_s * len(fns)
    while len(samples[0]) < max_rounds and (len(samples[0]) < 5 or time.perf_counter() < deadline):
        for fn, times in zip(fns, samples):
            start = time.perf_counter_ns()
            fn(*args, **kwargs)
            times.append(time.perf_counter_ns() - start)
    return [statistics.median(times) / 1000 for times in samples]


# ---- lazytrace show ----------------------------------------------------------------------------

def add_show(subparsers):
    p = subparsers.add_parser(
        "show", help="trace one function and print its graph, what was dropped and its timings",
        description="Trace one function on example arguments; print the generated source, what the "
                    "trace dropped (dead calls, folded constants) and eager vs traced timings.",
        epilog=ARG_HELP + "\nexample:\n  lazytrace show kornia.filters.gaussian_blur2d --args 1x3x32x32 "
                          "'(5, 5)' '(1.5, 1.5)' --html blur.html",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", help="the function, e.g. kornia.filters.gaussian_blur2d or package.module:Class.method")
    p.add_argument("--args", nargs="*", default=[], metavar="ARG", help="positional arguments (syntax below)")
    p.add_argument("--kwargs", nargs="*", default=[], metavar="NAME=VALUE", help="keyword arguments")
    p.add_argument("--framework", default="torch", help="framework of the example arrays (torch, numpy)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random example arrays")
    p.add_argument("--html", metavar="FILE", help="also write the interactive HTML view of the graph")
    p.add_argument("--image", metavar="FILE", help="also write a picture (.svg, .png or .pdf)")
    p.add_argument("--no-source", action="store_true", help="do not print the generated source")
    p.add_argument("--no-timing", action="store_true", help="do not time eager vs traced calls")
    p.add_argument("--time-budget", type=float, default=1.0, metavar="SECONDS",
                   help="time spent measuring each of eager and traced calls (default 1)")
    p.set_defaults(run=run_show)


def run_show(ns, out=None) -> int:
    import lazytrace
    out = out or sys.stdout
    from .backends import get_backend
    try:
        backend = get_backend(ns.framework)
    except (ValueError, ImportError) as exc:
        raise UsageError(f"--framework {ns.framework}: {exc}") from None
    fn = resolve(ns.target)
    args = tuple(parse_value(a, backend, ns.seed + i) for i, a in enumerate(ns.args))
    kwargs = {}
    for i, item in enumerate(ns.kwargs):
        name, eq, text = item.partition("=")
        if not eq or not name.isidentifier():
            raise UsageError(f"--kwargs {item!r}: expected NAME=VALUE")
        kwargs[name] = parse_value(text, backend, ns.seed + 1000 + i)

    shown = ", ".join([_short(a, backend) for a in args] + [f"{k}={_short(v, backend)}" for k, v in kwargs.items()])
    print(f"{ns.target}({shown})", file=out)
    try:
        fn(*args, **kwargs)              # eager first: the trace is not charged for warming up
    except Exception as exc:
        print(f"\n{ns.target} raised {type(exc).__name__}: {exc}", file=out)
        return 1
    lazy = lazytrace.trace_graph(fn)
    start = time.perf_counter_ns()
    lazy(*args, **kwargs)
    first_us = (time.perf_counter_ns() - start) / 1000
    graph = lazy.graph_for(*args, **kwargs)
    if graph is None:
        reasons = "; ".join(lazy.eager_signatures or lazy.stats.reasons) or "unknown"
        print(f"\nno graph: this call runs eagerly because {reasons}", file=out)
        return 1
    if not ns.no_source:
        print(f"\n{graph.source}", file=out)
    dropped = graph.dropped
    pruned = Counter(dropped["pruned"])
    plan = graph._plan
    checks = sum(hasattr(n.target, "describe") for n in plan.nodes)      # globals, closures (graph.reads)
    cached = sum(v.source is Source.NODE for v in plan.constants)
    print(f"kept:    {len(plan.nodes) - checks} calls, {cached} cached constants"
          + (f", {checks} checks of globals or closure variables" if checks else ""), file=out)
    print(f"folded:  {dropped['folded']} calls computed once into constants", file=out)
    print(f"pruned:  {sum(pruned.values())} calls that feed no output" +
          (": " + ", ".join(f"{name} x{n}" if n > 1 else name for name, n in pruned.most_common())
           if pruned else ""), file=out)
    if not ns.no_timing:
        eager_us, traced_us = _medians_us([fn, lazy], args, kwargs, ns.time_budget)
        print(f"timing:  eager {eager_us:.1f} us, traced {traced_us:.1f} us per call (medians): "
              f"{eager_us / traced_us:.2f}x; first call (trace) {first_us:.0f} us", file=out)
    if ns.html:
        print(f"wrote {graph.show(ns.html)}", file=out)
    if ns.image:
        print(f"wrote {graph.render(ns.image)}", file=out)
    return 0


def _short(value, backend) -> str:
    if isinstance(value, backend.array_types):
        return f"<{backend.meta(value)}>"
    return repr(value)


# ---- lazytrace warmup / lazytrace cache -------------------------------------------------------------

def _add_cache_dir(p, default=None):
    p.add_argument("--cache-dir", metavar="DIR", default=default, help="the persistent cache directory (default: "
                                                      "$LAZYTRACE_CACHE_DIR, else the per-user cache directory)")


def add_warmup(subparsers):
    p = subparsers.add_parser(
        "warmup", help="run a library's warm-up script and store its graphs in the persistent cache",
        description="Run the warm-up script of MODULE with it traced and the persistent cache on, so that "
                    "later processes replay its calls without tracing. The script is --script FILE, else "
                    "the entry point named MODULE in the 'lazytrace.warmups' group of an installed "
                    "distribution, else lazytrace's own examples/warmup_MODULE.py.")
    p.add_argument("module", help="top-level module to warm, e.g. kornia")
    p.add_argument("--script", metavar="FILE", help="a warm-up script (plain Python calling the library)")
    _add_cache_dir(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run_warmup)


def run_warmup(ns, out=None) -> int:
    from .warmups import WarmupError, warmup
    try:
        report = warmup(ns.module, script=ns.script, cache=ns.cache_dir or True, progress=not ns.no_progress)
    except WarmupError as exc:
        raise UsageError(str(exc)) from None
    print(report.format(), file=out or sys.stdout)
    return 0


def add_cache(subparsers):
    p = subparsers.add_parser("cache", help="inspect or prune the persistent graph cache",
                              description="Inspect or prune the persistent graph cache.")
    _add_cache_dir(p)
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text in (("ls", "list stored graphs (least recently used first)"),
                       ("info", "directory, size and bound, files per module"),
                       ("clear", "delete stored graphs")):
        sub = actions.add_parser(name, help=text, description=text)
        sub.add_argument("module", nargs="?", help="only this top-level module (e.g. kornia)")
        _add_cache_dir(sub, default=argparse.SUPPRESS)     # given before or after the action
    p.set_defaults(run=run_cache)


def run_cache(ns, out=None) -> int:
    from .persist import GraphStore, default_directory
    out = out or sys.stdout
    try:
        store = GraphStore(ns.cache_dir or default_directory())     # ValueError: a bad $LAZYTRACE_CACHE_MAX_MB
        files = store.files(ns.module)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if ns.action == "clear":
        print(f"removed {store.clear(ns.module)} files from {store.directory}", file=out)
        return 0
    if ns.action == "info":
        total = sum(f.size for f in files)
        print(f"directory: {store.directory}\nsize:      {_mib(total)} in {len(files)} files "
              f"(bound {_mib(store.max_bytes)}, least recently used evicted first)", file=out)
        for module, count in sorted(Counter(f.module for f in files).items()):
            print(f"  {module:24} {count:6} files {_mib(sum(f.size for f in files if f.module == module)):>12}",
                  file=out)
        return 0
    for f in files:
        used = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(f.last_used))
        print(f"{used}  {f.size:>9} B  {f.module}  {f.function}  {f.path.name}", file=out)
    print(f"{len(files)} files in {store.directory}", file=out)
    return 0


def _mib(size: int) -> str:
    return f"{size / 2**20:.2f} MiB"


# ---- entry point ---------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lazytrace", description="lazytrace: trace array code into "
                                     "simplified, cached graphs of framework calls.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_show(subparsers)
    add_warmup(subparsers)
    add_cache(subparsers)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    from .view import GraphvizMissing
    try:
        return ns.run(ns)
    except (UsageError, GraphvizMissing) as exc:
        parser.exit(2, f"lazytrace {ns.command}: error: {exc}\n")

"""What a cache hit pays for the check that the user's helpers still run the code they were traced
with (a reloader such as IPython's %autoreload replaces `__code__` in place: homes.held_code), in
one run: the same function's LazyGraph with the check and with it left out, for 1, 3 and 8 helpers
(one `f.__code__ is not c` test each), on NumPy and torch arrays of 3 numbers, where a
hit costs most relative to the work.

    .venv/bin/python benchmarks/code_checks.py [--repeat 21] [--number 2000]

Prints the median per-call time of each (interleaved) and their difference. Kornia's graphs check
no code (its code is installed: site-packages), so its figures do not move."""
import importlib
import statistics
import sys
import tempfile
import timeit
from pathlib import Path

import lazytrace
from hit_after_change import hit_options, small_arrays


def _module(helpers: int):
    """A module (in a temporary folder: code the user may edit) of `helpers` helpers and run()."""
    source = "".join(f"def h{i}(x):\n    return x + {i}.0\n" for i in range(helpers))
    source += "def run(x):\n    x = x * 2.0\n" + "".join(f"    x = h{i}(x)\n" for i in range(helpers)) + "    return x\n"
    folder = Path(tempfile.mkdtemp(prefix="lazytrace_code_checks_"))
    name = f"code_checks_{helpers}"
    (folder / f"{name}.py").write_text(source)
    sys.path.insert(0, str(folder))
    return importlib.import_module(name)


def _lazy(fn, x, checked: bool):
    lazy = lazytrace.trace_graph(fn)
    lazy(x)                                 # the trace; the graph's code is generated at its first replay
    if not checked:
        (graph,) = lazy.graphs
        graph._plan.held_code = ()
    for _ in range(3):
        lazy(x)
    (graph,) = lazy.graphs
    assert ("_replaced_code" in graph.source) == checked
    return lazy


def main(argv=None):
    ns, arrays = hit_options(__doc__, argv), small_arrays()
    for helpers in (1, 3, 8):
        module = _module(helpers)
        for name, x in arrays.items():
            modes = {"checked": _lazy(module.run, x, True), "unchecked": _lazy(module.run, x, False)}
            times = {mode: [] for mode in modes}
            for _ in range(ns.repeat):
                for mode, lazy in modes.items():
                    times[mode].append(timeit.timeit(lambda: lazy(x), number=ns.number) / ns.number * 1e6)
            checked, unchecked = (statistics.median(times[mode]) for mode in modes)
            print(f"{helpers} helpers {name:6s} hit with the code check {checked:6.2f} us   without {unchecked:6.2f} us   "
                  f"difference {1e3 * (checked - unchecked):+6.0f} ns ({checked / unchecked:.3f}x)")


if __name__ == "__main__":
    main()

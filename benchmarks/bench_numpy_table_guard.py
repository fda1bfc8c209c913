"""Cost of checking a NumPy table a function reaches by itself (a global) by contents at every
cache hit, against the same table passed as an argument (not checked): best of 7 repeats of 2000
calls each, one run. `python benchmarks/bench_numpy_table_guard.py`"""
import timeit

import numpy as np

import lazytrace


def main():
    for n in (16, 4096, 262144):
        namespace = {"T": np.random.rand(n)}
        exec("def with_table(x):\n    return x + T[:4]\n", namespace)     # T: a module global

        def table_arg(x, t):
            return x + t[:4]

        x = np.random.rand(4)
        reached, passed = lazytrace.trace_graph(namespace["with_table"]), lazytrace.trace_graph(table_arg)
        reached(x), passed(x, namespace["T"])
        t_reached = min(timeit.repeat(lambda: reached(x), number=2000, repeat=7)) / 2000 * 1e6
        t_passed = min(timeit.repeat(lambda: passed(x, namespace["T"]), number=2000, repeat=7)) / 2000 * 1e6
        print(f"table of {n} float64: global, checked by contents {t_reached:.2f} us; passed as an argument "
              f"{t_passed:.2f} us; ratio {t_reached / t_passed:.2f}x")


if __name__ == "__main__":
    main()

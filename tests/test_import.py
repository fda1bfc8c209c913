import subprocess
import sys


def test_import_lazytrace_imports_no_framework():
    code = ("import sys, lazytrace; "
            "bad = [m for m in ('torch', 'numpy', 'jax', 'tensorflow') if m in sys.modules]; "
            "print(bad); assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_public_names():
    import lazytrace
    for name in ("trace_graph", "Graph", "LazyGraph", "stats"):
        assert hasattr(lazytrace, name)

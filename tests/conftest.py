import json
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest
import torch

FRAMEWORKS = ["torch", "numpy", "jax", "tensorflow"]
_IMMUTABLE = {"jax", "tensorflow"}


class Framework:
    """Array helpers so behavioural tests run the same on every backend."""

    def __init__(self, name):
        self.name = name
        if name == "jax":
            self.xp = pytest.importorskip("jax.numpy", reason="jax is not installed (pip install -e '.[jax]')")
        elif name == "tensorflow":
            self.xp = pytest.importorskip("tensorflow", reason="tensorflow is not installed "
                                                               "(pip install -e '.[tensorflow]')")
        else:
            self.xp = torch if name == "torch" else np

    @property
    def mutable(self) -> bool:
        return self.name not in _IMMUTABLE

    def require_mutation(self):
        if not self.mutable:
            pytest.skip(f"{self.name} arrays are immutable: nothing is written in place")

    def from_numpy(self, data):
        if self.name == "torch":
            return torch.from_numpy(data)
        if self.name == "numpy":
            return data
        if self.name == "jax":
            return self.xp.asarray(data)
        return self.xp.constant(data)

    def rand(self, *shape, seed=None):
        rng = np.random.default_rng(seed)
        return self.from_numpy(rng.random(shape, dtype=np.float32))

    def array(self, values, dtype="float32"):
        return self.from_numpy(np.asarray(values, dtype=dtype))

    def numpy(self, a):
        if isinstance(a, torch.Tensor):
            return a.detach().numpy()
        return np.asarray(a)

    def equal(self, a, b):
        a, b = self.numpy(a), self.numpy(b)
        return a.shape == b.shape and a.dtype == b.dtype and np.allclose(a, b, equal_nan=True)

    def copy(self, a):
        return a.clone() if self.name == "torch" else a.copy() if self.name == "numpy" else a

    # calls made inside traced functions, named per framework
    def concat(self, arrays):
        return {"torch": torch.cat, "tensorflow": lambda xs: self.xp.concat(xs, 0)}.get(
            self.name, getattr(self.xp, "concatenate", None))(arrays)

    def sum(self, a):
        return self.xp.reduce_sum(a) if self.name == "tensorflow" else self.xp.sum(a)

    def constant(self, values):
        """An array made inside a function from Python values."""
        return {"torch": torch.tensor, "tensorflow": getattr(self.xp, "constant", None)}.get(
            self.name, getattr(self.xp, "asarray", None))(values)


@pytest.fixture(params=FRAMEWORKS)
def fw(request):
    return Framework(request.param)


@pytest.fixture
def torch_fw():
    return Framework("torch")


@pytest.fixture
def temp_library(tmp_path, monkeypatch):
    """make(source) -> (name, folder): a fresh single-file library with a unique name, importable
    from its own folder; forgotten (with the persistent cache's fingerprints) afterwards."""
    from lazytrace.persist import identity
    made = []

    def make(source: str):
        name = f"ltlib_{uuid.uuid4().hex[:10]}"
        folder = tmp_path / "lib"
        folder.mkdir(exist_ok=True)
        (folder / f"{name}.py").write_text(source)
        monkeypatch.syspath_prepend(str(folder))
        identity.clear_caches()
        made.append(name)
        return name, folder

    yield make
    for name in made:
        sys.modules.pop(name, None)
    identity.clear_caches()


def stored_once(lib, fn_name, cache):
    """A LazyGraph of `lib.fn_name` with the persistent cache at `cache`, called once on a numpy
    input: its graph must have been stored."""
    import numpy as np
    import lazytrace
    maker = lazytrace.trace_graph(getattr(lib, fn_name), cache=cache)
    maker(np.random.rand(2))
    assert maker.stats.stored == 1, maker.stats.not_stored
    return maker


def replacement_retraces(lib, fn_name, replace):
    """A LazyGraph of `lib.fn_name` equal to eager on new NumPy inputs, hitting, then after
    `replace(lib)` (code replaced after the trace) equal again, having traced once more."""
    import numpy as np
    import lazytrace
    lazy = lazytrace.trace_graph(getattr(lib, fn_name))
    for replaced in (False, True):
        if replaced:
            replace(lib)
        for _ in range(2):
            x = np.random.rand(3)
            np.testing.assert_array_equal(lazy(x), getattr(lib, fn_name)(x))
    assert lazy.stats.traces == 2 and lazy.stats.hits == 2, lazy.stats
    return lazy


pytest_plugins = ["pytester"]


def calls(graph) -> list:
    """A graph's nodes besides its checks of Python globals and closure variables (graph/reads.py)
    and of the metadata of arrays the function reached by itself (codegen.read_metadata)."""
    from lazytrace.graph.codegen import read_metadata
    from lazytrace.graph.reads import READERS
    return [n for n in graph.nodes if n.target not in READERS and n.target is not read_metadata]


def run_fresh_python(prelude: str, code: str) -> dict:
    """Run `prelude` then `code` (both dedented) in a new Python process; return the JSON it
    prints last (a failure shows its stderr)."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(prelude) + textwrap.dedent(code)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])

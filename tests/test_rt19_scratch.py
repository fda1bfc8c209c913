import numpy as np
import pytest
import lazytrace

SRC = '''
import numpy as np

class Base:
    GAIN = 2.0

class Other:
    GAIN = 5.0

class Sub(Base):
    pass

class Meta(type):
    M = 2.0

class WithMeta(metaclass=Meta):
    pass

def inherited(x):
    return np.sin(x) * Sub.GAIN

def meta(x):
    return np.sin(x) * WithMeta.M
'''


@pytest.mark.parametrize("fn, change", [
    ("inherited", lambda lib: setattr(lib, "Sub", type("Sub", (lib.Other,), {"__module__": lib.__name__}))),
    ("inherited", lambda lib: setattr(lib.Sub, "__bases__", (lib.Other,))),
    ("meta", lambda lib: setattr(lib.Meta, "M", 5.0)),
    ("meta", lambda lib: setattr(lib, "WithMeta", lib.Meta("WithMeta", (), {"__module__": lib.__name__, "M": 7.0}))),
])
def test_probe(fn, change, temp_library, tmp_path):
    name, _ = temp_library(SRC)
    lib = __import__(name)
    cache = tmp_path / "cache"
    maker = lazytrace.trace_graph(getattr(lib, fn), cache=cache)
    maker(np.random.rand(2))
    print("stored", maker.stats.stored, maker.stats.not_stored)
    change(lib)
    again = lazytrace.trace_graph(getattr(lib, fn), cache=cache)
    x = np.random.rand(2)
    print("loaded", again.stats.loaded)
    assert np.array_equal(again(x), getattr(lib, fn)(x))

"""Remembered walks (reads._WALKS, reads._STEPS) taken again: what changed between traces is
still seen, and a graph from a remembered walk has every guard."""
import pytest

import lazytrace

torch = pytest.importorskip("torch")


class _Config:
    k = 2.0


class _Other:
    j = 1.0


class _Holder:
    def __init__(self, klass):
        self.klass = klass      # a class held: its data attributes are noted (by a leaf of the walk)


CFG = _Holder(_Config)
_A, _B = 1.0, 0.0


def _reads_a_class_attribute(x):
    c = CFG
    return x * _Config.k + _A + _B + c.klass.__name__.count("_")


def test_a_class_attribute_a_leaf_noted_is_checked_in_a_remembered_walk(monkeypatch):
    # session 19: silently wrong before. A remembered walk (start) skipped `_Config.k` where a leaf
    # had noted it first (the class CFG holds); once CFG held another class, the leaf did not note
    # it and no check of _Config.k was made
    monkeypatch.setattr(CFG, "klass", _Config)
    lazy = lazytrace.trace_graph(_reads_a_class_attribute)
    for n in (3, 4):                # walked, then remembered
        lazy(torch.arange(float(n)))
    monkeypatch.setattr(CFG, "klass", _Other)      # the same object CFG: the remembered walk is taken
    x = torch.arange(5.0)
    assert torch.equal(lazy(x), _reads_a_class_attribute(x))
    monkeypatch.setattr(_Config, "k", 9.0)
    assert torch.equal(lazy(x), _reads_a_class_attribute(x))

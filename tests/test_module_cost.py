"""What a traced library keeps to make a module made per call cheap: the options of the first
object of a class (api.like_options, graph.lazy.Recipe), the description of an adopted graph's
signature (one per template), the stats of the objects gone (summed in place). Each must stay
the object's own."""
import gc
import weakref

import pytest
import torch

import lazytrace

LIBRARY = '''
import torch


class Affine(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = torch.nn.Linear(n, n)
        self.register_buffer("shift", torch.arange(float(n)))

    def forward(self, x):
        y = self.lin(x) + self.shift
        return y + 1.0 if self.training else y
'''


@pytest.fixture
def lib(temp_library):
    name, _ = temp_library(LIBRARY)
    original = __import__(name)
    return original, lazytrace.trace_graph(original, max_signatures=3)


def x_(seed, n=4):
    return torch.rand(2, n, generator=torch.Generator().manual_seed(seed))


def _eager_like(original, traced_module):
    eager = original.Affine(traced_module.lin.in_features)
    eager.load_state_dict(traced_module.state_dict())
    return eager.train(traced_module.training)


def test_later_objects_get_the_librarys_options_and_their_own_parts(lib):
    original, traced = lib
    first = traced.Affine(4)
    first(x_(0))
    second = traced.Affine(4)
    lazy = second.forward
    assert lazy is not first.forward and lazy.max_signatures == 3
    own = {id(m) for m in second.modules()}
    stateful = {id(o) for o in lazy._options.stateful}
    assert own <= stateful and not stateful & {id(m) for m in first.modules()}
    for seed in (1, 2):
        assert torch.equal(second(x_(seed)), _eager_like(original, second)(x_(seed)))
    assert lazy.stats.shared == 1 and lazy.stats.traces == 0


def test_a_setting_changed_on_one_objects_forward_stays_its_own(lib):
    _, traced = lib
    first = traced.Affine(4)
    first.forward.max_signatures = 1
    assert traced.Affine(4).forward.max_signatures == 3


def test_a_users_subclass_is_named_as_itself(lib):
    original, traced = lib
    traced.Affine(4)(x_(0))

    class Mine(traced.Affine):
        pass

    mine = Mine(4)
    assert mine.forward._name == "test_a_users_subclass_is_named_as_itself.<locals>.Mine.forward"
    assert torch.equal(mine(x_(1)), _eager_like(original, mine)(x_(1)))
    assert traced.Affine(4).forward._name == "Affine.forward"


def test_what_is_kept_per_class_does_not_keep_a_users_class(lib):
    _, traced = lib

    class Mine(traced.Affine):
        pass

    for _ in range(2):              # the second one made as the first (a Recipe)
        assert Mine(4).forward._name.endswith("<locals>.Mine.forward")
    gone = weakref.ref(Mine)        # (never called: no graph of it is pooled)
    del Mine
    gc.collect()
    assert gone() is None


def test_signatures_of_adopting_objects_describe_their_own_mode(lib):
    _, traced = lib
    made = {}
    for mode in ("train", "eval"):
        for i in range(2):
            m = getattr(traced.Affine(4), mode)()
            m(x_(i))
            made[mode, i] = m
    assert made["train", 1].forward.stats.shared == 1 and made["eval", 1].forward.stats.shared == 1
    described = {k: m.forward.signatures[0].signature for k, m in made.items()}
    assert described["train", 1] == described["train", 0]
    assert described["eval", 1] == described["eval", 0]
    assert described["train", 1]["self.training"] == "True"
    assert described["eval", 1]["self.training"] == "False"


def test_summary_is_unchanged_when_objects_are_freed(lib):
    _, traced = lib
    library = vars(traced.Affine)["__lazytrace_library__"]
    kept = []
    for i in range(6):
        m = traced.Affine(4)
        m(x_(i))
        m(x_(i + 1))
        m(torch.rand(3, 4))          # another signature: a trace (not shared yet) or an adoption
        kept.append(m)
    before = library.summary()
    del kept, m
    gc.collect()
    assert not library._stats        # all folded into the retired totals
    after = library.summary()
    assert after == before
    assert after["calls"] == 18 and after["hits"] + after["traces"] == 18
    assert after["traces"] == 2 and after["shared"] == 10


# ---- session 9: what a module made per call is bound and keyed with -------------------------------

def test_later_objects_follow_the_environment_at_their_own_binding(lib, monkeypatch):
    """A later object is made from its class's Recipe, yet reads LAZYTRACE_DISABLE when bound,
    as trace_graph would: one bound after it is set runs the original."""
    original, traced = lib
    traced.Affine(4)(x_(0))
    monkeypatch.setenv("LAZYTRACE_DISABLE", "1")
    later = traced.Affine(4)
    assert torch.equal(later(x_(1)), _eager_like(original, later)(x_(1)))
    assert later.forward.stats.calls == 0 and later.forward.stats.shared == 0
    monkeypatch.delenv("LAZYTRACE_DISABLE")
    again = traced.Affine(4)
    again(x_(2))
    assert again.forward.stats.shared == 1


def test_a_later_objects_options_are_the_firsts_with_its_own_parts(lib):
    """(made from the Recipe at their first use, once)"""
    import dataclasses

    _, traced = lib
    first = traced.Affine(4)
    first(x_(0))
    second = traced.Affine(4)
    second(x_(1))
    options = second.forward._options
    assert options is second.forward._options
    assert [id(o) for o in options.stateful] == [id(m) for m in second.modules()]
    assert dataclasses.replace(options, stateful=()) == dataclasses.replace(first.forward._options, stateful=())


def test_a_later_object_pickles_and_copies_as_the_first(lib):
    import copy
    import pickle

    original, traced = lib
    traced.Affine(4)(x_(0))
    second = traced.Affine(4)
    second(x_(1))
    for clone in (copy.deepcopy(second), pickle.loads(pickle.dumps(second))):
        assert torch.equal(clone(x_(2)), _eager_like(original, second)(x_(2)))
        assert clone.forward is not second.forward and clone.forward.max_signatures == 3
    lazy = copy.deepcopy(second.forward)          # the LazyGraph alone, rebuilt from what made it
    assert lazy.max_signatures == 3 and lazy._name == second.forward._name


def test_an_attribute_set_on_one_object_is_part_of_its_structure(lib):
    """The plain attribute names of a module are looked at once per layout of its __dict__: an
    object with one more attribute (set after construction) has a structure of its own."""
    original, traced = lib
    traced.Affine(4)(x_(0))
    odd = traced.Affine(4)
    odd.note = "mine"
    plain = traced.Affine(4)
    assert odd.forward._extra.shareable()[0] != plain.forward._extra.shareable()[0]
    odd.note = 3
    assert odd.forward._extra.shareable()[0] != plain.forward._extra.shareable()[0]
    assert torch.equal(odd(x_(1)), _eager_like(original, odd)(x_(1)))


LEAVES = '''
import torch


class Leaf(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))
        self.register_parameter("same_w", self.w)          # one tensor under two names: once
        self.register_buffer("b", torch.zeros(3))
        self.register_parameter("none", None)

    def forward(self, x):
        return x * self.w + self.b
'''


@pytest.mark.parametrize("hooked", [False, True])
def test_a_leaf_modules_key_is_the_general_walks(temp_library, hooked):
    """A module without submodules is keyed without the general walk: the same key and tensors."""
    from lazytrace.backends.torch import ModuleLiveInputs

    name, _ = temp_library(LEAVES)
    leaf = __import__(name).Leaf()
    if hooked:
        leaf.register_forward_hook(lambda m, i, o: None)
    key, tensors = ModuleLiveInputs(leaf)()
    assert [id(t) for t in tensors] == [id(t) for t in (*leaf.parameters(), *leaf.buffers())]
    assert bool(key[4]) is hooked and key[5] is type(leaf)     # (ids, modules, training, tensors, hooks, class)
    parent = torch.nn.Sequential(leaf)               # the general walk, keyed for the same tensors
    if hooked:      # a user's hook on a submodule the parent's graph would run: eager (red team 9)
        from lazytrace.graph.signature import Unkeyable
        with pytest.raises(Unkeyable, match="module hook"):
            ModuleLiveInputs(parent)()
        return
    general, _ = ModuleLiveInputs(parent)()
    assert key[0] == general[0][1:] and key[1] == general[1][1:] and key[2] == general[2][1:]
    assert key[3] == general[3] and key[4] == general[4]

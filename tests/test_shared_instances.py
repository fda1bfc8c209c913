"""Objects of a traced library's module class share graphs (graph/shared.py): a module made per
call replays what an earlier one of the same configuration traced, never a graph wrong for it."""
import gc
import weakref

import pytest
import torch

import lazytrace

kornia = pytest.importorskip("kornia")

LIBRARY = '''
import torch

FLAG = True


class Affine(torch.nn.Module):
    def __init__(self, n, scale=2.0, bias=True):
        super().__init__()
        self.lin = torch.nn.Linear(n, n, bias=bias)
        self.register_buffer("shift", torch.arange(float(n)))
        self.scale = scale

    def forward(self, x):
        y = self.lin(x) * self.scale + self.shift
        if self.training:
            y = y + 1.0
        return y * 2.0 if FLAG else y


class Holder(torch.nn.Module):
    """A tensor in a plain attribute (not a buffer): read live, its shape decides the reshape."""

    def __init__(self, w):
        super().__init__()
        self.w = w

    def forward(self, x):
        return x.reshape(self.w.shape[0], -1) * self.w.sum()


class Buffered(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("table", torch.arange(float(n)))

    def forward(self, x):
        return x[..., : self.table.shape[0]] + self.table


class Conv(torch.nn.Module):
    def __init__(self, c, k):
        super().__init__()
        self.conv = torch.nn.Conv2d(c, c, k, padding=k // 2)

    def forward(self, x):
        return torch.relu(self.conv(x))


class Sampled(torch.nn.Module):
    """Holds an object of its own (not shared: each object traces)."""

    def __init__(self):
        super().__init__()
        self.config = type("Config", (), {})()
        self.config.gain = 3.0

    def forward(self, x):
        return x * self.config.gain


class Scaler:
    """A plain class: its methods are traced once for the class, the object as a stateful argument."""

    def __init__(self, w):
        self.w = w

    def apply(self, x):
        return x.reshape(self.w.shape[0], -1) + self.w.sum()
'''


@pytest.fixture(scope="module")
def K():
    return lazytrace.trace_graph(kornia)


@pytest.fixture
def lib(temp_library):
    name, _ = temp_library(LIBRARY)
    original = __import__(name)
    return original, lazytrace.trace_graph(original)


def img(seed, shape=(1, 3, 32, 32)):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def _same_weights(traced, eager):
    eager.load_state_dict(traced.state_dict())
    return eager


# ---- kornia --------------------------------------------------------------------------------

def test_a_blur_made_per_call_replays_after_the_first(K):
    outs = []
    for i in range(6):
        blur = K.filters.GaussianBlur2d((5, 5), (1.5, 1.5))
        x = img(i)
        out = blur(x)
        assert torch.equal(out, kornia.filters.GaussianBlur2d((5, 5), (1.5, 1.5))(x))
        outs.append(blur.forward.stats)
    assert outs[0].traces == 1
    for stats in outs[1:]:
        assert stats.traces == 0 and stats.hits == 1 and stats.shared == 1
    assert K.filters.GaussianBlur2d((5, 5), (1.5, 1.5)).forward is not blur.forward   # one each


@pytest.mark.parametrize("args", [((3, 3), (1.5, 1.5)), ((5, 5), (0.7, 0.7)), ((5, 5), (1.5, 0.5)),
                                  ((5, 5), (1.5, 1.5), "constant"), ((7, 3), (2.0, 1.0))])
def test_other_kernel_sizes_and_sigmas_are_their_own(K, args):
    K.filters.GaussianBlur2d((5, 5), (1.5, 1.5))(img(0))        # the pool holds this configuration
    blur = K.filters.GaussianBlur2d(*args)
    for seed in (1, 2):
        assert torch.equal(blur(img(seed)), kornia.filters.GaussianBlur2d(*args)(img(seed)))
    again = K.filters.GaussianBlur2d(*args)
    assert torch.equal(again(img(3)), kornia.filters.GaussianBlur2d(*args)(img(3)))
    assert again.forward.stats.traces == 0 and again.forward.stats.shared == 1


def test_a_sigma_changed_after_construction(K):
    K.filters.GaussianBlur2d((5, 5), (1.5, 1.5))(img(0))
    blur = K.filters.GaussianBlur2d((5, 5), (1.5, 1.5))
    blur.sigma = (3.0, 3.0)
    assert torch.equal(blur(img(1)), kornia.filters.GaussianBlur2d((5, 5), (3.0, 3.0))(img(1)))
    blur.sigma = (0.5, 0.5)         # after its first call: its own graph's guard fails, it retraces
    assert torch.equal(blur(img(2)), kornia.filters.GaussianBlur2d((5, 5), (0.5, 0.5))(img(2)))


def test_gradients_through_a_shared_blur(K):
    K.filters.GaussianBlur2d((5, 5), (1.5, 1.5))(img(0).requires_grad_())
    for seed in (1, 2):
        x, y = img(seed).requires_grad_(), img(seed).requires_grad_()
        blur = K.filters.GaussianBlur2d((5, 5), (1.5, 1.5))
        (blur(x) ** 2).sum().backward()
        (kornia.filters.GaussianBlur2d((5, 5), (1.5, 1.5))(y) ** 2).sum().backward()
        assert blur.forward.stats.shared == 1
        assert torch.allclose(x.grad, y.grad)


def test_train_and_eval_of_a_kornia_module(K):
    x = img(4)
    for mode in ("train", "eval", "train", "eval"):
        gray = getattr(K.color.RgbToGrayscale(), mode)()
        assert torch.equal(gray(x), getattr(kornia.color.RgbToGrayscale(), mode)()(x))


def test_instances_are_freed_and_stats_stay_bounded(K):
    x = img(0)
    K.filters.GaussianBlur2d((5, 5), (1.5, 1.5))(x)
    library = vars(K.filters.GaussianBlur2d)["__lazytrace_library__"]
    refs = []
    for _ in range(20):
        blur = K.filters.GaussianBlur2d((5, 5), (1.5, 1.5))
        blur(x)
        refs.append(weakref.ref(blur))
        refs.append(weakref.ref(blur.forward))
        del blur
    gc.collect()
    assert all(r() is None for r in refs)
    pools = list(library._shared.values())
    assert pools and all(len(pool) <= 64 * 4 for pool in pools)
    assert len(library._stats) < 20           # the LazyGraphs gone were folded into _retired


# ---- a library of its own -----------------------------------------------------------------------

def test_a_module_with_parameters_made_per_call(lib):
    original, L = lib
    x = torch.rand(2, 4)
    for seed in range(4):
        torch.manual_seed(seed)
        traced = L.Affine(4)
        eager = _same_weights(traced, original.Affine(4))
        assert torch.equal(traced(x), eager(x))
        assert traced.forward.stats.traces == (1 if seed == 0 else 0)


def test_parameters_stay_each_objects_own(lib):
    original, L = lib
    x = torch.rand(2, 4)
    a, b = L.Affine(4), L.Affine(4)
    a(x), b(x)
    assert b.forward.stats.shared == 1
    eager_b = _same_weights(b, original.Affine(4))
    with torch.no_grad():
        a.lin.weight.mul_(3.0)
        a.shift.add_(1.0)
    eager_a = _same_weights(a, original.Affine(4))
    assert torch.equal(a(x), eager_a(x)) and torch.equal(b(x), eager_b(x))
    assert not torch.equal(a(x), b(x))


def test_gradients_of_parameters_through_a_shared_graph(lib):
    original, L = lib
    x = torch.rand(2, 4)
    L.Affine(4)(x)
    traced = L.Affine(4)
    eager = _same_weights(traced, original.Affine(4))
    traced(x).pow(2).sum().backward()
    eager(x).pow(2).sum().backward()
    assert traced.forward.stats.shared == 1
    for p, q in zip(traced.parameters(), eager.parameters()):
        assert torch.allclose(p.grad, q.grad)


@pytest.mark.parametrize("change", ["scale", "eval", "no bias", "width", "flag"])
def test_other_configurations_give_eager_results(lib, change):
    original, L = lib
    x = torch.rand(2, 4)
    L.Affine(4)(x)
    L.Affine(4)(x)
    kwargs = {"scale": {"scale": 3.0}, "no bias": {"bias": False}}.get(change, {})
    n = 5 if change == "width" else 4
    if change == "width":
        x = torch.rand(2, 5)
    traced = L.Affine(n, **kwargs)
    eager = _same_weights(traced, original.Affine(n, **kwargs))
    if change == "eval":
        traced.eval(), eager.eval()
    if change == "flag":
        original.FLAG = False               # a global the shared graph checks
    assert torch.equal(traced(x), eager(x))
    assert traced.forward.stats.shared == 0


def test_a_tensor_attribute_of_another_shape(lib):
    original, L = lib
    x = torch.rand(12)
    for n in (3, 4, 3, 6):
        w = torch.rand(n)
        held = L.Holder(w)
        assert torch.equal(held(x), original.Holder(w)(x))
    assert held.forward.stats.traces == 1        # 6: traced
    again = L.Holder(torch.rand(3))
    assert torch.equal(again(x), original.Holder(again.w)(x)) and again.forward.stats.shared == 1


def test_a_buffer_of_another_shape(lib):
    original, L = lib
    x = torch.rand(2, 8)
    for n in (4, 6, 4):
        traced = L.Buffered(n)
        assert torch.equal(traced(x), original.Buffered(n)(x))
    assert traced.forward.stats.shared == 1


def test_submodules_are_rebound(lib):
    original, L = lib
    x = torch.rand(1, 2, 8, 8)
    for k, shared in ((3, 0), (3, 1), (5, 0), (3, 1)):
        traced = L.Conv(2, k)
        eager = _same_weights(traced, original.Conv(2, k))
        assert torch.equal(traced(x), eager(x))
        assert traced.forward.stats.shared == shared
    traced.conv = torch.nn.Conv2d(2, 2, 1)          # replaced after the call: a new signature
    assert torch.equal(traced(x), torch.relu(traced.conv(x)))


def test_objects_holding_other_objects_trace_their_own(lib):
    original, L = lib
    x = torch.rand(3)
    first = L.Sampled()
    first(x)
    second = L.Sampled()
    second.config.gain = 5.0
    assert torch.equal(second(x), x * 5.0)
    assert second.forward.stats.shared == 0


def test_a_users_own_model_keeps_its_own_graph(lib):
    original, _ = lib
    x = torch.rand(2, 4)
    a = lazytrace.trace_graph(original.Affine(4))
    b = lazytrace.trace_graph(original.Affine(4))
    a(x), b(x)
    assert a.forward._shared is None and b.forward.stats.traces == 1


def test_instances_of_a_custom_module_are_freed(lib):
    original, L = lib
    x = torch.rand(2, 4)
    L.Affine(4)(x)
    refs = []
    for _ in range(10):
        m = L.Affine(4)
        m(x)
        refs.append(weakref.ref(m))
        del m
    gc.collect()
    assert all(r() is None for r in refs)


def test_plain_class_objects_share_and_check_tensor_shapes(lib):
    original, L = lib
    x = torch.rand(12)
    for n in (3, 4, 3):
        w = torch.ones(n)
        assert torch.equal(L.Scaler(w).apply(x), original.Scaler(w).apply(x))
    assert L.Scaler.apply.stats.hits >= 1


def test_tensor_attributes_of_a_shared_graph_are_read_live(K):
    x = img(5, (2, 3, 16, 16))
    std = torch.tensor([0.2, 0.3, 0.4])
    for mean in ([0.1, 0.2, 0.3], [0.5, 0.5, 0.5], [0.9, 0.0, 0.3]):
        m = torch.tensor(mean)
        traced = K.enhance.Normalize(m, std)
        assert torch.equal(traced(x), kornia.enhance.Normalize(m, std)(x))
    assert traced.forward.stats.shared == 1


def test_augmentations_made_per_call_draw_as_eager(K):
    x = img(6, (2, 3, 16, 16))
    for seed in range(3):
        traced = K.augmentation.RandomAffine(degrees=30.0, p=1.0)
        eager = kornia.augmentation.RandomAffine(degrees=30.0, p=1.0)
        torch.manual_seed(seed)
        got = traced(x)
        torch.manual_seed(seed)
        assert torch.equal(got, eager(x))
        assert torch.equal(traced.transform_matrix, eager.transform_matrix)


def test_an_adopted_graph_lists_its_signature_with_the_objects_own_parameters(lib):
    """The signature of a graph taken from another object is described as a traced one is: the
    arguments, the global state, and this object's own parameters and modes."""
    _, traced = lib
    first, second = traced.Affine(4), traced.Affine(4)
    first(torch.randn(2, 4))
    second.train(False)
    first.train(False)
    first(torch.randn(2, 4))
    second(torch.randn(2, 4))
    assert second.forward.stats.shared == 1 and second.forward.stats.traces == 0
    listed = second.forward.signatures[0].signature
    assert listed == first.forward.signatures[-1].signature
    assert listed["args[0]"].startswith("2x4 float32") and listed["self.training"] == "False"
    assert "self.lin.weight" in listed and any("grad_enabled" in path for path in listed)

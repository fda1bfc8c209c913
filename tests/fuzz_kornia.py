"""Differential fuzzer: kornia through lazytrace against eager kornia, on random input sequences.

Each target (a kornia function of kornia_cases.CASES, a two-input function, or an nn.Module class)
is called through a LazyGraph (or the kornia proxy) and eagerly on the same SEQUENCE of inputs,
drawn with a seeded numpy RNG from variations the signature key or the guards must tell apart
(dtype, batch, H/W, strides, storage offset, aliasing, requires_grad, grad mode, default dtype) or
treat as the same. Draws repeat earlier variations on fresh data so graphs are replayed, and a
result may be written in place afterwards (a folded constant must not change the next call).
Compared: outputs bitwise (NaN equal to NaN) with dtype, shape, strides and grad flags, gradients,
the inputs after the call, and exception types.

    python tests/fuzz_kornia.py [--seed N] [--calls N] [--only SUBSTR] [--hook] [--poison]   # prints mismatches
"""
import argparse
import contextlib
import sys
import time
from dataclasses import dataclass, field, replace

import numpy as np
import torch

import kornia
import lazytrace
from kornia_cases import CASES

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
LAYOUTS = ("contiguous", "slice", "permute", "transpose", "expand", "channels_last", "offset", "view")
MODES = ("grad", "no_grad", "inference", "requires_grad", "autocast")
SIZES = ((32, 32), (24, 40), (17, 17), (32, 32), (2, 3))
KINDS = ("tensor", "tensor", "tensor", "parameter", "subclass")
DEFAULT_DTYPES = (None, None, None, None, None, torch.float64, torch.bfloat16)
PAIRINGS = ("independent", "same", "view", "overlap")


@dataclass(frozen=True)
class Variation:
    dtype: torch.dtype = torch.float32
    batch: int = 1
    hw: tuple = (32, 32)
    layout: str = "contiguous"
    mode: str = "grad"
    default_dtype: object = None    # torch.set_default_dtype around the call
    cast_args: bool = True          # other floating tensor arguments converted to the image dtype
    pairing: str = "independent"    # two-input targets: how the second input relates to the first
    mutate: bool = False            # write the result in place after the call
    values: str = "unit"            # image values: "unit" [0, 1], "wide" [-2, 2], "nan" some NaN and inf
    scalars: tuple = ()             # per non-image argument: a multiplier / replacement drawn for Python values
    fresh_args: bool = False        # other tensor arguments get new values at every call
    alias_args: bool = False        # a non-image tensor argument passed again in place of the next one
    grad_args: bool = False         # with requires_grad: the other float tensor arguments need grad too
    meta_default: bool = False      # torch.set_default_device("meta") around the call
    checks: bool = True             # kornia.core.check enabled (kornia's global flag) around the call
    kind: str = "tensor"            # the image's class: tensor, nn.Parameter or a torch.Tensor subclass
    feedback: bool = False          # the image is the previous call's first result when it is 4-d


VALUES = ("unit", "wide", "nan")
SCALAR_CHOICES = (None, None, 0.5, 2.0, "tensor", -1.0)


def draw(rng, allowed_dtypes=DTYPES):
    return Variation(dtype=allowed_dtypes[rng.integers(len(allowed_dtypes))], batch=int(rng.integers(0, 4)) or int(rng.integers(0, 4)),
                     hw=SIZES[rng.integers(len(SIZES))], layout=LAYOUTS[rng.integers(len(LAYOUTS))],
                     mode=MODES[rng.integers(len(MODES))], default_dtype=DEFAULT_DTYPES[rng.integers(len(DEFAULT_DTYPES))],
                     cast_args=bool(rng.random() < 0.8), pairing=PAIRINGS[rng.integers(len(PAIRINGS))],
                     mutate=bool(rng.random() < 0.3), values=VALUES[rng.integers(len(VALUES))],
                     scalars=tuple(SCALAR_CHOICES[rng.integers(len(SCALAR_CHOICES))] for _ in range(4)),
                     fresh_args=bool(rng.random() < 0.5), alias_args=bool(rng.random() < 0.1),
                     kind=KINDS[rng.integers(len(KINDS))], checks=bool(rng.random() < 0.85),
                     grad_args=bool(rng.random() < 0.5), meta_default=bool(rng.random() < 0.05), feedback=bool(rng.random() < 0.2))


class Tagged(torch.Tensor):
    """A tensor subclass with the default __torch_function__: results are Tagged too."""


def as_kind(x, kind):
    if kind == "parameter":
        return torch.nn.Parameter(x, requires_grad=False)
    if kind == "subclass":
        return x.as_subclass(Tagged)
    return x


def image(var, channels, seed):
    """A (batch, channels, H, W) image in [0, 1] laid out as `var.layout` says."""
    b, (h, w) = var.batch, var.hw
    g = torch.Generator().manual_seed(seed)
    def rand(*shape):
        x = torch.rand(*shape, generator=g)
        if var.values == "wide":
            x = x * 4 - 2
        elif var.values == "nan":
            x[torch.rand(*shape, generator=g) < 0.05] = float("nan")
            x[torch.rand(*shape, generator=g) < 0.02] = float("inf")
        return x.to(var.dtype)
    layout = var.layout
    if layout == "slice":
        return rand(b, channels, h, 2 * w)[..., ::2]
    if layout == "permute":
        return rand(b, h, w, channels).permute(0, 3, 1, 2)
    if layout == "transpose":
        return rand(b, channels, w, h).transpose(-1, -2)
    if layout == "expand":
        return rand(1, channels, h, w).expand(b, -1, -1, -1)
    if layout == "channels_last":
        return rand(b, channels, h, w).contiguous(memory_format=torch.channels_last)
    if layout == "offset":
        return rand(b * channels * h * w + 7)[7:].view(b, channels, h, w)
    if layout == "view":            # a view of a bigger-dimensional tensor
        return rand(b, channels, h, w)[:, None].squeeze(1)
    return rand(b, channels, h, w)


def _scalar(a, choice):
    """A Python argument changed as the variation says: scaled, negated, made a 0-d tensor, or kept."""
    if choice is None or isinstance(a, bool):
        return a
    if isinstance(a, tuple):
        return tuple(_scalar(x, choice) for x in a)
    if isinstance(a, int):
        return {0.5: max(1, a - 2) | 1 if a > 2 else a, 2.0: a + 2, "tensor": a, -1.0: a}[choice]
    if isinstance(a, float):
        return torch.tensor(a) if choice == "tensor" else a * choice
    return a


def other_args(case_args, var, seed=0):
    """The case's non-image arguments, float tensors in the image dtype, batched params repeated;
    Python values changed as var.scalars says, tensor values new at each call with var.fresh_args."""
    out = []
    g = torch.Generator().manual_seed(seed + 1)
    for i, a in enumerate(case_args):
        a = _scalar(a, var.scalars[i] if i < len(var.scalars) else None)
        if isinstance(a, torch.Tensor):
            if var.fresh_args and a.is_floating_point():
                a = a * (0.75 + 0.5 * torch.rand(a.shape, generator=g))
            elif var.fresh_args and a.dtype in (torch.int64, torch.int32) and a.ndim:
                a = a + torch.randint(0, 3, a.shape, generator=g, dtype=a.dtype)
            if a.is_floating_point() and var.cast_args:
                a = a.to(var.dtype)
            if a.ndim >= 2 and a.shape[0] == 1 and var.batch > 1:
                a = a.repeat(var.batch, *([1] * (a.ndim - 1)))
            elif a.ndim == 1 and a.shape[0] == 1 and var.batch > 1 and a.is_floating_point():
                a = a.repeat(var.batch)
            a = a.clone()
        out.append(a)
    if var.alias_args:
        ts = [i for i, a in enumerate(out) if isinstance(a, torch.Tensor)]
        if len(ts) >= 2 and out[ts[0]].shape == out[ts[1]].shape:
            out[ts[1]] = out[ts[0]]
    return out


def pair(var, channels, seed):
    """Two images related as `var.pairing` says: separate, one object, a view, overlapping views."""
    a = image(var, channels, seed)
    if var.pairing == "same":
        return a, a
    if var.pairing == "view":
        return a, a[:, :, :, :]
    if var.pairing == "overlap":
        h, w = var.hw
        big = image(replace(var, hw=(h + 1, w)), channels, seed)
        return big[:, :, :h], big[:, :, 1:]
    return a, image(var, channels, seed + 1)


@contextlib.contextmanager
def call_context(var):
    old = torch.get_default_dtype()
    if not var.checks:
        kornia.core.check.disable_checks()
    if var.meta_default:
        torch.set_default_device("meta")
    if var.default_dtype is not None:
        torch.set_default_dtype(var.default_dtype)
    try:
        if var.mode == "no_grad":
            with torch.no_grad():
                yield
        elif var.mode == "inference":
            with torch.inference_mode():
                yield
        elif var.mode == "autocast":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                yield
        else:
            yield
    finally:
        torch.set_default_dtype(old)
        kornia.core.check.enable_checks()
        torch.set_default_device(None)


def tensors(obj):
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for x in obj for t in tensors(x)]
    if isinstance(obj, dict):
        return [t for k in sorted(obj, key=str) for t in tensors(obj[k])]
    return []


def same_values(a, b):
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    if a.is_meta:
        return True
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return torch.equal(a, b)


def describe(t):
    return (type(t).__name__, t.shape, t.dtype, t.stride() if t.layout == torch.strided else None, t.requires_grad,
            t.is_inference(), t.device)


def compare(what, eager, lazy, problems):
    """Append to problems what differs between an eager and a lazy structure of results."""
    if type(eager) is not type(lazy):
        problems.append(f"{what}: type {type(eager).__name__} vs {type(lazy).__name__}")
        return
    te, tl = tensors(eager), tensors(lazy)
    if len(te) != len(tl):
        problems.append(f"{what}: {len(te)} tensors vs {len(tl)}")
        return
    for i, (e, l) in enumerate(zip(te, tl)):
        if describe(e) != describe(l):
            problems.append(f"{what}[{i}]: eager {describe(e)} vs lazy {describe(l)}")
        elif not same_values(e, l):
            diff = (e.double() - l.double()).abs().nan_to_num(0).max().item()
            problems.append(f"{what}[{i}]: values differ (max abs {diff:.3g})")
    if not te and eager != lazy:
        problems.append(f"{what}: {eager!r} vs {lazy!r}")


def sharing(out, args):
    """Which result tensors are an argument, or share memory with an argument or an earlier result."""
    ins = [a for a in args if isinstance(a, torch.Tensor)]
    outs = tensors(out)

    def base(t):
        return t.untyped_storage().data_ptr() if t.layout == torch.strided and t.numel() else None

    facts = []
    for i, t in enumerate(outs):
        facts.append((i, [j for j, a in enumerate(ins) if t is a],
                      [j for j, a in enumerate(ins) if base(t) is not None and base(t) == base(a)],
                      [k for k in range(i) if base(t) is not None and base(t) == base(outs[k])]))
    return facts


def invoke(fn, args, var):
    """(result or None, exception type or None) of fn(*args) under the variation's context."""
    with call_context(var):
        try:
            return fn(*args), None
        except Exception as exc:    # noqa: BLE001 - exception types are compared with eager's
            return None, type(exc)


def backward(out, leaves, seed):
    """Gradients of a weighted sum of the result's first floating tensor w.r.t. the leaves."""
    outs = [t for t in tensors(out) if t.requires_grad]
    if not outs:
        return None
    g = torch.Generator().manual_seed(seed)
    loss = sum((t * torch.rand(t.shape, generator=g).to(t.dtype)).sum() for t in outs)
    try:
        return torch.autograd.grad(loss, leaves, allow_unused=True)
    except Exception as exc:    # noqa: BLE001
        return type(exc)


def mutate(out, grad=False):
    ts = tensors(out)
    if not ts:
        return None
    try:
        with torch.enable_grad() if grad else torch.no_grad():
            ts[0].add_(1)
        return None
    except Exception as exc:    # noqa: BLE001
        return type(exc)


@dataclass
class Target:
    name: str
    eager: object                   # callable
    lazy: object                    # callable (LazyGraph or proxy function)
    make: object                    # make(var, seed) -> args tuple; the first tensors are the image(s)
    dtypes: tuple = DTYPES


@dataclass
class Report:
    problems: list = field(default_factory=list)
    calls: int = 0
    variations: set = field(default_factory=set)
    seconds: float = 0.0
    stats: dict = field(default_factory=lambda: {"hits": 0, "traces": 0, "eager": 0})

    def count(self, lazy):
        stats = getattr(lazy, "stats", None) or getattr(getattr(lazy, "forward", None), "stats", None)
        for key in self.stats if stats is not None else ():
            self.stats[key] += getattr(stats, key)


def check_call(target, var, seed, report, previous=None):
    """Compare one call; returns the (eager, lazy) results for a later feedback call."""
    args_e, args_l = target.make(var, seed), target.make(var, seed)
    if var.kind != "tensor":
        args_e[0], args_l[0] = as_kind(args_e[0], var.kind), as_kind(args_l[0], var.kind)
    if var.feedback and previous is not None and not (var.mode == "requires_grad" and previous[0].is_inference()):
        args_e[0], args_l[0] = previous
    if var.mode == "requires_grad":
        leaves = []
        for args in (args_e, args_l):
            if not args[0].is_floating_point():
                return None
            indices = [0] + [i for i, a in enumerate(args) if i and var.grad_args and isinstance(a, torch.Tensor)
                             and a.is_floating_point() and a is not args[0]]
            for i in indices:
                args[i] = args[i].detach().requires_grad_(True)
            leaves.append([args[i] for i in indices])
    out_e, exc_e = invoke(target.eager, args_e, var)
    out_l, exc_l = invoke(target.lazy, args_l, var)
    report.calls += 1
    problems = []
    if exc_e is not exc_l:
        problems.append(f"exception {exc_e} vs {exc_l}")
    elif exc_e is None:
        compare("result", out_e, out_l, problems)
        if sharing(out_e, args_e) != sharing(out_l, args_l):
            problems.append(f"memory shared: {sharing(out_e, args_e)} vs {sharing(out_l, args_l)}")
        if var.mode == "requires_grad" and not problems:
            if var.mutate:      # a result saved for backward and written: backward raises as in eager
                me, ml = mutate(out_e, grad=True), mutate(out_l, grad=True)
                if me is not ml:
                    problems.append(f"in-place write of the result needing grad: {me} vs {ml}")
            ge, gl = backward(out_e, leaves[0], seed), backward(out_l, leaves[1], seed)
            if isinstance(ge, type) or isinstance(gl, type) or ge is None or gl is None:
                if ge != gl if not isinstance(ge, tuple) else True:
                    problems.append(f"gradients: {ge} vs {gl}")
            else:
                compare("grad", [g for g in ge if g is not None], [g for g in gl if g is not None], problems)
    compare("inputs after", [a for a in args_e if isinstance(a, torch.Tensor)],
            [a for a in args_l if isinstance(a, torch.Tensor)], problems)
    compare("generator states after", [a.get_state() for a in args_e if isinstance(a, torch.Generator)],
            [a.get_state() for a in args_l if isinstance(a, torch.Generator)], problems)
    if var.mutate and exc_e is None and exc_l is None and var.mode != "requires_grad":
        me, ml = mutate(out_e), mutate(out_l)
        if me is not ml:
            problems.append(f"in-place write of the result: {me} vs {ml}")
        compare("inputs after writing the result", [a for a in args_e if isinstance(a, torch.Tensor)],
                [a for a in args_l if isinstance(a, torch.Tensor)], problems)
    for p in problems:
        report.problems.append(f"{target.name} call {report.calls} seed {seed} {var}: {p}")
    te, tl = tensors(out_e), tensors(out_l)
    if te and tl and te[0].ndim == 4 and tl[0].ndim == 4 and not problems:
        return te[0].detach(), tl[0].detach()
    return None


def run_target(target, rng, calls, report, pool_size=4):
    """Call a target `calls` times, repeating earlier variations half of the time."""
    pool, previous = [], None
    for i in range(calls):
        if pool and rng.random() < 0.5:
            var = pool[rng.integers(len(pool))]
        else:
            var = draw(rng, target.dtypes)
            pool = (pool + [var])[-pool_size:]
        report.variations.add((target.name, var))
        previous = check_call(target, var, int(rng.integers(1 << 30)), report, previous)


# ---- targets -----------------------------------------------------------------------------------

def _resolve(root, dotted):
    for part in dotted.split("."):
        root = getattr(root, part)
    return root


def _ones(seed):
    return torch.ones(1, 3, 32, 32)


#: more cases in the form of kornia_cases.CASES, functions with more Python logic or several results
EXTRA_CASES = [
    ("enhance.equalize_clahe", kornia.enhance.equalize_clahe, lambda s: (_ones(s), 40.0, (4, 4))),
    ("enhance.adjust_log", kornia.enhance.adjust_log, lambda s: (_ones(s), 1.2)),
    ("enhance.adjust_sigmoid", kornia.enhance.adjust_sigmoid, lambda s: (_ones(s), 0.5, 10.0)),
    ("enhance.jpeg_codec_differentiable", kornia.enhance.jpeg_codec_differentiable,
     lambda s: (_ones(s), torch.tensor([50.0]))),
    ("enhance.image_histogram2d", kornia.enhance.image_histogram2d, lambda s: (_ones(s), 0.0, 1.0, 16)),
    ("filters.blur_pool2d", kornia.filters.blur_pool2d, lambda s: (_ones(s), 3)),
    ("filters.max_blur_pool2d", kornia.filters.max_blur_pool2d, lambda s: (_ones(s), 3)),
    ("filters.in_range", kornia.filters.in_range, lambda s: (_ones(s), (0.2, 0.2, 0.2), (0.8, 0.8, 0.8))),
    ("feature.harris_response", kornia.feature.harris_response, lambda s: (_ones(s),)),
    ("feature.hessian_response", kornia.feature.hessian_response, lambda s: (_ones(s),)),
    ("geometry.subpix.spatial_soft_argmax2d", kornia.geometry.subpix.spatial_soft_argmax2d, lambda s: (_ones(s),)),
    ("geometry.subpix.nms2d", kornia.geometry.subpix.nms2d, lambda s: (_ones(s), (3, 3))),
    ("geometry.transform.build_pyramid", kornia.geometry.transform.build_pyramid, lambda s: (_ones(s), 3)),
    ("geometry.transform.elastic_transform2d", kornia.geometry.transform.elastic_transform2d,
     lambda s: (_ones(s), torch.rand(1, 2, 32, 32, generator=torch.Generator().manual_seed(s)))),
    ("losses.total_variation", kornia.losses.total_variation, lambda s: (_ones(s),)),
    ("color.rgb_to_raw", kornia.color.rgb_to_raw, lambda s: (_ones(s), kornia.color.CFA.BG)),
]


def function_targets(proxy, names=None, hook=None):
    """A LazyGraph and a proxy target for each case of kornia_cases and EXTRA_CASES (the image first);
    with `hook` (a _HookNamespace) only a target through the import hook's objects."""
    out = []
    for name, fn, make in CASES + EXTRA_CASES:
        if names is not None and name not in names:
            continue
        case_args = make(0)
        channels = case_args[0].shape[1]

        def make_args(var, seed, case_args=case_args, channels=channels):
            return [image(var, channels, seed), *other_args(case_args[1:], var, seed)]

        if hook is not None:
            out.append(Target("hook." + name, fn, hook.resolve(name), make_args))
            continue
        out.append(Target(name, fn, lazytrace.trace_graph(fn), make_args))
        out.append(Target("proxy." + name, fn, _resolve(proxy, name), make_args))
    return out


def hook_proxy():
    """kornia as the import hook hands it out: `with lazytrace.enable("kornia"): import kornia`, and
    `from kornia.X import name` forms (the real kornia stays in sys.modules; the proxies work after exit)."""
    with lazytrace.enable("kornia"):
        import kornia as traced
        import importlib
        imported = {name: getattr(importlib.import_module("kornia." + name.rpartition(".")[0]), name.rpartition(".")[2])
                    for name, _, _ in (CASES + EXTRA_CASES)[::2]}
    return traced, imported


class _HookNamespace:
    """Names resolved through the hook's kornia proxy, or as `from kornia.X import name` gave them."""

    def __init__(self, traced, imported):
        self.traced, self.imported = traced, imported

    def resolve(self, name):
        return self.imported[name] if name in self.imported else _resolve(self.traced, name)


def _halve_then_add(a, b):
    a.mul_(0.5)
    return kornia.enhance.add_weighted(a, 0.5, b, 0.5, 0.0)


def _filter_by_own_patch(a, b):
    return kornia.filters.filter2d(a, b[:1, 0, :3, :3])


def _noisy_blur(a, g):
    """Draws from a torch.Generator passed in: the graph must draw anew from its current state."""
    noise = torch.randn(a.shape, generator=g, dtype=torch.float32).to(a.dtype)
    return kornia.filters.gaussian_blur2d(a + 0.1 * noise, (3, 3), (1.0, 1.0))


PAIR_FUNCTIONS = {
    "enhance.add_weighted": lambda a, b: kornia.enhance.add_weighted(a, 0.5, b, 0.5, 0.0),
    "metrics.psnr": lambda a, b: kornia.metrics.psnr(a, b, 1.0),
    "losses.ssim_loss": lambda a, b: kornia.losses.ssim_loss(a, b, 5),
    "halve_then_add": _halve_then_add,
    "filter_by_own_patch": _filter_by_own_patch,
}


def pair_targets(names=None):
    def make_args(var, seed):
        return list(pair(var, 3, seed))

    def make_generator_args(var, seed):     # a generator seeded alike or (a third of the time) anew
        return [image(var, 3, seed), torch.Generator().manual_seed(seed % 3 or seed)]

    return [Target("pair." + name, fn, lazytrace.trace_graph(fn), make_args)
            for name, fn in PAIR_FUNCTIONS.items() if names is None or name in names] + [
        Target("generator.noisy_blur", _noisy_blur, lazytrace.trace_graph(_noisy_blur), make_generator_args)]


#: (name, constructor args) of nn.Module classes built through the proxy and eagerly
MODULES = [
    ("filters.GaussianBlur2d", lambda: ((5, 5), (1.5, 1.5))),
    ("filters.Sobel", lambda: ()),
    ("color.RgbToGrayscale", lambda: ()),
    ("color.RgbToHsv", lambda: ()),
    ("enhance.Normalize", lambda: (torch.tensor([0.5, 0.4, 0.3]), torch.tensor([0.2, 0.25, 0.3]))),
    ("augmentation.RandomAffine", lambda: (30.0,)),
    ("augmentation.ColorJitter", lambda: (0.2, 0.2, 0.2, 0.1)),
    ("augmentation.RandomHorizontalFlip", lambda: ()),
    ("augmentation.RandomResizedCrop", lambda: ((24, 24),)),
    ("augmentation.RandomGaussianBlur", lambda: ((5, 5), (0.1, 2.0))),
    ("augmentation.RandomErasing", lambda: ()),
    ("augmentation.RandomBrightness", lambda: ((0.6, 1.4),)),
    ("augmentation.RandomSolarize", lambda: (0.1, 0.1)),
    ("user.ParamFilter", lambda: ()),
]


class ParamFilter(torch.nn.Module):
    """A user module with a parameter and a buffer around kornia calls: `trace_graph(instance)`."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.05, 0.15, 9).view(1, 3, 3))
        self.register_buffer("offset", torch.tensor([0.1, -0.2, 0.3]))

    def forward(self, x):
        return kornia.enhance.adjust_brightness(kornia.filters.filter2d(x, self.weight), 0.1) + self.offset.view(1, -1, 1, 1)


USER_MODULES = {"user.ParamFilter": ParamFilter}


def module_changes():
    """Changes applied to the eager and the traced module alike between calls."""
    def to_dtype(dtype):
        return lambda m: m.to(dtype)

    def flag(name, value):
        return lambda m: setattr(m, name, value) if hasattr(m, name) else None

    def scale_tensors(m):         # in-place writes into the buffers, parameters and tensor attributes
        with torch.no_grad():
            for t in [*m.buffers(), *m.parameters(), *(v for v in vars(m).values() if isinstance(v, torch.Tensor))]:
                with contextlib.suppress(RuntimeError):     # inference tensors, expanded ones
                    t.mul_(1.25)

    def flip_flags(m):
        for key, value in getattr(m, "flags", {}).items():
            if isinstance(value, bool):
                m.flags[key] = not value
        if hasattr(m, "separable"):
            m.separable = not m.separable

    def kernel(m):
        for holder in (vars(m), getattr(m, "flags", {})):
            if "kernel_size" in holder:
                holder["kernel_size"] = (3, 3) if tuple(holder["kernel_size"]) != (3, 3) else (7, 5)
        if hasattr(m, "sigma"):
            m.sigma = torch.tensor([[2.0, 0.5]])

    def replace_tensors(m):       # new objects in place of the parameters, buffers and tensor attributes
        def new(t):
            return t.detach() * 1.5 if t.is_floating_point() else t.clone()
        for sub in m.modules():
            for name, t in [*sub._parameters.items(), *sub._buffers.items()]:
                if t is not None:
                    setattr(sub, name, torch.nn.Parameter(new(t), t.requires_grad) if name in sub._parameters else new(t))
            for name, t in [(n, v) for n, v in vars(sub).items() if isinstance(v, torch.Tensor)]:
                setattr(sub, name, new(t))

    def rng_dtype(dtype):         # where an augmentation draws its parameters
        def change(m):
            if hasattr(m, "set_rng_device_and_dtype"):
                m.set_rng_device_and_dtype(torch.device("cpu"), dtype)
        return change

    return [("rng float64", rng_dtype(torch.float64)), ("rng float32", rng_dtype(torch.float32)),
            ("train", lambda m: m.train()), ("eval", lambda m: m.eval()), ("replace tensors", replace_tensors),
            ("grad off", lambda m: torch.set_grad_enabled(False)), ("grad on", lambda m: torch.set_grad_enabled(True)),
            ("scale tensors", scale_tensors), ("flip flags", flip_flags), ("kernel", kernel),
            ("keepdim", flag("keepdim", True)), ("brightness", flag("brightness", (0.5, 1.5))),
            ("to float64", to_dtype(torch.float64)), ("to float32", to_dtype(torch.float32)),
            ("same_on_batch", flag("same_on_batch", True)), ("not same_on_batch", flag("same_on_batch", False)),
            ("p=0.5", flag("p", 0.5)), ("p=1", flag("p", 1.0))]


def run_module(proxy, name, rng, calls, report):
    """Call a module class built eagerly and through the proxy (a user module: traced as an
    instance) with changes between calls: its state, grad mode set between calls (not around
    them), inputs of another dtype than the module's now and then."""
    if name in USER_MODULES:
        cls_e, cls_l = USER_MODULES[name], lambda *a: lazytrace.trace_graph(USER_MODULES[name](*a))
    else:
        cls_e, cls_l = _resolve(kornia, name), _resolve(proxy, name)
    kwargs = {"p": 1.0} if name.startswith("augmentation.") else {}
    ctor = dict(MODULES)[name]
    eager, lazy = cls_e(*ctor(), **kwargs), cls_l(*ctor(), **kwargs)
    try:
        return _run_module(eager, lazy, name, rng, calls, report)
    finally:
        torch.set_grad_enabled(True)


def _run_module(eager, lazy, name, rng, calls, report):
    changes = module_changes()
    dtype = torch.float32
    pool = []
    for i in range(calls):
        if i and rng.random() < 0.3:
            what, change = changes[rng.integers(len(changes))]
            change(eager)
            change(lazy)
            if what.startswith("to "):
                dtype = torch.float64 if what.endswith("64") else torch.float32
        if pool and rng.random() < 0.5:
            var = pool[rng.integers(len(pool))]
        else:
            var = replace(draw(rng, (torch.float32,)), default_dtype=None, cast_args=False, feedback=False,
                          meta_default=False)
            pool = (pool + [var])[-4:]
        other = rng.random() < 0.15     # an input of the other dtype: errors or promotion as in eager
        var = replace(var, dtype=dtype if not other else {torch.float32: torch.float64}.get(dtype, torch.float32))
        report.variations.add((name, var))
        seed = int(rng.integers(1 << 30))

        def make_args(var, s, seed=seed):
            return [image(var, 3, s)]

        torch.manual_seed(seed)
        state = torch.get_rng_state()

        class Seeded:       # the global generator set alike before each side's call
            def __init__(self, module):
                self.module = module

            def __call__(self, *args):
                torch.set_rng_state(state)
                try:
                    return self.module(*args)
                finally:
                    self.after = torch.get_rng_state()

        seeded_e, seeded_l = Seeded(eager), Seeded(lazy)
        target = Target(f"module.{name}", seeded_e, seeded_l, make_args)
        check_call(target, var, seed, report)
        problems = []
        for attr in ("_params", "transform_matrix"):
            (after_e, exc_e), (after_l, exc_l) = (invoke(getattr, (m, attr, None), var) for m in (eager, lazy))
            if exc_e is not exc_l:
                problems.append(f"reading {attr}: {exc_e} vs {exc_l}")
            if isinstance(after_e, dict):
                after_e, after_l = dict(after_e), dict(after_l or {})
            compare(attr, after_e, after_l, problems)
        compare("rng state after", seeded_e.after, seeded_l.after, problems)
        report.problems.extend(f"module.{name} call {report.calls} {var}: {p}" for p in problems)
    report.count(lazy)
    return lazy


class _Passthrough(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _defaults(device=None, dtype=None):
    old = torch.get_default_dtype()
    torch.set_default_device(device)
    torch.set_default_dtype(dtype or old)
    try:
        yield
    finally:
        torch.set_default_device(None)
        torch.set_default_dtype(old)


#: contexts of the first uses made by poison()
POISON_CONTEXTS = (lambda: _defaults(device="meta"), torch.inference_mode, torch.no_grad,
                   lambda: _defaults(dtype=torch.float64), lambda: _defaults(dtype=torch.bfloat16),
                   lambda: torch.autocast("cpu", dtype=torch.bfloat16), _Passthrough)


def poison(proxy):
    """First uses of every case (new LazyGraphs and the proxy's) in unusual contexts, before the
    fuzzing: what lazytrace caches process-wide at a first use must not carry that context into
    later graphs (a shared 0-d constant made on "meta" or as an inference tensor, session 17)."""
    for context in POISON_CONTEXTS:
        for name, fn, make in CASES + EXTRA_CASES:
            for target in (lazytrace.trace_graph(fn), _resolve(proxy, name)):
                for dtype in (torch.float32, torch.float64):
                    args = [a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in make(0)]
                    with context(), contextlib.suppress(Exception):
                        target(*args)


def fuzz(seed=0, calls=12, module_calls=12, only=None, proxy=None, log=None, hook=False, poisoned=False):
    """Run every target; returns a Report. hook=True: the functions and modules through the import
    hook's proxy (`with lazytrace.enable("kornia"): import kornia`) instead."""
    rng = np.random.default_rng(seed)
    namespace = _HookNamespace(*hook_proxy()) if hook else None
    if proxy is None:
        proxy = namespace.traced if hook else lazytrace.trace_graph(kornia)
    report = Report()
    start = time.thread_time()
    if poisoned:
        poison(proxy)
    keep = (lambda n: only in n) if only else (lambda n: True)
    targets = [t for t in function_targets(proxy, hook=namespace) + ([] if hook else pair_targets()) if keep(t.name)]
    for target in targets:
        t0 = time.perf_counter()
        run_target(target, rng, calls, report)
        report.count(target.lazy)
        if log:
            log(f"{target.name}: {time.perf_counter() - t0:.1f}s, {len(report.problems)} problems so far")
    for name, _ in MODULES:
        if keep("module." + name):
            run_module(proxy, name, rng, module_calls, report)
            if log:
                log(f"module.{name}: {len(report.problems)} problems so far")
    report.seconds = time.thread_time() - start
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--calls", type=int, default=12)
    parser.add_argument("--module-calls", type=int, default=12)
    parser.add_argument("--only")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--hook", action="store_true", help="through `with lazytrace.enable('kornia'): import kornia`")
    parser.add_argument("--poison", action="store_true", help="first uses in unusual contexts before (see poison())")
    ns = parser.parse_args(argv)
    report = fuzz(ns.seed, ns.calls, ns.module_calls, ns.only, hook=ns.hook, poisoned=ns.poison,
                  log=None if ns.quiet else (lambda s: print(s, file=sys.stderr, flush=True)))
    for p in report.problems:
        print(p)
    print(f"{report.calls} calls, {len(report.variations)} (target, variation) pairs, "
          f"{len(report.problems)} problems, {report.seconds:.1f}s thread CPU, lazy side: {report.stats}")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())

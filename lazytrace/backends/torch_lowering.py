"""Lowering: a graph calls the C function a torch Python wrapper ends in (`F.pad` ->
`torch._C._nn.pad`), with the wrapper's arguments normalized at trace time.

A TorchFunctionMode sees `F.pad` itself, not the calls inside it: the mode is popped
while the wrapper runs, and letting it see inside cannot work, because each wrapper
first asks `has_torch_function` and would hand the same call back to the mode. So
each wrapper below has a function that makes, from the arguments of the call the
trace saw, the call its Python code made (option (b) of the design; the inner call
recorded as made).

Only wrappers whose Python branches read nothing but what a graph's key fixes:
argument values (baked into the recorded call), the shapes, dtypes and devices of
its tensors (keyed for inputs, fixed by the graph for the values it computes; a
value of data-dependent shape is never lowered) and the type of the tensors (only
plain tensors and parameters: a subclass's __torch_function__ would run in eager; nor
under a torch function mode of the user's, which would see the C call, not the wrapper).
Global state a wrapper reads is avoided, not keyed: `F.pad` and `F.interpolate`
read `torch.are_deterministic_algorithms_enabled()` only for tensors off the CPU in
some modes (those calls are not lowered); the norms pass `torch.backends.cudnn.enabled`,
which changes nothing on the CPU (lowered there only). Error paths need no care: the
wrapper ran without raising on these very arguments at trace time. Warnings a wrapper
gives (`align_corners=None`) are given at trace time only, as other dropped Python
effects are. The review was made against torch 2.13's torch/nn/functional.py and
torch/functional.py: another torch version lowers nothing until reviewed again.

Measured (benchmarks/bench_lowering.py: graph.fn of one call with lowering off and on, one
thread, 1x3x32x32 float32, median us): F.pad 6.7 -> 6.2, F.interpolate bilinear 13.9 -> 10.8,
nearest 13.3 -> 11.3, F.grid_sample 9.5 -> 9.3, F.affine_grid 39.8 -> 35.9, F.max_pool2d
49.0 -> 48.2, F.unfold 50.1 -> 46.9, F.group_norm 6.9 -> 4.1, F.layer_norm 10.9 -> 10.3,
torch.einsum (two operands) 26.9 -> 16.9, F.dropout(training=False) 3.1 -> 0.7, F.relu 2.3 ->
2.2, F.adaptive_avg_pool2d 4.8 -> 4.1; kornia graphs 0.4-22% faster at 32x32 (resize 22%, pyrdown 8%),
the same at 512x512. Not lowered: wrappers that cost about nothing (`F.softmax` ->
`Tensor.softmax`: 0.1 us), compositions of several calls (`F.normalize`), and
`torch.einsum` with three or more operands, whose contraction path opt_einsum computes at
each call (~150 us) from `torch.backends.opt_einsum` settings a graph does not key.
"""
from __future__ import annotations

import inspect
import os

import torch
import torch.nn.functional as F
from torch import Tensor, _VF

#: the torch release whose wrappers were reviewed (major.minor)
REVIEWED = "2.13"

_PLAIN_TENSORS = (Tensor, torch.nn.Parameter)


def _pair(x):
    return tuple(x) if isinstance(x, (list, tuple)) else (x, x)


def _pad(a, r):
    x = a["input"]
    if a["mode"] == "replicate" and (x.is_cuda or x.is_xpu):
        return None         # under deterministic algorithms, a decomposition
    return torch._C._nn.pad, (r["input"], r["pad"], r["mode"], r["value"])


_NEAREST = {(3, "nearest"): torch._C._nn.upsample_nearest1d, (4, "nearest"): torch._C._nn.upsample_nearest2d,
            (5, "nearest"): torch._C._nn.upsample_nearest3d,
            (3, "nearest-exact"): torch._C._nn._upsample_nearest_exact1d,
            (4, "nearest-exact"): torch._C._nn._upsample_nearest_exact2d,
            (5, "nearest-exact"): torch._C._nn._upsample_nearest_exact3d}
_LINEAR = {(3, "linear", False): torch._C._nn.upsample_linear1d,
           (4, "bilinear", False): torch._C._nn.upsample_bilinear2d,
           (5, "trilinear", False): torch._C._nn.upsample_trilinear3d,
           (4, "bicubic", False): torch._C._nn.upsample_bicubic2d,
           (4, "bilinear", True): torch._C._nn._upsample_bilinear2d_aa,
           (4, "bicubic", True): torch._C._nn._upsample_bicubic2d_aa}


def _interpolate(a, r):
    x, mode, size, scale = a["input"], a["mode"], a["size"], a["scale_factor"]
    if a["recompute_scale_factor"] or not _literals(size, scale):
        return None         # an output size computed from the shape (SymInts): left to the wrapper
    dims = x.dim() - 2
    if size is not None:
        sizes, scales = (size if isinstance(size, (list, tuple)) else [size] * dims), None
    else:
        sizes, scales = None, (scale if isinstance(scale, (list, tuple)) else [scale] * dims)
    nearest = _NEAREST.get((x.dim(), mode))
    if nearest is not None:
        return nearest, (r["input"], sizes, scales)
    linear = _LINEAR.get((x.dim(), mode, bool(a["antialias"])))
    if linear is None or mode in ("bilinear", "trilinear") and not a["antialias"] and not x.is_cpu:
        return None         # area, lanczos; off the CPU, deterministic algorithms take a decomposition
    align = a["align_corners"]
    return linear, (r["input"], sizes, False if align is None else align, scales)


_GRID_MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
_GRID_PADDING = {"zeros": 0, "border": 1, "reflection": 2}


def _grid_sample(a, r):
    align = a["align_corners"]
    return torch.grid_sampler, (r["input"], r["grid"], _GRID_MODES[a["mode"]], _GRID_PADDING[a["padding_mode"]],
                                False if align is None else align)


def _affine_grid(a, r):
    align = a["align_corners"]
    return torch.affine_grid_generator, (r["theta"], r["size"], False if align is None else align)


def _max_pool2d(a, r):
    target = torch._C._nn.max_pool2d_with_indices if a["return_indices"] else torch.max_pool2d
    return target, (r["input"], r["kernel_size"], [] if a["stride"] is None else r["stride"], r["padding"],
                    r["dilation"], r["ceil_mode"])


def _unfold(a, r):
    sizes = [a[n] for n in ("kernel_size", "dilation", "padding", "stride")]
    return (torch._C._nn.im2col, (r["input"], *map(_pair, sizes))) if _literals(*sizes) else None


def _fold(a, r):
    sizes = [a[n] for n in ("output_size", "kernel_size", "dilation", "padding", "stride")]
    return (torch._C._nn.col2im, (r["input"], *map(_pair, sizes))) if _literals(*sizes) else None


def _norm(target, *names):
    """torch.<norm>(..., cudnn_enabled): the flag the wrapper reads changes nothing on the CPU."""
    def lower(a, r):
        return (target, (*(r[n] for n in names), False)) if a["input"].is_cpu else None
    return lower


def _activation(plain, in_place, *names):
    """F.relu and the like: `in_place(input, ...)` if inplace=True, else `plain(input, ...)`."""
    def lower(a, r):
        return in_place if a["inplace"] else plain, tuple(r[n] for n in ("input", *names))
    return lower


def _adaptive_avg_pool2d(a, r):
    size = a["output_size"]
    if not _literals(size):
        return None
    if type(size) is not int:       # None: that size of the input (torch's _list_with_default)
        size = [d if v is None else v for v, d in zip(size, a["input"].shape[-len(size):])]
    return torch._C._nn.adaptive_avg_pool2d, (r["input"], size)


def _dropout(a, r):
    return (_VF.dropout_ if a["inplace"] else _VF.dropout), (r["input"], r["p"], r["training"])


def _einsum(a, r):
    """The mode saw `einsum(equation, *operands)` (sublists already made an equation), or
    `einsum(equation, [operands])`."""
    equation, *operands = r["args"]
    if len(operands) == 1 and type(operands[0]) in (list, tuple):
        operands = operands[0]
    if type(equation) is not str or len(operands) > 2:
        return None         # three or more: a contraction path from opt_einsum, whose settings are not keyed
    return _VF.einsum, (equation, tuple(operands))


#: wrapper -> (the function whose signature binds its arguments, its lowering). A lowering gets the
#: call's real arguments and the recorded ones (Values for arrays), by name with defaults applied,
#: and returns None (not lowered) or the C function with its recorded arguments.
_TABLE = {
    F.pad: (F.pad, _pad),
    F.interpolate: (F.interpolate, _interpolate),
    F.grid_sample: (F.grid_sample, _grid_sample),
    F.affine_grid: (F.affine_grid, _affine_grid),
    F.max_pool2d: (F._max_pool2d, _max_pool2d),        # (a boolean_dispatch of these two wrappers)
    F.max_pool2d_with_indices: (F.max_pool2d_with_indices, _max_pool2d),
    F.unfold: (F.unfold, _unfold),
    F.fold: (F.fold, _fold),
    F.group_norm: (F.group_norm, _norm(torch.group_norm, "input", "num_groups", "weight", "bias", "eps")),
    F.layer_norm: (F.layer_norm, _norm(torch.layer_norm, "input", "normalized_shape", "weight", "bias", "eps")),
    F.batch_norm: (F.batch_norm, _norm(torch.batch_norm, "input", "weight", "bias", "running_mean", "running_var",
                                       "training", "momentum", "eps")),
    torch.einsum: (torch.einsum, _einsum),
    F.dropout: (F.dropout, _dropout),       # random or not (training=False), the same C call
    F.relu: (F.relu, _activation(torch.relu, torch.relu_)),
    F.silu: (F.silu, _activation(torch._C._nn.silu, torch._C._nn.silu_)),
    F.leaky_relu: (F.leaky_relu, _activation(torch._C._nn.leaky_relu, torch._C._nn.leaky_relu_, "negative_slope")),
    F.hardtanh: (F.hardtanh, _activation(torch._C._nn.hardtanh, torch._C._nn.hardtanh_, "min_val", "max_val")),
    F.elu: (F.elu, _activation(torch._C._nn.elu, torch._C._nn.elu_, "alpha")),
    F.adaptive_avg_pool2d: (F.adaptive_avg_pool2d, _adaptive_avg_pool2d),
}

#: the C functions lowered calls make (a stored graph may call them)
TARGETS = frozenset({torch._C._nn.pad, torch.grid_sampler, torch.affine_grid_generator, torch.max_pool2d,
                     torch._C._nn.max_pool2d_with_indices, torch._C._nn.im2col, torch._C._nn.col2im,
                     torch.group_norm, torch.layer_norm, torch.batch_norm, _VF.einsum, _VF.dropout, _VF.dropout_,
                     torch.relu, torch.relu_, torch._C._nn.silu, torch._C._nn.silu_, torch._C._nn.leaky_relu,
                     torch._C._nn.leaky_relu_, torch._C._nn.hardtanh, torch._C._nn.hardtanh_, torch._C._nn.elu,
                     torch._C._nn.elu_, torch._C._nn.adaptive_avg_pool2d,
                     *_NEAREST.values(), *_LINEAR.values()})


def _literals(*objs) -> bool:
    """Python numbers, None, and lists, tuples or torch.Size of them (no tensor, no SymInt)."""
    return all(type(o) in (int, float, bool, type(None)) or type(o) in (list, tuple, torch.Size) and _literals(*o)
               for o in objs)


def _other_modes() -> bool:
    """Whether torch function modes besides the trace's (popped while it handles a call) are
    active: one would see the wrapper in eager, and the C call in a graph. The default device's
    (`torch.set_default_device`) changes only factory calls: it does not count."""
    if not torch._C._len_torch_function_stack():
        return False
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._device import DeviceContext
    return any(not isinstance(m, DeviceContext) for m in _get_current_function_mode_stack())


_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def torchs_own(func) -> bool:
    """Whether `func` is torch's own wrapper, not one the user put in torch.nn.functional before
    this module read it (`F.pad = my_pad`: its arguments are not the wrapper's); a sibling
    package (torchvision) is not torch."""
    code = getattr(func, "__code__", None)
    return code is not None and os.path.abspath(code.co_filename).startswith(_TORCH_DIR)


def _plain_tensors(obj) -> bool:
    """Whether every tensor in `obj`, or in the lists and tuples it nests, is a plain one."""
    if type(obj) in (list, tuple):
        for x in obj:
            if type(x) not in _NUMBERS and not _plain_tensors(x):
                return False
        return True
    return type(obj) in _PLAIN_TENSORS or not isinstance(obj, Tensor)


_NUMBERS = (int, float, bool, type(None))


class Lowering:
    """The table's wrappers with their signatures (none for a torch release not reviewed)."""

    def __init__(self, enabled: bool = True):
        release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
        self._table = {w: (inspect.signature(s), lower) for w, (s, lower) in _TABLE.items() if torchs_own(w)} \
            if enabled and release == REVIEWED else {}
        self._bindings: dict = {}       # (wrapper, number of positional arguments, keyword names) -> _binding

    def __contains__(self, func) -> bool:
        try:
            return func in self._table
        except TypeError:       # an unhashable callable
            return False

    def lower(self, func, args, kwargs, recorded, recorded_kwargs, keyed):
        """(C function, its recorded arguments) for a call of a wrapper, or None. `keyed(obj)`:
        whether the graph fixes the metadata of the arrays in a recorded argument."""
        signature, lower = self._table[func]
        shape = (func, len(args), tuple(kwargs))
        binding = self._bindings.get(shape, _UNBOUND)
        if binding is _UNBOUND:
            if len(self._bindings) >= 1024:
                self._bindings.clear()
            binding = self._bindings[shape] = _binding(signature, len(args), tuple(kwargs))
        if binding is None or len(recorded) != len(args) or recorded_kwargs.keys() != kwargs.keys():
            return None         # (arguments the wrapper does not take: it raised in eager)
        real, rec = _bind(binding, args, kwargs), _bind(binding, recorded, recorded_kwargs)
        if not _plain_tensors(tuple(real.values())):
            return None         # a subclass's __torch_function__ runs in eager
        if not all(keyed(v) for v in rec.values()) or _other_modes():
            return None
        return lower(real, rec)


class _Position(int):
    """A placeholder for the positional argument at this index (_binding)."""


_UNBOUND = object()


def _binding(signature, count: int, names: tuple) -> tuple | None:
    """How a call with `count` positional arguments and keyword arguments `names` binds, as
    `signature.bind(...)` and `apply_defaults()` place it (which depends on nothing else, and runs
    ~1000 bytecodes of inspect): (the defaults of the parameters it does not pass, the names of
    the parameters its positional arguments go to, (name, first index) of a `*args` parameter
    taking the rest or None); None where it does not bind, or passes keyword arguments to a
    `**kwargs` parameter (not lowered)."""
    try:
        bound = signature.bind(*map(_Position, range(count)), **dict.fromkeys(names))
    except TypeError:
        return None
    bound.apply_defaults()
    defaults, positional, variadic = {}, [], None
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            variadic = (name, value[0]) if value else None
            if not value:
                defaults[name] = ()
        elif kind is inspect.Parameter.VAR_KEYWORD:
            if value:
                return None
            defaults[name] = {}
        elif type(value) is _Position:
            positional.append(name)
        elif name not in names:
            defaults[name] = value
    return defaults, tuple(positional), variadic


def _bind(binding, args, kwargs) -> dict:
    """The call's arguments by parameter name, defaults applied (what BoundArguments.arguments holds)."""
    defaults, positional, variadic = binding
    found = dict(defaults)
    found.update(zip(positional, args))
    found.update(kwargs)
    if variadic is not None:
        found[variadic[0]] = tuple(args[variadic[1]:])
    return found

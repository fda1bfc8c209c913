"""PyTorch backend.

Interception: `torch.overrides.TorchFunctionMode`. A mode is pushed on the
current thread only, and it sees every torch-level call including operators,
tensor methods, property reads (`x.shape`, `x.T`), `bool(t)`, `.item()` and
`torch._C._set_grad_enabled` (so `torch.no_grad()` blocks are recorded and
replayed). Inside the handler the mode is popped, so a call like
`F.interpolate` is recorded once, not as the ops it is made of; for the
wrappers reviewed in torch_lowering.py, a graph calls the C function the
wrapper's Python code ends in (`torch._C._nn.upsample_bilinear2d`), with the
arguments it would pass (replay_call), and checks the wrapper like the
functions it calls.

Classification uses torch's own operator tags: an aten op tagged
`nondeterministic_seeded` is a random generator; one tagged
`dynamic_output_shape` / `data_dependent_output` has a data-dependent shape.
In-place writes are detected with tensors' version counters (`t._version`),
which autograd itself relies on.
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import gc
import json
import logging
import operator
import sys
from contextlib import contextmanager
from types import (BuiltinFunctionType, ClassMethodDescriptorType, FunctionType, GetSetDescriptorType,
                   MemberDescriptorType, MethodDescriptorType, MethodWrapperType, ModuleType, WrapperDescriptorType)

import torch
import torch.autograd.forward_ad as _forward_ad
import torch.nn.utils.parametrize as _parametrize
import torch.utils.checkpoint
import wrapt
from torch import Tensor
from torch.nn.parameter import UninitializedTensorMixin as _Uninitialized
from torch.overrides import TorchFunctionMode

from ..graph.ir import Source, Value
from ..graph.signature import Unkeyable, _value_key
from ..graph.stateful import own_class
from .base import Backend, CallFacts, CallKind, call_as_caller, kept_per_argument, operator_syntax
from .torch_lowering import TARGETS as _LOWERED_TARGETS, Lowering, _other_modes, torchs_own

_DISPLAY = {"__repr__", "__str__", "__format__"}
_ESCAPE = {"numpy", "__array__", "data_ptr", "untyped_storage", "storage", "_typed_storage",
           "__dlpack__", "__array_interface__", "__reduce_ex__", "__getstate__",
           "register_hook", "register_post_accumulate_grad_hook"}    # Python code autograd runs later
_METADATA = {"size", "dim", "ndimension", "numel", "nelement", "__len__", "element_size",
             "is_floating_point", "is_complex", "get_device", "shape", "dtype", "device", "ndim",
             "requires_grad", "is_cuda", "is_cpu", "is_sparse", "is_mps", "is_meta", "layout", "is_leaf",
             "is_quantized", "names", "itemsize", "nbytes", "grad_fn", "__hash__",
             "is_same_size", "is_signed", "type", "__torch_function__", "is_inference", "is_nested", "is_xla", "is_mkldnn",
             "stride", "is_contiguous", "is_non_overlapping_and_dense"}    # strides are keyed too
# not in the key, so read back and guarded: `_is_view()`, `_base`, `retains_grad`, `output_nr` (is_leaf is
# keyed for tensors requiring grad, see describe, so `grad_fn is None` is too). `_version` is guarded for
# tensors passed in only: kornia records the version counters of the parameters it just drew (the same at
# every replay; a guard after a draw would make the call eager)
_HISTORY = {"_version"}
_STATE = {"_set_grad_enabled", "set_autocast_enabled", "set_autocast_dtype", "autocast_increment_nesting",
          "autocast_decrement_nesting", "set_autocast_cache_enabled", "clear_autocast_cache",
          "_enter_autocast", "_exit_autocast", "_set_fwd_grad_enabled"}
#: a Tensor property set or deleted (`x.grad = g`): the mode sees the descriptor's own method
_SETTERS = {"__set__", "__delete__"}
#: in-place calls that may give their first argument the metadata of another (a property set: `x.data = d`)
_TAKES_METADATA = {"__set__", "resize_as_", "set_", "resize_as_sparse_", "sparse_resize_", "sparse_resize_and_clear_"}
#: the kind of a call by its name, in this order (a name in none: module, aten tags, result)
_KIND_BY_NAME = ((_DISPLAY, CallKind.DISPLAY), (_ESCAPE, CallKind.ESCAPE), (_METADATA, CallKind.METADATA),
                 (_HISTORY, CallKind.HISTORY), (_STATE, CallKind.STATE), (_SETTERS, CallKind.OP))
#: random functions without an aten op of their own name (Python-level compositions)
_GENERATOR_EXTRA = {"dropout1d", "dropout2d", "dropout3d", "feature_alpha_dropout", "alpha_dropout",
                    "rrelu", "rrelu_", "gumbel_softmax", "feature_dropout"}
_DETERMINISTIC_INIT = {"constant_", "ones_", "zeros_", "eye_", "dirac_", "calculate_gain"}
#: binary ops where a Python number operand may become a 0-dim tensor of the other operand's
#: dtype, for float32/float64 CPU tensors only: there TensorIterator treats both as a CPU scalar
#: cast to that dtype, so results are bit-identical (tests/test_torch.py checks), and the tensor
#: form skips wrapping the number at every call (about 2 us of 4 on a small tensor). CUDA
#: kernels round differently with the two forms (seen on an H100: 6e-5 in rgb_to_lab).
_SCALAR_OPERAND_OPS = {"add", "sub", "mul", "div", "true_divide", "remainder", "eq", "ne", "lt", "le", "gt",
                       "ge", "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
                       "__truediv__", "__rtruediv__", "__div__", "__rdiv__", "__mod__", "__eq__", "__ne__", "__lt__",
                       "__le__", "__gt__", "__ge__"}
_SCALAR_DTYPES = (torch.float32, torch.float64)
_AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "mps")
#: calls that read only the metadata of their first array (`self` / `input`) ...
_METADATA_FIRST = {"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "zeros_like", "ones_like",
                   "empty_like", "full_like", "rand_like", "randn_like", "randint_like"}
#: ... and of their second (`other`): `k.to(x)` casts k to x's dtype and device
_METADATA_SECOND = {"to", "type_as", "expand_as", "view_as", "reshape_as"}
#: calls returning self unless a bit that no key holds (conjugate, negative) is set
_RESOLVES_BIT = frozenset({"resolve_conj", "resolve_neg"})
#: creation calls a stored graph may make besides torch's overridable functions
_CREATION = {"zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "eye", "tensor", "scalar_tensor",
             "as_tensor", "rand", "randn", "randint", "randperm", "normal", "rand_like", "randn_like",
             "randint_like", "tril_indices", "triu_indices", "hann_window", "hamming_window", "bartlett_window",
             "blackman_window", "kaiser_window"}
_DYNAMIC_EXTRA = {"argwhere", "unique", "unique_consecutive", "masked_select"}
#: private ops public code calls that torch's overridable list leaves out (kornia's value checks:
#: `torch._assert_async(cond, msg)` raises when cond is false): a stored graph may name them
_PRIVATE_OPS = {"_assert_async"}

_NAMESPACES = ("torch", "torch.nn.functional", "torch.linalg", "torch.fft", "torch.special",
               "torch.nn.init", "torch._C", "torch._C._nn", "torch.functional")


# what unseen_state reads before every call of a trace, looked up once
_default_dtype, _inference_mode, _any_autocast, _transform_level, _grad_enabled = (
    torch.get_default_dtype, torch.is_inference_mode_enabled, torch._C._is_any_autocast_enabled,
    torch._C._functorch.maybe_current_level, torch.is_grad_enabled)


#: framework state code reads in Python (kornia's ssim: `torch.backends.mkldnn.enabled`), no call showing
#: it: checked where the traced code reads it (Backend.state_reads); None: the attribute is the reader
_STATE_READS = {
    ("torch", "are_deterministic_algorithms_enabled"): None,
    ("torch", "is_deterministic_algorithms_warn_only_enabled"): None,
    ("torch", "get_deterministic_debug_mode"): None,
    ("torch", "get_num_threads"): None,
    ("torch", "get_num_interop_threads"): None,
    ("torch", "get_float32_matmul_precision"): None,
    ("torch", "is_anomaly_enabled"): None,
    ("torch", "is_anomaly_check_nan_enabled"): None,
    ("torch", "is_warn_always_enabled"): None,
    ("torch", "initial_seed"): None,
    ("torch.random", "initial_seed"): None,
    ("torch.backends.mkldnn", "enabled"): torch._C._get_mkldnn_enabled,
    ("torch.backends.cudnn", "enabled"): torch._C._get_cudnn_enabled,
    ("torch.backends.cudnn", "benchmark"): torch._C._get_cudnn_benchmark,
    ("torch.backends.cudnn", "deterministic"): torch._C._get_cudnn_deterministic,
    ("torch.backends.cudnn", "allow_tf32"): torch._C._get_cudnn_allow_tf32,
    # read by torch's own code around a parametrized module (Backend.model_state_reads)
    ("torch.nn.utils.parametrize", "_cache_enabled"): lambda: _parametrize._cache_enabled,
    ("torch.backends.mha", "get_fastpath_enabled"): None,
}


def _shape(t):
    """t.shape as a tuple, or "nested" for a nested tensor (it has no single shape: reading one
    raises). (A tuple, not the torch.Size: the collector untracks a tuple of ints, and the brief
    tuple holding it, at its first collection; a torch.Size, a subclass, stays tracked, and with it
    the brief of every Value a graph keeps.)"""
    return "nested" if t.is_nested else tuple(t.shape)


_MIN_NORMAL = sys.float_info.min
#: frames between the code calling torch and a traced call (torch's Python wrappers, its
#: function-mode dispatch, lazytrace): the code whose warnings a call's are (base.call_as_caller)
_CALLERS_OF_TORCH = ("lazytrace.", "torch.")
_VERSION = operator.attrgetter("_version")      # a tensor's write count (TorchBackend.run)


def _denormals_flushed() -> bool:
    """Whether `torch.set_flush_denormal(True)` is in effect (it has no getter): it sets this
    thread's CPU flags, under which Python's float arithmetic runs too, so a number below the
    smallest normal float becomes zero. Constants folded at the trace were computed under the
    trace's setting: it is part of the key."""
    return _MIN_NORMAL * 0.5 == 0.0


_deterministic = torch._C._get_deterministic_algorithms


def _deterministic_mode():
    """None, or (warn_only, fill_uninitialized_memory) while `torch.use_deterministic_algorithms(True)`
    is in effect: then `torch.empty` and its kind fill their memory with NaN (or the largest integer)
    and ops without a deterministic kernel raise or warn, so constants folded at the trace (an
    `empty_like(x)`) were made under the trace's mode: it is part of the key."""
    if not _deterministic():
        return None
    return torch._C._get_deterministic_algorithms_warn_only(), torch._C._get_deterministic_fill_uninitialized_memory()


def _skipped_by_dynamo(dynamo) -> None:
    """torch.compile of code that calls a LazyGraph (a traced model's forward): dynamo runs
    lazytrace's own frames as they are, as it does the standard library's, instead of inlining the
    tracer and the cache (RecursionError inside dynamo). Registered when torch._dynamo is imported
    (importing it costs ~1.5 s: torch does that at the first torch.compile)."""
    add = getattr(getattr(dynamo, "trace_rules", None), "add", None)
    if add is not None:
        add(__name__.partition(".")[0])


wrapt.register_post_import_hook(_skipped_by_dynamo, "torch._dynamo")

#: torch modules whose forward, in eval mode without autograd, takes a fused path only where no
#: torch function mode is active (`torch.overrides.has_torch_function`): under a trace's mode it
#: takes the other one, equal to ~1e-7 but not bitwise
_FAST_PATH_MODULES = (torch.nn.MultiheadAttention, torch.nn.TransformerEncoderLayer, torch.nn.TransformerEncoder)


def _fast_path_refused(modules) -> str | None:
    for m in modules:       # (the module type first: this runs with the module key, at every call)
        if isinstance(m, _FAST_PATH_MODULES) and not m.training and torch.backends.mha.get_fastpath_enabled() \
                and not (torch.is_grad_enabled() and any(p.requires_grad for p in m.parameters())):
            return (f"{type(m).__name__} in eval mode without autograd takes torch's fused fast path, which a trace "
                    f"(under a torch function mode) does not take: a graph would compute the other path, not "
                    f"bitwise equal")
    return None


_IN_PARAMETRIZE_CACHED = ("inside torch.nn.utils.parametrize.cached(): parametrized weights come from its cache, "
                          "which a graph would not read")

#: the hooks every nn.Module call runs (`register_module_forward_hook` ...): a module called by a
#: traced function ran those there when it was traced, and a graph replays what they did
_GLOBAL_HOOKS = tuple(vars(torch.nn.modules.module)[name] for name in (
    "_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks", "_global_backward_hooks"))


def _global_hooks() -> tuple:
    """The ids of the global module hooks (a handle's id is never reused), or () when none."""
    return tuple(tuple(hooks) for hooks in _GLOBAL_HOOKS) if any(_GLOBAL_HOOKS) else ()


def _autocast_state():
    """False, or the autocast dtype of each device type it is enabled for."""
    if not torch._C._is_any_autocast_enabled():
        return False
    return tuple((d, torch.get_autocast_dtype(d)) for d in _AUTOCAST_DEVICES if torch.is_autocast_enabled(d))


def _cpu_only(plan) -> bool:
    """Whether every array value of a plan is a CPU tensor (its brief says so)."""
    values = [*plan.inputs, *plan.constants]
    for node in plan.nodes:
        values.extend(node.inputs)
        values.extend(node.outputs)
    for value in values:
        meta = value.meta
        if isinstance(meta, str):           # a stateful object or a namespace read by a check
            continue
        if not (type(meta) is tuple and len(meta) == 4 and isinstance(meta[2], torch.device)
                and meta[2].type == "cpu"):
            return False
    return True


def _function_modes():
    """The torch function modes active outside any trace: the default device of a
    `torch.set_default_device` or `with torch.device(...)` (factory calls make arrays there; a
    graph's constants were made on the trace's device), other modes by type; then the torch
    dispatch modes (`FlopCounterMode`, a `TorchDispatchMode` of the user's) by type."""
    modes = ()
    if torch._C._len_torch_function_stack():
        from torch.overrides import _get_current_function_mode_stack
        from torch.utils._device import DeviceContext
        modes = tuple(m.device if isinstance(m, DeviceContext) else type(m) for m in _get_current_function_mode_stack())
    if torch._C._len_torch_dispatch_stack():
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
        modes += tuple([("dispatch", type(m)) for m in _get_current_dispatch_mode_stack()])
    return modes


def _set_autocast(state) -> None:
    """Put autocast in `state` (what `_autocast_state()` returned): the replay of an autocast switch."""
    if _autocast_state() == state:
        return
    enabled = dict(state or ())
    for device in _AUTOCAST_DEVICES:
        if device in enabled:
            torch.set_autocast_dtype(device, enabled[device])
        torch.set_autocast_enabled(device, device in enabled)
    if not enabled:
        # as leaving the outermost `with torch.autocast` does: the casts of parameters autocast
        # cached are dropped (an optimizer step changes the parameters before the next call)
        torch.autocast_increment_nesting()
        if torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()


def _namespace_index() -> list:
    """(module name, its namespace, {id(value): its last attribute}, the ids of its values in order)
    for each of _NAMESPACES, made by C calls (~0.5 ms; a Python loop over their ~3000 attributes
    took ~2 ms of the process's first trace calling a torch function)."""
    import importlib
    index = []
    for ns in _NAMESPACES:
        try:
            namespace = vars(importlib.import_module(ns))
        except ImportError:
            continue
        names, ids = list(namespace), list(map(id, namespace.values()))    # (no tuple per item)
        index.append((ns, namespace, dict(zip(ids, names)), ids))
    return index


def _holding(func, namespace, last, ids) -> list:
    """The attributes of `namespace` holding `func` (its index: `last`, `ids`)."""
    name = last.get(id(func))
    if name is None:
        return []
    if ids.count(id(func)) == 1:        # held once (when indexed)
        return [name]
    return [n for n, v in list(namespace.items()) if v is func]      # (rare: an alias)


def _func_name(func) -> str:
    self_ = getattr(func, "__self__", None)
    if getattr(func, "__name__", None) == "__get__" and self_ is not None and hasattr(self_, "__objclass__"):
        return self_.__name__          # a property of Tensor: x.T, x.shape
    return getattr(func, "__name__", "")


#: Tensor dunders that write into self (`x += 1`, `x[0] = v`)
_WRITING_DUNDERS = frozenset({"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__",
                              "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__",
                              "__irshift__", "__imatmul__"})


class _Info(CallFacts):
    """What the backend needs to know of one callable, worked out on its first call (the tracer
    asks at every call: kind, name, whether it reads metadata only, hands out `x.grad` ...)."""

    __slots__ = ("name", "kind", "shape_check", "metadata", "caller_owned", "underscore", "specializes", "writes",
                 "stores_arguments", "inplace", "may_write", "training", "fixed", "foreign", "reads_metadata", "replays",
                 "metadata_only", "takes_metadata")

    def __init__(self, func, kind, replays: bool):
        name = self.name = _func_name(func)
        self.kind = kind
        self.reads_metadata = kind is CallKind.METADATA or kind is CallKind.HISTORY    # (no write to look for)
        # its kind depends on the arguments (see classify)
        self.shape_check = kind is CallKind.OP and name in ("__getitem__", "where", "one_hot") or name == "type"
        self.metadata = 1 if name in _METADATA_FIRST else 2 if name in _METADATA_SECOND else 0
        self.caller_owned = name == "grad"          # the property x.grad
        self.stores_arguments = name in _SETTERS    # x.grad = g, x.data = d: a change of its first argument
        self.takes_metadata = name in _TAKES_METADATA       # x.data = d, x.resize_as_(d): d's shape
        self.underscore = name.endswith("_")        # in place, or changes self (requires_grad_)
        self.writes = self.underscore and not name.startswith("__") or name in _WRITING_DUNDERS
        self.specializes = name in _SCALAR_OPERAND_OPS     # a number operand: specialize_args
        self.replays = replays                      # a wrapper torch_lowering replays as its C call
        self.inplace = _inplace_position(func)      # F.dropout(x, inplace=True) writes x
        self.may_write = self.writes or self.inplace is not None        # (writes_first may be True)
        self.training = _training_switch(func) if kind is CallKind.GENERATOR else None
        self.fixed = not self.shape_check and self.training is None    # its kind, whatever the arguments
        # Python code that is not torch's, handed to the mode by torch's dispatch (see _dispatcher)
        self.foreign = not isinstance(func, _C_CALLABLES) and not torchs_own(func) and \
            not str(getattr(type(func), "__module__", "")).startswith("torch")
        # reads an array's metadata whatever its arguments, and is torch's own (`x.shape`, `x.dim()`):
        # the mode hands it to TraceSession.on_metadata
        self.metadata_only = kind is CallKind.METADATA and self.fixed and not self.foreign

    def writes_first(self, args, kwargs) -> bool:
        """Whether this call writes its first argument (x.add_(1), F.relu(x, inplace=True))."""
        position = self.inplace
        return self.writes or position is not None and (
            kwargs.get("inplace") is True or len(args) > position and args[position] is True)


#: torch's C dropouts: `torch.dropout(input, p, train)`
_C_DROPOUTS = {"dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout"}


def _training_switch(func) -> tuple | None:
    """(name, position, default) of the `training` argument of a random function that draws
    nothing when it is False (F.dropout, F.rrelu, torch.dropout's `train`), or None."""
    code = getattr(func, "__code__", None)
    if code is None:
        return ("train", 2, None) if _func_name(func).removesuffix("_") in _C_DROPOUTS else None
    names = code.co_varnames[:code.co_argcount]
    if "training" not in names:
        return None
    position, defaults = names.index("training"), func.__defaults__ or ()
    first = len(names) - len(defaults)
    return "training", position, defaults[position - first] if position >= first else None


def _inplace_position(func) -> int | None:
    """The position of a Python function's `inplace` parameter (torch.nn.functional's), or None."""
    code = getattr(func, "__code__", None)
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount] if code is not None else ()
    return names.index("inplace") if "inplace" in names else None


_C_CALLABLES = (BuiltinFunctionType, MethodDescriptorType, WrapperDescriptorType, MethodWrapperType,
                GetSetDescriptorType, MemberDescriptorType, ClassMethodDescriptorType)
_HANDLE_TORCH_FUNCTION = torch.overrides.handle_torch_function.__code__
_GENERATOR = torch.Generator
_NUMBERS = (int, float, bool, type(None))
_OP_KIND, _DYNAMIC_SHAPE_KIND = CallKind.OP, CallKind.DYNAMIC_SHAPE     # (an enum class attribute costs ~0.2 us)


class ReplacedTorchFunction(Exception):
    """The trace met a replacement of a torch function whose original it cannot call (the call
    runs eagerly: Backend.caused_by_tracing)."""


def _dispatcher(func, frame):
    """The function torch's dispatch came from, when it handed the mode `func`, Python code that is
    not torch's: torch's Python functions dispatch by their public name (`handle_torch_function(
    torch.nn.functional.pad, ...)`), so a replacement put there (`F.pad = lambda *a, **k: original(*a,
    **k) + 100`) is handed over from inside the original it called; calling it again, as a mode does,
    would apply it twice. Returns that original, None where `func` is the function dispatching (a
    library's `handle_torch_function(my_op, ...)` inside `my_op`, or through a helper it passes
    `my_op` to), or NotImplemented when the original cannot be found."""
    if frame is None or frame.f_code is not _HANDLE_TORCH_FUNCTION or frame.f_back is None:
        return None
    caller = frame.f_back
    code = caller.f_code
    if code is getattr(func, "__code__", None) or any(v is func for v in caller.f_locals.values()):
        return None
    held, seen = [func], set()
    while held:                 # what the replacement holds: __wrapped__, partial.func, its closure
        obj = held.pop()
        if id(obj) in seen or len(seen) > 64:
            continue
        seen.add(id(obj))
        if getattr(obj, "__code__", None) is code:
            return obj
        held.extend(o for o in (getattr(obj, "__wrapped__", None), getattr(obj, "func", None)) if o is not None)
        held.extend(c.cell_contents for c in getattr(obj, "__closure__", None) or () if c.cell_contents is not None)
    found = [f for f in gc.get_referrers(code) if type(f) is FunctionType and f.__code__ is code]
    return found[0] if len(found) == 1 else NotImplemented


class _Mode(TorchFunctionMode):
    def __init__(self, session):
        super().__init__()
        self.session = session
        self.infos = session.backend._infos

    def __torch_function__(self, func, types, args=(), kwargs=None):
        session = self.session
        info = self.infos.get(func) or session.backend._info(func)
        if info.metadata_only and not kwargs:       # (most calls a trace sees: x.shape, x.dtype, x.dim())
            return session.on_metadata(func, args, sys._getframe(1), info)
        if info.foreign:
            original = _dispatcher(func, sys._getframe(1))
            if original is NotImplemented:
                reason = (f"torch handed its function mode {_func_name(func)!r}, a replacement of a torch "
                          f"function, from inside the original, which it does not hold: a graph would apply "
                          f"the replacement twice")
                session.fail(reason)
                raise ReplacedTorchFunction(reason)
            if original is not None:
                func, info = original, session.backend._info(original)
        if kwargs:
            target, generator = kwargs.get("out"), kwargs.get("generator")
            if target is None and args and info.may_write and info.writes_first(args, kwargs):
                target = args[0]
            if target is not None and isinstance(target, Tensor):
                session.before_write(target)       # put back if the function must run again
            if generator is not None and type(generator) is _GENERATOR:
                session.before_write(generator)    # its draws too
        else:
            kwargs = {}
            if args and info.may_write and info.writes_first(args, kwargs) and isinstance(args[0], Tensor):
                session.before_write(args[0])
        return session.on_call(func, args, kwargs, None, info)


class TorchBackend(Backend):
    name = "torch"
    array_types = (torch.Tensor,)
    tracked_types = (torch.Tensor,)
    static_types = (torch.dtype, torch.device, torch.layout, torch.memory_format)
    live_types = (torch.Generator,)
    # (a Generator takes no proxy: torch's argument parsing wants the object itself)
    live_unseen_methods = frozenset({"initial_seed", "seed", "manual_seed", "get_state", "set_state",
                                     "graphsafe_get_state", "graphsafe_set_state", "clone_state"})
    # (swap_tensors exchanges two tensors' contents in C, by torch._C._swap_tensor_impl: no mode sees it)
    unseen_changes = frozenset({"swap_tensors", "_swap_tensor_impl"})
    sees_every_array = True
    control_flow_exceptions = tuple(filter(None, [getattr(torch.utils.checkpoint, "_StopRecomputationError", None)]))
    # (grad mode, autocast, inference mode ... have a Python __exit__ returning None: read there)
    reraising_managers = (torch.device, *filter(None, (getattr(torch._C, name, None) for name in (
        "DisableTorchFunction", "DisableTorchFunctionSubclass"))))

    def __init__(self):
        self._scalars: dict = {}
        self._infos: dict = {}      # callable -> _Info
        self._names: dict = {}
        self._homes: dict | None = None      # id(function) -> the public names it has (other_homes)
        self._aten_tags: dict = {}
        self._persistable = None    # calls a stored graph may make (allowed_target)
        self._lowering = Lowering()

    #: nn.Module's own attributes: parameters and buffers are live inputs, submodules are recorded
    #: themselves, hooks run around the traced forward, `training` is keyed
    # nn.Module's own containers; `training` is not among them: reading it is recorded (a
    # module bound by trace_graph(module) also has it in its key)
    bookkeeping_attributes = frozenset(vars(torch.nn.Module())) - {"training"}

    def caused_by_tracing(self, exc):
        return str(exc) if isinstance(exc, ReplacedTorchFunction) else super().caused_by_tracing(exc)

    def bind(self, obj):
        if not isinstance(obj, torch.nn.Module):
            return None
        if isinstance(obj, torch.jit.ScriptModule):
            raise TypeError(f"{type(obj).__name__} is a TorchScript module: its calls run in TorchScript, where "
                            f"lazytrace sees none of them; call it as it is")

        def install(traced):
            # straight into the instance dict: not a write a trace recording `obj` should replay
            # (a model reached by an outer traced function has its attribute writes recorded)
            vars(obj)["forward"] = traced
            # a copy (copy.copy shares the instance dict's values) must not run this model's graphs
            vars(obj)["__reduce_ex__"] = _CopiedUntraced(obj, traced)
            return obj

        # a forward set on the instance (accelerate's hooks, a wrapper of the user's) is what
        # Module.__call__ runs: that is traced (what an earlier trace_graph(obj) traced, again)
        from ..graph.lazy import LazyGraph
        forward = vars(obj).get("forward")
        if isinstance(forward, LazyGraph):
            forward = forward._fn
        if forward is None or isinstance(forward, (ModuleForward, _RetraceCopy)):
            forward = ModuleForward(obj)
        # every submodule's plain attributes (`self.p`, kornia's `self._params`) are read and written
        # by forward: recorded like stateful objects (reads guarded, writes replayed)
        walked = _walk(obj)
        return forward, ModuleLiveInputs(obj), install, \
            tuple(obj.modules()) if walked is None else tuple([m for _, m in walked])

    def trace_refused(self):
        # torch.utils.checkpoint's recomputation must save the tensors this call saves: a trace
        # runs the function's own calls, a graph's replay (the recomputation) other ones
        if torch.is_grad_enabled() and torch._C._autograd._top_saved_tensors_default_hooks(True) is not None:
            return ("saved-tensor hooks are active (torch.utils.checkpoint): a recomputation must save what this "
                    "call saved, and a graph's calls are not the function's; a call outside them traces")
        if _parametrize._cache_enabled:     # (a module global of torch's own code, which no trace watches)
            return _IN_PARAMETRIZE_CACHED
        return None

    @staticmethod
    def model_refused(modules):
        refused = _script_module(modules) or _fast_path_refused(modules)
        if refused is not None:
            return refused
        hooks = [h for m in modules for name in _HOOK_DICTS for h in vars(m)[name].values()]
        if any(_GLOBAL_HOOKS):
            hooks += [h for d in _GLOBAL_HOOKS for h in d.values()]
        user = next((h for h in hooks if not _torch_own(h)), None)
        if user is None:
            return None
        return (f"a module hook of the user's ({getattr(user, '__qualname__', type(user).__qualname__)}) runs at "
                f"every call of a module it calls: what it stores, logs or counts a graph would not repeat")

    def reached_model(self, obj):
        if not isinstance(obj, torch.nn.Module):
            return (), ()
        modules = tuple(obj.modules())
        if _script_module(modules) is not None:
            return modules, ()          # (its structure is in C++; model_refused says why it runs eagerly)
        # hook dicts even when empty: a hook added after the trace changes what forward computes
        return modules, tuple(c for m in modules for c in (vars(m)[name] for name in ("_parameters", "_buffers",
                                                                                     "_modules")) if c) + \
            tuple(vars(m)[name] for m in modules for name in _HOOK_DICTS)

    def model_state_reads(self, modules):
        # inside parametrize.cached(), a parametrized weight is its cache's (trace_refused); a
        # transformer traced with its fast path off (_fast_path_refused) computes the other path
        reads = []
        if any(map(_parametrize.is_parametrized, modules)):
            reads.append((_parametrize, "_cache_enabled"))
        if any(isinstance(m, _FAST_PATH_MODULES) for m in modules):
            reads.append((torch.backends.mha, "get_fastpath_enabled"))
        return tuple(reads)

    def traced_method(self, cls):
        return "forward" if issubclass(cls, torch.nn.Module) else None

    # ---- signature ----------------------------------------------------------
    @staticmethod
    def describe(t):
        # requires_grad: False, or True for a leaf and "non-leaf" for a result of autograd
        # (`x.is_leaf`, `x.grad_fn is None` are read from the key); inference tensors apart
        grad = t.requires_grad and (t.is_leaf or "non-leaf")
        if _forward_ad._current_level < 0:
            return (type(t), t.shape, t.stride(), t.dtype, t.device, grad, t.is_inference())
        # inside `forward_ad.dual_level()`: whether it carries a tangent (code branches on it, as
        # kornia's morphology does; a graph traced without one would drop it)
        return (type(t), t.shape, t.stride(), t.dtype, t.device, grad, t.is_inference(),
                _forward_ad.unpack_dual(t).tangent is not None)

    def describe_argument(self, t):
        # Python attributes set on a tensor passed in (`x.units = "km"`, read by `x.units`: no call
        # shows it), by value; not a subclass's own (MaskedTensor's `_masked_data`, which its
        # __torch_function__ reads at every call) nor `describe`'s, for parameters read live
        if not t.__dict__:
            return self.describe(t)
        items = _public_items(t)
        try:
            hash(items)
        except TypeError:
            raise Unkeyable(f"a tensor argument carries Python attributes that cannot be part of a cache key "
                            f"({', '.join(k for k, _ in items)})") from None
        return (*self.describe(t), items) if items else self.describe(t)

    def guard_conditions(self, expr, t, const):
        return [f"{expr}.shape == {const(t.shape)}", f"{expr}.stride() == {const(t.stride())}",
                f"{expr}.dtype is {const(t.dtype)}",
                f"{expr}.device == {const(t.device)}", f"{expr}.requires_grad is {t.requires_grad}"] + \
            ([f"{expr}.is_leaf is {t.is_leaf}"] if t.requires_grad else []) + \
            [f"{expr}.is_inference() is {t.is_inference()}"]

    def metadata_check(self, t):
        # (outside a dual level: describe() holds no tangent, which TensorGuards would not compare)
        return self.array_check([t]) if _forward_ad._current_level < 0 else None

    def metadata_conditions(self, expr, described, const, native=None):
        if native is None or len(described) != 7:
            return super().metadata_conditions(expr, described, const)
        grad = described[5]
        # its type, shape, strides, dtype, device, requires_grad and dispatch keys (inference) in one
        # call (~0.2 us; describe() and its tuple ~1.2 us); is_leaf as array_check_extra
        return [f"{const(native)}({expr})"] + ([f"{expr}.is_leaf is {grad is True}"] if grad else [])

    def attribute_conditions(self, expr, t, const):
        if not t.__dict__:              # (TensorGuards leaves them out)
            return [f"not {expr}.__dict__"]
        return [f"{const(_public_items)}({expr}) == {const(_public_items(t))}"]

    def array_check(self, tensors):
        """dynamo's C++ TensorGuards: dtype, device, requires_grad, sizes, strides and dispatch keys
        of several tensors in one call (about twice as fast as the same checks in Python)."""
        try:
            from torch._C._dynamo.guards import TensorGuards
            check = TensorGuards(*tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors],
                                 dynamic_dims_strides=[list(t.stride()) for t in tensors]).check
        except (ImportError, TypeError, RuntimeError):
            return None
        return check

    @functools.cache
    def array_check_distinct(self):
        """dynamo's TensorGuards.check fails on a tensor given twice (it relies on dynamo's own
        alias guards); asked of the installed torch once."""
        t = torch.zeros(())
        check = self.array_check([t, torch.zeros(())])
        return check is not None and check(t, t) is False

    def array_check_extra(self, expr, t, const):
        return [f"{expr}.is_leaf is {t.is_leaf}"] if t.requires_grad else []     # keyed, unlike in TensorGuards

    def state_conditions(self, state, const, covered=frozenset()):
        grad, (dtype, inference, autocast, modes, transform, dual, flushed, hooks, determinism) = state
        if dual:
            return ["False"]        # tangents are keyed by describe only: the general path
        # (each as few operations as it takes: these run at every cache hit; the functions return bools)
        conditions = [f"{const(_forward_ad)}._current_level < 0",
                      f"{'' if grad else 'not '}{const(torch.is_grad_enabled)}()",
                      f"{const(torch.get_default_dtype)}() is {const(dtype)}",
                      f"{const(_MIN_NORMAL)} * 0.5 {'==' if flushed else '!='} 0.0",   # _denormals_flushed() inline
                      f"{const(_deterministic)}() is False" if determinism is None else
                      f"{const(_deterministic_mode)}() == {const(determinism)}",
                      f"{const(_function_modes)}() == {const(modes)}" if modes else
                      f"not {const(torch._C._len_torch_function_stack)}()" + (
                          "" if "dispatch" in covered else f" and not {const(torch._C._len_torch_dispatch_stack)}()"),
                      f"{const(_global_hooks)}() == {const(hooks)}" if hooks else
                      " or ".join(f"{const(d)}" for d in _GLOBAL_HOOKS).join(("not (", ")"))]
        if not (inference is False and "inference" in covered):
            conditions.append(f"{const(torch.is_inference_mode_enabled)}() is {inference}")
        if "transform" not in covered:
            conditions.append(f"({const(_transform_level)}() is not None) is {transform}")
        if autocast is False:
            if "autocast" in covered:
                return conditions
            return conditions + [f"{const(torch._C._is_any_autocast_enabled)}() is False"]
        return conditions + [f"{const(_autocast_state)}() == {const(autocast)}"]

    def state_covered(self, tensors, plan):
        """dynamo's TensorGuards compares each tensor's dispatch keys under the thread's included
        and excluded key sets, which a torch.func transform (functorch's dynamic layer keys),
        inference mode (autograd keys; inference tensors too, in either direction, on any device)
        and autocast for the tensor's device (AutocastCPU ...) change: with tensors, the first two
        need no check of their own; with CPU tensors and a graph whose every array is on the CPU
        (another device's autocast cannot reach it), neither does autocast (about 0.35 us of a
        cache hit). A torch dispatch mode changes them too (the Python key)."""
        if not tensors:
            return frozenset()
        if all(t.device.type == "cpu" for t in tensors) and _cpu_only(plan):
            return frozenset({"transform", "inference", "autocast", "dispatch"})
        return frozenset({"transform", "inference", "dispatch"})

    def global_state(self):
        """Grad mode, then default dtype, inference mode, autocast, function modes, whether a
        torch.func transform runs (`vmap(lazy)` after a plain call: code may branch on it, as
        kornia's morphology and ssim do, and the per-sample shapes matched the plain call's) and
        whether a forward-AD dual level is open (then describe keys each tensor's tangent), the
        flush-denormal mode, the global module hooks and the deterministic-algorithms mode."""
        return torch.is_grad_enabled(), (torch.get_default_dtype(), torch.is_inference_mode_enabled(),
                                         _autocast_state(), _function_modes(), _transform_level() is not None,
                                         _forward_ad._current_level >= 0, _denormals_flushed(), _global_hooks(),
                                         _deterministic_mode())

    def state_reads(self):
        return _STATE_READS

    def folds_constants(self):
        # a function or dispatch mode of the user's sees every call eager makes: keyed by its type
        # only, its configuration (`Mode(k)`, an attribute set later) would be baked into a folded
        # constant, and a FlopCounterMode would count fewer calls
        return not _other_modes() and not torch._C._len_torch_dispatch_stack()

    def unseen_state(self):
        """Default dtype, inference mode, autocast, the torch.func transform level and grad mode:
        `torch.autocast`, `set_default_dtype` and `torch.func.grad(f)(x)` inside a function do not
        reach a TorchFunctionMode (a transform's result is unwrapped where no call shows it), nor
        does the grad mode a custom `torch.autograd.Function` switches off around its forward (a
        graph would replay the forward's calls under autograd: other gradients), so the tracer
        compares this before every call (autocast switches are replayed, see state_change; the
        others make the signature eager; grad mode switched by calls it sees, `torch.no_grad()`,
        is recorded), flush-denormal (`torch.set_flush_denormal`) and `use_deterministic_algorithms`."""
        return (_default_dtype(), _inference_mode(), _any_autocast() and _autocast_state(), _transform_level(),
                _grad_enabled(), _MIN_NORMAL * 0.5 == 0.0, _deterministic())   # (_denormals_flushed, inlined)

    def restore_global_state(self, state):
        torch._C._set_grad_enabled(state[0])
        if _autocast_state() != state[1][2]:
            _set_autocast(state[1][2])

    def state_change(self, before, after):
        # autocast switched inside the function (kornia's `_stack_without_autocast`, `with autocast`):
        # replayed as a call that puts autocast in the state the next call saw
        if before[:2] != after[:2] or before[3:] != after[3:]:
            return None             # default dtype, inference mode or a transform: not replayable
        return _set_autocast, (after[2],)

    # ---- tracing --------------------------------------------------------------
    def intercept(self, session):
        return _Mode(session)

    @contextmanager
    def suspended(self):
        with torch._C.DisableTorchFunction():
            yield

    def _info(self, func) -> _Info:
        info = self._infos.get(func)
        if info is None:
            info = self._infos[func] = _Info(func, self._classify(func), func in self._lowering)
        return info

    def call_facts(self, func) -> _Info:
        return self._infos.get(func) or self._info(func)

    def classify(self, func, args, kwargs) -> CallKind:
        info = self._infos.get(func) or self._info(func)
        if info.fixed:
            return info.kind
        if info.shape_check:
            name = info.name
            if name == "__getitem__" and _has_mask_index(args[1] if len(args) > 1 else None):
                return _DYNAMIC_SHAPE_KIND
            if name == "where" and len(args) + len(kwargs) == 1:
                return _DYNAMIC_SHAPE_KIND
            if name == "one_hot" and (kwargs.get("num_classes", args[1] if len(args) > 1 else -1) == -1):
                return _DYNAMIC_SHAPE_KIND
            if name == "type" and (len(args) > 1 or kwargs):    # x.type(torch.float64): a conversion
                return _OP_KIND
        if info.training is not None:
            # F.dropout(x, training=False) draws nothing: a plain call
            name, position, default = info.training
            training = kwargs.get(name, args[position] if len(args) > position else default)
            if type(training) in (bool, int) and not training:
                return _OP_KIND
        return info.kind

    def _classify(self, func) -> CallKind:
        name = _func_name(func)
        for names, kind in _KIND_BY_NAME:
            if name in names:
                return kind
        module = getattr(func, "__module__", "") or ""
        if module == "torch.nn.init":
            return CallKind.OP if name in _DETERMINISTIC_INIT else CallKind.GENERATOR
        if name in _GENERATOR_EXTRA:
            return CallKind.GENERATOR
        tags = self._tags(name)
        if torch.Tag.nondeterministic_seeded in tags:
            return CallKind.GENERATOR
        if name in _DYNAMIC_EXTRA or torch.Tag.dynamic_output_shape in tags:
            return CallKind.DYNAMIC_SHAPE
        if name in ("item", "tolist", "_local_scalar_dense"):
            return CallKind.READBACK
        return CallKind.OP if name in ("__getitem__", "__setitem__", "where", "one_hot") else CallKind.UNKNOWN

    def _tags(self, name: str) -> set:
        tags = self._aten_tags.get(name)
        if tags is None:
            tags = set()
            packet = getattr(torch.ops.aten, name, None) if name and not name.startswith("__") else None
            if packet is not None and hasattr(packet, "overloads"):
                for overload in packet.overloads():
                    tags.update(getattr(packet, overload).tags)
            self._aten_tags[name] = tags
        return tags

    run_takes_caller = True

    def run(self, func, args, kwargs, caller=None, info=None, tensors=None):
        if info is None:
            info = self._infos.get(func) or self._info(func)
        if info.reads_metadata:
            return func(*args, **kwargs), ()
        if tensors is None:         # (the tracer's on_call passes those its _lift found)
            tensors = _tensors_in(args, kwargs)
        if not tensors:
            return func(*args, **kwargs), ()
        # an in-place call that changed `self` without a data write (`requires_grad_()`) is an
        # effect on the caller's tensor that a graph must replay even when nothing reads the result
        if info.stores_arguments:
            return call_as_caller(func, args, kwargs, _CALLERS_OF_TORCH, caller), tensors[:1]
        if any(map(_IS_UNINITIALIZED, tensors)):     # (isinstance, in C)
            return func(*args, **kwargs), ()    # a lazy module materializing it (the trace has failed)
        try:
            before = list(map(_VERSION, tensors))   # (the counters, read without a Python loop)
        except RuntimeError:                        # an inference tensor: it keeps no counter
            before = [None if t.is_inference() else t._version for t in tensors]
            result = call_as_caller(func, args, kwargs, _CALLERS_OF_TORCH, caller)
            return result, [t for t, v in zip(tensors, before)
                            if (_wrote_inference(info.name, args, t, result) if v is None else t._version != v)
                            or t is result and info.underscore and args and result is args[0]]
        result = call_as_caller(func, args, kwargs, _CALLERS_OF_TORCH, caller)      # (its warnings: the caller's)
        returned_self = info.underscore and args and result is args[0]     # (changed self: requires_grad_)
        if list(map(_VERSION, tensors)) == before:
            return result, [t for t in tensors if t is result] if returned_self else ()
        return result, [t for t, v in zip(tensors, before) if t._version != v or returned_self and t is result]

    def specialize_args(self, func, args, kwargs, recorded):
        if kwargs or len(args) != 2:
            return recorded
        x, number = args
        kind = type(number)
        # (an int beyond 2 ** 53: eager rounds it to the dtype once; torch.tensor() through a double first)
        if kind is not float and (kind is not int or abs(number) > 2 ** 53) or not isinstance(x, Tensor):
            return recorded
        dtype = x.dtype
        if dtype not in _SCALAR_DTYPES or not x.is_cpu or not (self._infos.get(func) or self._info(func)).specializes:
            return recorded
        # by value, but 0.0 == -0.0 (and a NaN is unequal to itself): those by their text
        key = (kind, number, dtype) if number and number == number else (kind, repr(number), dtype)
        constant = self._scalars.get(key)
        if constant is None:
            # (kept for every later trace, in whatever mode it runs: a plain CPU tensor, not an
            # inference tensor made under the first trace's `torch.inference_mode()`, which autograd
            # refuses to save, nor a meta one under `with torch.device("meta")`: the graphs of later
            # traces raised at every replay, eager each time, and a 0-d result came out on "meta";
            # nor what a user's torch function mode around the first trace makes of torch.tensor)
            with torch._C.DisableTorchFunction(), torch.inference_mode(False):
                constant = torch.tensor(number, dtype=dtype, device="cpu")
            if type(constant) is not Tensor or not constant.is_cpu or constant.is_inference():
                return recorded     # (a dispatch mode made something else: not specialized)
            self._scalars[key] = constant
        return (recorded[0], constant)

    def replay_call(self, func, args, kwargs, recorded, recorded_kwargs):
        """A wrapper of torch_lowering's table (`F.pad`) replays as the C call its Python code made
        (`torch._C._nn.pad`) with its arguments normalized; see that module."""
        if func not in self._lowering:
            return func, recorded, recorded_kwargs
        lowered = self._lowering.lower(func, args, kwargs, recorded, recorded_kwargs, _keyed)
        return (func, recorded, recorded_kwargs) if lowered is None else (*lowered, {})

    def storage_key(self, t):
        if type(t) is torch.Generator:          # (before_write of a generator a random call was given)
            return ("generator", id(t))
        try:
            return t.untyped_storage().data_ptr() or ("empty", id(t))
        except (RuntimeError, NotImplementedError):
            return ("opaque", id(t))

    def output_facts(self, t):
        try:
            storage = t.untyped_storage().data_ptr() or ("empty", id(t))
        except (RuntimeError, NotImplementedError):
            storage = ("opaque", id(t))
        try:
            writes = t._version
        except RuntimeError:            # (write_count, inline: an inference tensor counts nothing)
            writes = None if t.is_inference() else t._version
        grad = t.requires_grad
        return ("nested" if t.is_nested else tuple(t.shape), t.dtype, t.device, grad), storage, grad, writes   # (_shape)

    def requires_grad(self, t) -> bool:
        return t.requires_grad

    def caller_owned(self, func) -> bool:
        return (self._infos.get(func) or self._info(func)).caller_owned

    def stores_arguments(self, func) -> bool:
        return (self._infos.get(func) or self._info(func)).stores_arguments

    def write_count(self, t) -> int | None:
        return None if t.is_inference() else t._version      # inference tensors count nothing

    def write_counts(self, tensors: list) -> list:
        try:
            return list(map(_VERSION, tensors))
        except RuntimeError:            # an inference tensor
            return [self.write_count(t) for t in tensors]

    def snapshot(self, t):
        """Not for a tensor autograd follows: copying its old data back would not undo its history.
        A torch.Generator: its state."""
        if type(t) is torch.Generator:
            return functools.partial(t.set_state, t.get_state())
        if t.requires_grad or t.is_inference():
            return None
        saved = t.detach().clone()

        def restore():
            with torch._C.DisableTorchFunction(), torch.no_grad():
                t.copy_(saved)
        return restore

    def clone(self, t):
        """A copy with `t`'s strides: eager's result may be a view of a constant (`c[:, 1:]`), or
        an `expand`ed one whose elements overlap (kornia's `center.expand(batch, -1)`: writing into
        it raises in eager, so the copy overlaps the same way, over a copy of the memory it spans)."""
        if t.is_contiguous():
            return t.clone()
        try:
            return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).copy_(t)
        except RuntimeError:            # overlapping elements cannot be written
            if t.requires_grad or t.numel() == 0:
                return t.clone()
            span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
            memory = t.as_strided((span,), (1,)).clone()
            return memory.as_strided(t.shape, t.stride())

    def to_numpy(self, t):
        """Views with a lazy conjugate or negation are resolved; bfloat16 becomes ml_dtypes'
        bfloat16 (what JAX and TensorFlow use), which NumPy itself lacks."""
        t = t.detach().cpu().resolve_conj().resolve_neg()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(_ml_bfloat16())
        return t.numpy()

    def from_numpy(self, data):
        if data.dtype.name == "bfloat16":
            return torch.from_numpy(data.view("int16").copy()).view(torch.bfloat16)
        return torch.from_numpy(data.copy() if not data.flags.writeable else data)

    def write_back(self, t, data):
        if t.requires_grad:
            return "it requires grad (autograd would not see the write)"
        try:
            with torch._C.DisableTorchFunction(), torch.no_grad():
                t.copy_(self.from_numpy(data))
        except RuntimeError as exc:        # an expanded tensor, an inference tensor outside inference mode
            return str(exc).splitlines()[0]
        return None

    def returned_its_input(self, func, args, result, mutated) -> bool:
        # `x.to(x.dtype)`, `.contiguous()`, `.cpu()` return self when the (keyed) metadata already
        # match; a trailing underscore marks calls that change self in place (requires_grad_ too)
        # (a dropout switched off returns its input too: kept, so the graph checks the function)
        # (`resolve_conj()`, `resolve_neg()` return self when the conjugate or negative bit, which
        # no key holds, is unset: kept, a conjugate view passed later gets its copy)
        info = self._infos.get(func) or self._info(func)
        return bool(args) and result is args[0] and not mutated and not info.underscore and info.training is None \
            and info.name not in _RESOLVES_BIT and not _other_modes()       # (a mode of the user's may do otherwise)

    def metadata_inputs(self, func, args, kwargs, raw_args=(), raw_kwargs=None) -> tuple:
        metadata = (self._infos.get(func) or self._info(func)).metadata
        if metadata == 1:
            found, raw = (args[:1], raw_args[:1]) if args else ((kwargs.get("input"),), ((raw_kwargs or {}).get("input"),))
        elif metadata == 2:
            found, raw = (args[1:2], raw_args[1:2]) if len(args) > 1 else \
                ((kwargs.get("other"),), ((raw_kwargs or {}).get("other"),))
        else:
            return ()
        # a quantized tensor's scale and zero point are in no key (`empty_like(q)` copies them)
        return () if any(isinstance(t, Tensor) and t.is_quantized for t in raw) else found

    def snapshot_rng(self):
        """The default CPU generator's state, and the CUDA ones' where CUDA has started."""
        cpu = torch.random.get_rng_state()
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None

        def restore():
            torch.random.set_rng_state(cpu)
            if cuda is not None:
                torch.cuda.set_rng_state_all(cuda)
        return restore

    def enter_rngs(self):
        # (one copy of the CPU generator's state for the snapshot and the token, not two)
        if _transform_level() is not None or torch.cuda.is_initialized():
            return super().enter_rngs()
        generator = torch.random.default_generator
        cpu = generator.get_state()
        return functools.partial(generator.set_state, cpu), [(generator, cpu.numpy().tobytes())]

    def rng_token(self, source=None):
        if source is None:
            source = torch.random.default_generator
        if not isinstance(source, torch.Generator):
            return None
        if _transform_level() is None:
            return source.get_state().numpy().tobytes()
        with torch._C._DisableFuncTorch():      # under torch.func.grad the state is no plain tensor
            return source.get_state().numpy().tobytes()

    def generator_state(self, obj, tracing):
        # a torch trace records draws from any generator (rng_sources); another framework's does not
        return None if tracing or not isinstance(obj, torch.Generator) else self.rng_token(obj)

    def rng_sources(self, func, args, kwargs) -> list:
        if not args and not kwargs:
            return [torch.random.default_generator]     # the global RNG(s) (TraceSession.activate)
        explicit = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Generator)]
        if explicit:
            return explicit
        device = kwargs.get("device")
        if device is None:
            device = next((a.device for a in args if isinstance(a, torch.Tensor)), "cpu")
        device = torch.device(device)
        if device.type == "cpu":
            return [torch.random.default_generator]
        if device.type == "cuda":
            return [torch.cuda.default_generators[device.index if device.index is not None
                                                  else torch.cuda.current_device()]]
        return []

    @staticmethod
    def brief(t) -> tuple:
        return (_shape(t), t.dtype, t.device, t.requires_grad)

    @kept_per_argument(1024)
    def format_brief(self, brief) -> str:
        shape, dtype, device, grad = brief
        shape = "x".join(map(str, shape)) or "scalar"
        device = "" if device.type == "cpu" else f" {device}"
        return f"{shape} {str(dtype).removeprefix('torch.')}{device}{' grad' if grad else ''}"

    def example_array(self, shape, dtype, seed):
        try:
            dt = getattr(torch, dtype)
        except AttributeError:
            dt = None
        if not isinstance(dt, torch.dtype):
            raise ValueError(f"unknown torch dtype {dtype!r} (e.g. float32, float64, int64, uint8, bool)")
        g = torch.Generator().manual_seed(seed)
        if dt is torch.bool:
            return torch.rand(shape, generator=g) > 0.5
        if dt.is_floating_point or dt.is_complex:
            return torch.rand(shape, generator=g, dtype=dt)
        return torch.randint(0, 10, shape, generator=g, dtype=dt)

    @kept_per_argument(64)
    def describe_global_state(self, state):
        grad, (dtype, inference, autocast, modes, transform, dual, flushed, hooks, determinism) = state
        autocast = ", ".join(f"{device} {str(dt).removeprefix('torch.')}" for device, dt in autocast) \
            if autocast else "off"
        return {"torch.is_grad_enabled()": repr(grad), "torch.get_default_dtype()": repr(dtype),
                "torch.is_inference_mode_enabled()": repr(inference), "autocast": autocast} | \
            ({"torch function modes": ", ".join(map(str, modes))} if modes else {}) | \
            ({"torch.func transform": "active"} if transform else {}) | \
            ({"forward-mode AD": "dual level open"} if dual else {}) | \
            {"torch.set_flush_denormal": repr(flushed)} | \
            ({"global module hooks": str(sum(map(len, hooks)))} if hooks else {}) | \
            {"torch.use_deterministic_algorithms": "off" if determinism is None else
             "on (warn_only=%r, fill_uninitialized_memory=%r)" % determinism}

    # ---- persistent cache ----------------------------------------------------------
    distribution = "torch"
    persist_roots = ("torch", "torch._C", "torch.nn.functional", "torch.linalg", "torch.fft", "torch.special",
                     "torch.functional", "torch._C._nn", "torch._C._linalg", "torch._C._fft", "torch._C._special")

    def target_ref(self, func):
        name = _func_name(func)
        owner = getattr(func, "__self__", None)
        if getattr(func, "__name__", None) == "__get__" and hasattr(owner, "__objclass__"):
            return f"torch:Tensor.{name}.__get__"          # a property such as x.T
        if getattr(func, "__qualname__", "").startswith(("TensorBase.", "Tensor.")):
            return f"torch:Tensor.{name}"
        qualified = self._qualified_name(func)
        if qualified.startswith(_VARIABLE_FUNCTIONS):
            return f"torch._C:{qualified.removeprefix('torch._C.')}"
        module, _, short = qualified.rpartition(".")
        return f"{module}:{short}" if module in self.persist_roots else None

    def allowed_target(self, obj) -> bool:
        if _func_name(obj) in _ESCAPE:
            return False
        if self._persistable is None:
            from torch.overrides import get_overridable_functions
            allowed = {f for funcs in get_overridable_functions().values() for f in funcs}
            allowed.update(getattr(torch._C, n) for n in _STATE if hasattr(torch._C, n))
            allowed.update(getattr(torch, n) for n in _CREATION | _PRIVATE_OPS if hasattr(torch, n))
            allowed.update(_LOWERED_TARGETS)
            self._persistable = allowed
        try:
            return obj in self._persistable
        except TypeError:
            return False

    def encode_static(self, obj):
        if isinstance(obj, torch.device):
            return ["device", str(obj)]
        if type(obj) is torch.Size:
            return ["size", list(obj)]
        if isinstance(obj, (torch.dtype, torch.layout, torch.memory_format)):
            return ["torch", repr(obj).removeprefix("torch.")]
        return None

    def decode_static(self, data):
        kind, text = data
        if kind == "device" and isinstance(text, str):
            return torch.device(text)
        if kind == "size" and isinstance(text, list) and all(type(d) is int for d in text):
            return torch.Size(text)
        obj = getattr(torch, text, None) if kind == "torch" and isinstance(text, str) else None
        if not isinstance(obj, (torch.dtype, torch.layout, torch.memory_format)):
            raise ValueError(f"not a torch dtype, layout or memory format: {data!r}")
        return obj

    def array_spec(self, t):
        if type(t) is not torch.Tensor or t.layout is not torch.strided or (t.requires_grad and not t.is_leaf) \
                or t.is_quantized or t.is_conj() or t.is_neg():
            return None
        return [list(t.shape), list(t.stride()), self.encode_static(t.dtype), str(t.device), t.requires_grad,
                t.is_inference()]

    def synthetic_array(self, spec, start_devices=False):
        shape, stride, dtype, device, grad, inference = spec
        if not all(type(d) is int and d >= 0 for d in [*shape, *stride]) or len(shape) != len(stride) \
                or type(grad) is not bool or type(inference) is not bool or type(device) is not str:
            raise ValueError(f"malformed tensor description {spec!r:.80}")
        dtype, device = self.decode_static(dtype), torch.device(device)
        if device.type != "cpu" and not start_devices and not (device.type == "cuda" and torch.cuda.is_initialized()):
            raise RuntimeError(f"a tensor on {device} would start its runtime (prewarm=True allows it)")
        with torch.inference_mode(inference):
            t = torch.empty_strided(shape, stride, dtype=dtype, device=device)
            t.fill_(True if dtype is torch.bool else 0.5 if dtype.is_floating_point or dtype.is_complex else 1)
        return t.requires_grad_() if grad else t

    def save_arrays(self, arrays, metadata):
        from safetensors.torch import save
        devices = {name: str(t.device) for name, t in arrays.items()}
        tensors = {name: t.detach().to("cpu", copy=True).contiguous() for name, t in arrays.items()}
        return save(tensors, metadata={**metadata, "torch.devices": json.dumps(devices)})

    def load_arrays(self, data, metadata):
        from safetensors.torch import load
        devices = json.loads(metadata.get("torch.devices", "{}"))
        return {name: t.to(devices[name]) if devices.get(name, "cpu") != "cpu" else t
                for name, t in load(data).items()}

    # ---- code generation ---------------------------------------------------------
    def call_syntax(self, func):
        name = _func_name(func)
        if getattr(func, "__name__", None) == "__get__" and hasattr(getattr(func, "__self__", None), "__objclass__"):
            return ("attribute", name)
        syntax = operator_syntax(name)
        if syntax is not None:
            return syntax
        qualname = getattr(func, "__qualname__", "")
        if qualname.startswith(("TensorBase.", "Tensor.")):
            return ("method", name)
        return ("function", self._qualified_name(func))

    def other_homes(self, func) -> tuple[str, ...]:
        # the public namespaces' attributes by identity, indexed once (a stale entry is harmless:
        # function_homes keeps only the attributes holding the function when a graph is made)
        if self._homes is None:
            self._homes = ({}, _namespace_index())
        known, index = self._homes
        homes = known.get(id(func))
        if homes is None:
            homes = known[id(func)] = () if isinstance(func, type) else \
                tuple(f"{ns}.{name}" for ns, namespace, last, ids in index
                      for name in _holding(func, namespace, last, ids) if not name.startswith("__"))
        return homes

    def _qualified_name(self, func) -> str:
        name = self._names.get(func)
        if name is None:
            import importlib
            short = getattr(func, "__name__", repr(func))
            name = f"{getattr(func, '__module__', None) or 'torch'}.{short}"
            for ns in _NAMESPACES:
                try:
                    mod = importlib.import_module(ns)
                except ImportError:
                    continue
                if getattr(mod, short, None) is func:
                    name = f"{ns}.{short}"
                    break
            else:
                if getattr(torch._C._VariableFunctions, short, None) is func:
                    name = f"{_VARIABLE_FUNCTIONS}{short}"      # _VF.einsum: torch.einsum is its wrapper
            self._names[func] = name
        return name

    def literal(self, obj):
        if isinstance(obj, (torch.dtype, torch.layout, torch.memory_format)):
            return repr(obj)
        return None

    def namespace(self):
        return {"torch": torch}

    def compile(self, fn, plan):
        """Inductor, called directly, for graphs it can take as they are; torch.compile otherwise.

        lazytrace already checks a graph's exact signature before calling it, so dynamo's own
        guards (tens of microseconds per call on a small input) are not needed: the graph is
        traced to aten with make_fx on its first call and compiled by inductor's compile_fx.
        Graphs with guards (Python control flow), random ops, grad-mode changes or in-place
        writes, calls that need autograd, and graphs returning a torch.Size go through
        torch.compile, which handles them."""
        from ..graph.ir import Kind
        direct = not plan.visible_effects and not any(
            n.kind in (Kind.GUARD, Kind.GENERATOR, Kind.STATE, Kind.SETATTR, Kind.GETATTR) for n in plan.nodes)
        return InductorGraph(fn, direct=direct, repeatable=not plan.visible_effects)


class InductorGraph:
    """A generated graph function compiled on its first call (see TorchBackend.compile).

    `direct`: inductor's compile_fx on a make_fx trace, called without dynamo; otherwise (or
    when the call needs autograd) torch.compile. `repeatable` (no visible effects): after
    compiling, the compiled and the plain generated form are timed on that call's inputs and the
    faster is kept: compiled code wins on graphs of many small ops, plain code on one or two.
    `choice` says what runs: "inductor", "torch.compile" or "python". A first compiled call that
    raises (a compiler's failure, or the function's own error) leaves the plain generated form for
    the later calls, with the exception in `error` and a warning logged: compiling is not tried at
    every call (~10-40 ms each), and this call's exception goes where the graph's go (the original
    function decides)."""

    def __init__(self, fn, *, direct: bool, repeatable: bool):
        self.fn = fn
        self.direct = direct
        self.repeatable = repeatable
        self.choice = None
        self.error = None
        self._impl = None

    def __call__(self, *leaves):
        impl = self._impl
        if impl is not None:
            return impl(*leaves)
        try:
            impl = self._build(leaves)
            result = impl(*leaves)
        except Exception as exc:
            self._impl, self.choice, self.error = self.fn, "python", exc
            logging.getLogger("lazytrace").warning(
                "the compiled form of %s failed on its first call (%s: %s); its plain generated form runs instead",
                getattr(self.fn, "__name__", "a graph"), type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
            raise
        self._impl = impl
        return result

    def _build(self, leaves):
        compiled, self.choice = self._compile(leaves)
        if not self.repeatable:
            return compiled                        # calling it again to time it would repeat effects
        if _median_ns(self.fn, leaves) <= _median_ns(compiled, leaves):
            self.choice = "python"
            return self.fn
        return compiled

    def _compile(self, leaves):
        from torch._inductor.compile_fx import compile_fx
        from torch.fx.experimental.proxy_tensor import make_fx
        from torch.utils._pytree import tree_flatten, tree_leaves, tree_unflatten
        if not self.direct or any(isinstance(t, torch.Tensor) and t.requires_grad for t in leaves):
            return torch.compile(self.fn, dynamic=False), "torch.compile"
        result = self.fn(*leaves)
        outputs, spec = tree_flatten(result)
        if any(isinstance(t, torch.Tensor) and t.requires_grad for t in outputs):
            return torch.compile(self.fn, dynamic=False), "torch.compile"   # closure parameters
        if any(type(x) is torch.Size for x in tree_leaves(result, is_leaf=lambda x: type(x) is torch.Size)):
            # (`return y, x.shape`: make_fx gives the Size back as a plain tuple, and AOT autograd
            # refuses the output spec: the graph raised at every call, which then ran eagerly)
            return torch.compile(self.fn, dynamic=False), "torch.compile"
        compiled = compile_fx(make_fx(self.fn)(*leaves), list(leaves))

        def run_compiled(*args):
            return tree_unflatten(tree_leaves(compiled(*args)), spec)
        return run_compiled, "inductor"


def _median_ns(fn, args, calls=15):
    import time
    sync = torch.cuda.synchronize if any(isinstance(a, Tensor) and a.is_cuda for a in args) else None
    fn(*args)
    samples = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        fn(*args)
        if sync is not None:
            sync()
        samples.append(time.perf_counter_ns() - start)
    return sorted(samples)[calls // 2]


def _public_items(t) -> tuple:
    """((name, value), ...) of the Python attributes set on a tensor that are not its class's own."""
    return tuple([(k, v) for k, v in t.__dict__.items() if not k.startswith("_")])


class ModuleForward:
    """The module's own forward, called through its class (picklable, unlike a closure)."""

    def __init__(self, module):
        self.module = module
        self.__qualname__ = f"{type(module).__qualname__}.forward"
        self.__name__ = "forward"

    def __call__(self, *args, **kwargs):
        return type(self.module).forward(self.module, *args, **kwargs)

    @property
    def __signature__(self):
        import inspect
        return inspect.signature(type(self.module).forward.__get__(self.module))

    def _lazytrace_code_holder(self):
        """What LazyGraph checks the code and defaults of at each call: the class's forward."""
        return _ClassForward(self.module)


class _ClassForward:
    """The code and defaults of a module's class's forward, read at each access: a reload tool
    (IPython's autoreload) edits the class's methods in place, `Model.forward.__defaults__ = ...`
    changes what graphs baked (a forward rebound on the class is keyed: ModuleLiveInputs)."""

    __slots__ = ("module",)

    def __init__(self, module):
        self.module = module

    @property
    def __code__(self):
        return getattr(type(self.module).forward, "__code__", None)

    @property
    def __defaults__(self):
        return getattr(type(self.module).forward, "__defaults__", None)

    @property
    def __kwdefaults__(self):
        return getattr(type(self.module).forward, "__kwdefaults__", None)


class _CopiedUntraced:
    """`__reduce_ex__` in the __dict__ of a module traced by trace_graph(module), where copy.copy,
    copy.deepcopy and pickle look it up: the module reduces as its class makes it do, without the
    forward lazytrace installed (which runs this module's graphs: a shallow copy shares the values
    of the dict) nor this hook. A copy of a LazyGraph of the module's own forward gets one of its
    own (_RetraceCopy, with the same options); another traced forward (a Graph) is left out, and
    the copy runs its class's forward."""

    def __init__(self, module, installed):
        self.module, self.installed = module, installed

    def __call__(self, protocol):
        from dataclasses import replace

        from ..graph.lazy import LazyGraph
        module = self.module
        rv = type(module).__reduce_ex__(module, protocol)
        if not (isinstance(rv, tuple) and len(rv) >= 3 and isinstance(rv[2], dict)):
            return rv
        state = rv[2]
        forward = state.get("forward")
        ours = forward is self.installed
        state = {k: v for k, v in state.items() if not (v is self or k == "forward" and ours)}
        if not (ours and isinstance(forward, LazyGraph) and isinstance(forward._fn, ModuleForward)
                and forward._fn.module is module and len(rv) >= 2 and isinstance(rv[1], tuple)):
            return (rv[0], rv[1], state, *rv[3:])
        _, (_, options, signature_args, name, max_signatures, _) = forward.__reduce__()
        own = {id(m) for m in module.modules()}        # bind() added them: the copy's are its own
        options = replace(options, stateful=tuple(o for o in options.stateful if id(o) not in own))
        return (_rebuilt_traced, (rv[0], rv[1], (options, signature_args, name, max_signatures)), state, *rv[3:])


def _rebuilt_traced(build, args, config):
    """A copy of a traced module, made by its class's reduction: its forward is traced anew for it."""
    module = build(*args)
    vars(module)["forward"] = _RetraceCopy(module, config)
    return module


class _RetraceCopy:
    """The forward of a copy of a traced module until it is first used: then a LazyGraph of the
    copy's own forward, with the original's options, is installed (its state is set by then)."""

    def __init__(self, module, config):
        self.module, self.config = module, config

    def _bind(self):
        from ..graph.lazy import LazyGraph
        from ..graph.signature import Signature
        module = self.module
        if vars(module).get("forward") is not self:
            return vars(module).get("forward") or ModuleForward(module)
        options, signature_args, name, max_signatures = self.config
        from . import get_backend
        fn, extra, install, objects = get_backend("torch").bind(module)
        lazy = LazyGraph(fn, options=dataclasses.replace(options, stateful=options.stateful + objects),
                         signature=Signature(*signature_args), name=name, max_signatures=max_signatures,
                         extra=extra)
        lazy.preload()
        install(lazy)
        return lazy

    def __call__(self, *args, **kwargs):
        return self._bind()(*args, **kwargs)

    def __getattr__(self, name):
        if name.startswith("__") or name in ("module", "config"):
            raise AttributeError(name)
        return getattr(self._bind(), name)

    @property
    def __signature__(self):
        return ModuleForward(self.module).__signature__


#: a module's hooks, which Module.__call__ runs around forward (a submodule's are inside the trace)
_HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")


def _script_module(modules) -> str | None:
    """Why a TorchScript module among `modules` cannot be traced, if there is one."""
    script = next((m for m in modules if isinstance(m, torch.jit.ScriptModule)), None)
    return None if script is None else (f"a TorchScript module ({type(script).__name__}) runs its calls in "
                                        f"TorchScript, where lazytrace sees none of them")


def _torch_own(hook) -> bool:
    """Whether a module hook is torch's own (weight_norm, spectral_norm, prune, lazy modules): its
    effects are calls and attribute writes a trace records."""
    module = getattr(hook, "__module__", None) or type(hook).__module__
    return isinstance(module, str) and module.startswith("torch.")


class ModuleLiveInputs:
    """Parameters and buffers are graph inputs read at every call; the submodules and their
    train/eval mode are keyed."""

    def __init__(self, module):
        self.module = module

    def __call__(self):
        module = self.module
        d = vars(module)
        if "_parameters" in d and not d.get("_modules") and _walks_as_module(type(module)):
            modules = (module,)     # (most kornia modules: ~2x faster than the general walk)
            tensors = (*_members(modules, "_parameters"), *_members(modules, "_buffers"))
            hooks = tuple([tuple(h) for h in (d["_forward_pre_hooks"], d["_forward_hooks"], d["_backward_pre_hooks"],
                                              d["_backward_hooks"]) if h])
        else:
            walked = _walk(module)
            if walked is None:
                modules = tuple(module.modules())
                refused = _script_module(modules)       # (its parameters are in C++: _walk leaves it here)
                if refused is not None:
                    raise Unkeyable(refused)
                tensors = tuple(module.parameters()) + tuple(module.buffers())
            else:
                modules = tuple([m for _, m in walked])
                tensors = tuple(_members(modules, "_parameters")) + tuple(_members(modules, "_buffers"))
            refused = _fast_path_refused(modules)
            if refused is not None:
                raise Unkeyable(refused)
            hooks = tuple([tuple(d) for m in modules for d in (m._forward_pre_hooks, m._forward_hooks,
                                                               m._backward_pre_hooks, m._backward_hooks) if d])
        if _parametrize._cache_enabled and any(map(_parametrize.is_parametrized, modules)):
            raise Unkeyable(_IN_PARAMETRIZE_CACHED)     # (eager reuses the block's cached weights)
        if hooks and len(modules) > 1 or any(_GLOBAL_HOOKS):   # (the module's own hooks run around its LazyGraph)
            refused = TorchBackend.model_refused(modules[1:])
            if refused is not None:
                raise Unkeyable(refused)
        try:
            described = tuple([TorchBackend.describe(t) for t in tensors])
        except RuntimeError:
            if any(isinstance(t, _Uninitialized) for t in tensors):
                raise Unkeyable("the module has an uninitialized parameter or buffer (a lazy module such as "
                                "nn.LazyLinear before its first call materializes it)") from None
            raise
        # the submodules themselves (by identity): a graph replays what the ones it saw did, so a
        # submodule replaced after the trace (`aug._param_generator = ...`) is a new signature (their
        # ids first: a class's __eq__ may call another object equal; the key holds the modules, so
        # their ids are not reused while it is cached); the module's class, whose forward
        # ModuleForward calls (`model.__class__ = Other` after the trace), and that forward
        # (`Model.forward = patched` after the trace: the graphs are the old forward's)
        cls = own_class(module)
        key = (tuple([id(m) for m in modules]), modules, tuple([m.training for m in modules]), described, hooks,
               cls, cls.forward)
        return key, tensors

    def shareable(self):
        """(structure, modules, held) for sharing graphs with other objects of the module's class
        (graph/shared.py), or None: the structure is the modules' classes and names, their
        parameters' and buffers' names and metadata, and their plain attributes (numbers,
        strings, dtypes and containers of them by value, functions and classes by identity,
        tensors by metadata: read live); no hooks. `held`: ids of the objects they hold, which
        a shared graph must not hold. Objects holding anything else share nothing."""
        module = self.module
        named, walked = _named_modules(module)
        held: set = set()
        parts = []
        for name, m in named:
            d = vars(m)
            if d["_forward_pre_hooks"] or d["_forward_hooks"] or d["_backward_pre_hooks"] or d["_backward_hooks"]:
                return None
            attributes = []
            for attribute in _plain_attributes(d):
                value = d[attribute]
                tp = type(value)
                if tp is bool or tp is int or tp is str:
                    attributes.append((attribute, (tp, value)))         # (as _configuration describes them)
                    continue
                if tp is _CopiedUntraced or attribute == "forward" and _forward_of(value, m):
                    continue            # its own forward, traced (a LazyGraph installed on it), and how it copies
                described = _configuration(value, held)
                if described is _UNSHAREABLE:
                    return None
                attributes.append((attribute, described))
            parts.append((name, type(m), _presence(d["_parameters"]), _presence(d["_buffers"]),
                          _presence(d["_modules"]), tuple(sorted(d["_non_persistent_buffers_set"])),
                          tuple(attributes)))
        tensors = []
        for name, t in _named_tensors(module, named, walked):
            held.add(id(t))
            tensors.append((name, TorchBackend.describe(t)))
        held.update(id(m) for _, m in named)
        # the code of its class's forward (edited in place by a reload tool: graphs of the old code)
        # and its defaults (`Model.forward.__defaults__ = ...`: baked like arguments; by value)
        forward = getattr(type(module), "forward", None)
        defaults = [*(getattr(forward, "__defaults__", None) or ()), *(getattr(forward, "__kwdefaults__", None) or {}).items()]
        defaults = tuple([_configuration(value, set()) for value in defaults])
        if any(d is _UNSHAREABLE for d in defaults):
            return None
        code = (getattr(forward, "__code__", None), defaults)
        return (tuple(parts), tuple(tensors), code), tuple(m for _, m in named), frozenset(held)

    def held(self) -> frozenset:
        """ids of the objects the module and its submodules hold in plain attributes now."""
        held: set = set()
        for _, m in _named_modules(self.module)[0]:
            d = vars(m)
            for attribute in _plain_attributes(d):
                if type(d[attribute]) is not _CopiedUntraced:
                    _configuration(d[attribute], held)
        return frozenset(held)

    def describe(self, key) -> dict[str, str]:
        """{path: description} of a key made by __call__, for explaining retraces."""
        module = self.module
        _, _, training, tensors, _, _, _ = key
        named, walked = _named_modules(module)
        out = {f"self{'.' if n else ''}{n}.training": repr(t) for (n, _), t in zip(named, training)}
        names = [n for n, _ in _named_tensors(module, named, walked)]
        from . import get_backend
        backend = get_backend("torch")
        out.update((f"self.{n}", backend.format_brief((d[1], d[3], d[4], d[5]))) for n, d in zip(names, tensors))
        return out


#: the attribute names of a module's __dict__ (in order) -> those that are not nn.Module's own
_PLAIN_NAMES: dict = {}


def _plain_attributes(d: dict) -> tuple:
    """The names in a module's __dict__ `d` that are not nn.Module's bookkeeping, in order (the
    objects of a class mostly share one layout of names: it is looked at once)."""
    names = tuple(d)
    plain = _PLAIN_NAMES.get(names)
    if plain is None:
        if len(_PLAIN_NAMES) > 4096:        # (attributes set per object: bounded)
            _PLAIN_NAMES.clear()
        plain = _PLAIN_NAMES[names] = tuple(n for n in names if n not in TorchBackend.bookkeeping_attributes)
    return plain


def _presence(members: dict) -> tuple:
    """((name, whether it is None), ...) of a module's _parameters, _buffers or _modules."""
    return tuple([(k, v is None) for k, v in members.items()]) if members else ()


_MODULE_WALKS = (torch.nn.Module.named_modules, torch.nn.Module.named_parameters, torch.nn.Module.named_buffers)


def _walks_as_module(tp: type) -> bool:
    """Whether objects of `tp` are walked as nn.Module walks them (no named_modules,
    named_parameters or named_buffers of its own)."""
    return (tp.named_modules, tp.named_parameters, tp.named_buffers) == _MODULE_WALKS


def _walk(module):
    """[(name, module)] as `module.named_modules()` gives them (pre-order, each module once), walked
    without its generators (a module's every call reads it: ~3x faster); None if a class in the
    tree defines its own walk (named_modules, named_parameters or named_buffers), which is then
    the one to use."""
    out, memo, stack = [], set(), [("", module)]
    while stack:
        prefix, m = stack.pop()
        if id(m) in memo:
            continue
        if not _walks_as_module(type(m)) or "_parameters" not in vars(m):
            return None         # (a TorchScript module keeps its parameters in C++)
        memo.add(id(m))
        out.append((prefix, m))
        children = m._modules
        if children:
            stack.extend(reversed([(f"{prefix}.{n}" if prefix else n, c) for n, c in children.items()
                                   if c is not None]))
    return out


def _named_modules(module) -> tuple:
    """(named modules, whether _walk found them: False if the module's own methods did)."""
    walked = _walk(module)
    return (tuple(walked), True) if walked is not None else (tuple(module.named_modules()), False)


def _members(modules, attribute):
    """The tensors of `attribute` (_parameters or _buffers) of each module, each once: what
    parameters() or buffers() give for the modules `_walk` found."""
    seen = set()
    for m in modules:
        for t in vars(m)[attribute].values():
            if t is not None and id(t) not in seen:
                seen.add(id(t))
                yield t


def _named_tensors(module, named, walked) -> list:
    """[(name, tensor)] as named_parameters() then named_buffers() give them; `named, walked`:
    what _named_modules gave."""
    if not walked:
        return [*module.named_parameters(), *module.named_buffers()]
    out = []
    for attribute in ("_parameters", "_buffers"):
        seen = set()
        for prefix, m in named:
            for k, t in vars(m)[attribute].items():
                if t is not None and id(t) not in seen:
                    seen.add(id(t))
                    out.append((f"{prefix}.{k}" if prefix else k, t))
    return out


_UNSHAREABLE = object()
_CONFIG_LITERALS = (bool, int, float, complex, str, bytes, type(None), type(Ellipsis), range)


def _configuration(value, held: set, depth=0):
    """A plain attribute of a module as part of the structure its class's objects share graphs
    by (ModuleLiveInputs.shareable), or _UNSHAREABLE; ids of the objects in it go to `held`."""
    tp = type(value)
    if tp is int or tp is bool or tp is str:
        return (tp, value)              # (what _value_key gives them)
    if tp in _CONFIG_LITERALS:
        return _value_key(value)
    if isinstance(value, (enum.Enum, *TorchBackend.static_types)):
        return (tp, value)
    if isinstance(value, (type, FunctionType, BuiltinFunctionType, ModuleType)):
        return ("is", value)            # (module-level functions and classes: the same for every object)
    if tp in (list, dict, set) or isinstance(value, torch.Tensor):
        held.add(id(value))             # (a graph holding one would hold this object's: tuples are values)
    if isinstance(value, torch.Tensor):
        return ("tensor", TorchBackend.describe(value))
    if depth > 4:
        return _UNSHAREABLE
    if tp in (tuple, list, set, frozenset) or isinstance(value, tuple) and hasattr(tp, "_fields"):
        items = [_configuration(x, held, depth + 1) for x in value]
        if any(x is _UNSHAREABLE for x in items):
            return _UNSHAREABLE
        return (tp, frozenset(items) if tp in (set, frozenset) else tuple(items))
    if tp is dict:
        items = [(_configuration(k, held, depth + 1), _configuration(v, held, depth + 1)) for k, v in value.items()]
        if any(x is _UNSHAREABLE for kv in items for x in kv):
            return _UNSHAREABLE
        return (dict, tuple(items))
    return _UNSHAREABLE


def _forward_of(value, module) -> bool:
    """Whether `value` is the module's own forward traced (a LazyGraph of ModuleForward(module))."""
    fn = getattr(value, "_fn", None)
    return type(fn) is ModuleForward and fn.module is module


#: where torch's C functions live when a torch namespace holds a Python wrapper by their name (_VF.einsum)
_VARIABLE_FUNCTIONS = "torch._C._VariableFunctions."


def _keyed(obj) -> bool:
    """Whether a graph fixes the shape, dtype and device of each array in a recorded argument:
    not for a value of data-dependent shape, nor for an array the code reached by itself."""
    if isinstance(obj, Value):
        return not obj.dynamic and obj.source is not Source.EXTERNAL
    if type(obj) in (list, tuple):
        for x in obj:
            if type(x) not in _NUMBERS and not _keyed(x):
                return False
    return True


def _tensors_in(args, kwargs) -> list:
    if not kwargs and all(map(_IS_TENSOR, args)):
        return list(args)       # (`x + y`, `torch.relu(x)`: tested in C)
    found = []
    for a in args:
        if isinstance(a, Tensor):
            found.append(a)
        elif type(a) is list or type(a) is tuple:
            found.extend([x for x in a if isinstance(x, Tensor)])
    if kwargs:
        for a in kwargs.values():
            if isinstance(a, Tensor):
                found.append(a)
            elif type(a) is list or type(a) is tuple:
                found.extend([x for x in a if isinstance(x, Tensor)])
    return found


_IS_TENSOR = Tensor.__instancecheck__      # isinstance(obj, Tensor), for map()
_IS_UNINITIALIZED = _Uninitialized.__instancecheck__       # a lazy module's parameter or buffer

#: in-place operators (their names start with "__i", as `__index__` and `__int__` do too)
_INPLACE_OPERATORS = {f"__i{op}__" for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul",
                                               "and", "or", "xor", "lshift", "rshift", "div")}


def _wrote_inference(name, args, t, result) -> bool:
    """Inference tensors (made under `torch.inference_mode()`) keep no version counter: a call
    is taken to write `t` when it returns it (`add_`, `out=t`, `relu(t, inplace=True)`), is named
    as an in-place call, or assigns into it; never fewer writes than happened."""
    if result is t:
        return True
    return bool(args) and args[0] is t and (name.endswith("_") and not name.startswith("__")
                                             or name == "__setitem__" or name in _INPLACE_OPERATORS)


def _has_mask_index(index) -> bool:
    for i in index if isinstance(index, tuple) else (index,):
        if isinstance(i, Tensor) and i.dtype in _MASK_DTYPES:
            return True
    return False


_MASK_DTYPES = (torch.bool, torch.uint8)



def _ml_bfloat16():
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError("a bfloat16 tensor can only be converted with to= when ml_dtypes is installed "
                        "(it comes with jax and tensorflow)") from None
    return ml_dtypes.bfloat16


BACKEND_CLASS = TorchBackend

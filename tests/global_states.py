"""Global settings a compiled fast-path check must notice: each as a context manager entering
a state other than the default one (tests/test_hit_path.py, tests/test_guards.py)."""
import contextlib

import pytest
import torch
import torch.autograd.forward_ad as fwad
from torch.overrides import TorchFunctionMode


class _Mode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _default_dtype():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@contextlib.contextmanager
def _global_hook():
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, args, out: None)
    try:
        yield
    finally:
        handle.remove()


@contextlib.contextmanager
def _flush_denormal():
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU has no flush-denormal mode")
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


@contextlib.contextmanager
def _cuda_autocast():
    """Autocast switched on for CUDA (a setting of this thread, whether or not CUDA is here)."""
    torch.set_autocast_enabled("cuda", True)
    try:
        yield
    finally:
        torch.set_autocast_enabled("cuda", False)


#: name -> a context manager entering that global state (the one the check was compiled in: the default)
STATES = {
    "grad mode": torch.no_grad,
    "default dtype": _default_dtype,
    "inference mode": torch.inference_mode,
    "autocast": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    "CUDA autocast": _cuda_autocast,
    "torch function mode": _Mode,
    "default device": lambda: torch.device("meta"),
    "forward AD": fwad.dual_level,
    "global module hook": _global_hook,
    "flush denormal": _flush_denormal,
}


def call_in(state: str, fn):
    """fn() with `state` entered ("functorch transform": inside torch.func.vmap)."""
    if state == "functorch transform":
        out = []
        torch.func.vmap(lambda y: (out.append(fn()), y)[1])(torch.zeros(1))
        return out[0]
    with STATES[state]():
        return fn()


ALL_STATES = [*STATES, "functorch transform"]

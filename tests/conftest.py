import numpy as np
import pytest
import torch


class Framework:
    """Array helpers so behavioural tests run the same on every backend."""

    def __init__(self, name):
        self.name = name
        self.xp = torch if name == "torch" else np

    def rand(self, *shape, seed=None):
        rng = np.random.default_rng(seed)
        data = rng.random(shape, dtype=np.float32)
        return torch.from_numpy(data) if self.name == "torch" else data

    def array(self, values, dtype="float32"):
        data = np.asarray(values, dtype=dtype)
        return torch.from_numpy(data) if self.name == "torch" else data

    def numpy(self, a):
        return a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)

    def equal(self, a, b):
        a, b = self.numpy(a), self.numpy(b)
        return a.shape == b.shape and a.dtype == b.dtype and np.allclose(a, b, equal_nan=True)


@pytest.fixture(params=["torch", "numpy"])
def fw(request):
    return Framework(request.param)


@pytest.fixture
def torch_fw():
    return Framework("torch")


pytest_plugins = ["pytester"]

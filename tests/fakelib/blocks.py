"""Classes: a torch.nn.Module and a plain class."""
import torch


class Doubler(torch.nn.Module):
    """Multiplies by a learnable weight, then doubles."""
    kind = "doubler"

    def __init__(self, n=3):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))
        self.register_buffer("offset", torch.zeros(n))

    def forward(self, x):
        return (x * self.weight + self.offset) * 2

    @staticmethod
    def twice(v):
        return v * 2

    @classmethod
    def create(cls, n):
        return cls(n)

    @property
    def size(self):
        return self.weight.shape[0]


class Scaler:
    """A plain class whose methods do array work."""

    def __init__(self, factor):
        self.factor = factor

    def apply(self, x):
        return x * self.factor

    def current(self):
        return self.factor

    def apply_current(self, x):
        return x * self.current()

    def __call__(self, x):
        return self.apply(x) + 1

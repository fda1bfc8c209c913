"""The graph's data: values, nodes and what a trace produced. No framework imports.

A trace records every framework call as a `Node` whose arguments hold `Value`
placeholders where arrays were; passes then decide what to keep, what to fold
into constants and what to guard, and `codegen` turns the result into Python.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Kind(enum.Enum):
    """What a recorded call is, as far as the passes care."""

    OP = "op"                # pure array computation (may mutate its arguments)
    GENERATOR = "generator"  # draws random numbers: advances RNG state
    GUARD = "guard"          # reads a Python value back out of arrays
    STATE = "state"          # changes framework global state (grad mode ...)
    GETATTR = "getattr"      # reads an attribute of a stateful object
    SETATTR = "setattr"      # writes an attribute of a stateful object


class Source(enum.Enum):
    INPUT = "input"        # an array leaf of the call's arguments
    NODE = "node"          # produced by a recorded call
    EXTERNAL = "external"  # an array the function reached without it being passed in


class Value:
    """One array (or stateful object) seen during a trace."""

    # (no __slots__: the attributes most Values keep at their default are read from the class, so
    # a trace's one Value per call output sets 7 attributes, not 11)
    name = ""               # variable name in generated code
    dynamic = False         # shape depends on array contents (nonzero, masks...)
    path = ""               # for inputs: where in the call's arguments ("args[0]")
    caller_owned = False    # an array the caller holds besides the inputs (`x.grad`): writes are visible

    def __init__(self, source: Source, node: "Node | None" = None, index: Any = None,
                 meta: Any = None, storage: Any = None, foldable: bool = False, obj: Any = None):
        self.source = source
        self.node = node          # the call that made it, while the trace runs; after it, a graph
                                  # keeps the call alone for its constants (tracer._calls_only), else None
        self.index = index        # position in the node's output (None: the whole output)
        self.meta = meta          # for display: backend.brief() of an array, or a type name
        self.storage = storage    # aliasing key: values sharing memory share it
        self.foldable = foldable  # depends on no input: can become a cached constant
        self.obj = obj            # the traced object itself, kept only where needed

    def __repr__(self):
        return f"<Value {self.name or self.source.value} {self.meta or ''}>"


@dataclass(eq=False, init=False)
class Node:
    """One recorded framework call. (No __slots__: the fields most calls leave at their default
    are read from the class; a trace makes one Node per recorded call, setting 8 attributes.)"""

    position: int
    kind: Kind
    target: Any                     # the callable that was called
    args: tuple                     # arguments, arrays replaced by Values
    kwargs: dict
    inputs: list                    # the Values among args/kwargs, in order
    input_versions: list | tuple | bytes    # storage version of each input when the call ran (a sequence of ints)
    outputs: list = field(default_factory=list)   # Values produced
    result_structure: Any = None    # "single", or the length of a flat tuple/list
    mutated: list | tuple = ()      # Values whose memory it wrote (a list: set where there are any)
    expected: Any = None            # for guards: the value read back at trace time
    foldable: bool = False
    wrapper: Any = None             # the callable the code called, when `target` is the lower-level
                                    # call doing its work (Backend.replay_call: F.pad -> torch._C._nn.pad)
    guarded_by_except: bool = False  # made inside a try block of the traced code with an except clause
                                     # (or a with block whose manager may swallow the error)

    def __init__(self, position, kind, target, args, kwargs, inputs, input_versions, **fields):
        # (written out: a trace makes one per call, and the generated one tests each default factory;
        # the other fields, given by keyword, are set only where given: their defaults are the class's)
        self.position = position
        self.kind = kind
        self.target = target
        self.args = args
        self.kwargs = kwargs
        self.inputs = inputs
        self.input_versions = input_versions
        self.outputs = []
        if fields:
            for name, value in fields.items():
                if name not in _NODE_OPTIONAL:
                    raise TypeError(f"Node() got an unexpected keyword argument {name!r}")
                setattr(self, name, value)

    @property
    def has_side_effect(self) -> bool:
        return self.kind in (Kind.GENERATOR, Kind.STATE, Kind.SETATTR) or bool(self.mutated)


_NODE_OPTIONAL = frozenset({"outputs", "result_structure", "mutated", "expected", "foldable", "wrapper",
                            "guarded_by_except"})


@dataclass
class TraceResult:
    """Everything a finished trace knows, before passes run."""

    nodes: list
    inputs: list                  # Values of the flat input leaves, in order
    output_structure: Any         # the function's result with Values in place of arrays
    untraceable: str | None       # why this signature must run eagerly, if it must


_STATE = Kind.STATE


class SignatureMismatch(TypeError):
    """A Graph was called with arguments of another signature than it was traced for."""


class Graph:
    """A traced function: straight-line generated Python over framework calls.

    Call it with arguments of the signature it was traced with (same
    structure, shapes, dtypes, Python values); `source` is its code,
    `nodes` the calls it makes, `constants` what it cached, `dropped` what
    the trace removed.
    """

    def __init__(self, *, name, build, key, signature, original, plan, backend, extra=None, state=None):
        self.__name__ = name
        self.key = key
        self.backend = backend
        self._build = build          # () -> (source, function, constants, aliases); run on first use
        self._generated = None
        self._signature = signature
        self._original = original
        self._extra = extra
        self._state = state
        self._plan = plan
        self.replay_safe = not plan.visible_effects
        self.has_state_changes = False
        for n in plan.nodes:        # (a loop: `Kind.STATE` is read through EnumType.__getattr__)
            if n.kind is _STATE:
                self.has_state_changes = True
                break

    def _generate(self):
        if self._generated is None:
            self._generated = self._build()
        return self._generated

    @property
    def fn(self):
        """The generated function: takes the call's array leaves, returns the outputs."""
        generated = self._generated or self._generate()
        return generated[1]

    @property
    def source(self) -> str:
        return self._generate()[0]

    @property
    def constants(self) -> dict:
        """Cached arrays (folded sub-expressions, external arrays) by their name in `source`."""
        return self._generate()[2]

    @property
    def aliases(self) -> dict:
        return self._generate()[3]

    @property
    def nodes(self) -> list[Node]:
        return list(self._plan.nodes)

    @property
    def dropped(self) -> dict:
        """What the trace removed: dead calls (by name) and calls folded into constants."""
        return {"pruned": [_target_name(n.target) for n in self._plan.pruned],
                "folded": self._plan.folded}

    def __call__(self, *args, **kwargs):
        key, leaves, _ = self._signature.key(args, kwargs)
        if self._extra is not None:
            extra_key, extra_leaves = self._extra()
            key = (key, extra_key)
            leaves.extend(extra_leaves)
        if key != self.key:
            raise SignatureMismatch(
                f"graph {self.__name__!r} was traced for another signature; use "
                f"trace_graph({self.__name__}) without args= for a LazyGraph that traces each signature")
        from .codegen import GuardFailed
        try:
            return self.fn(*leaves)
        except GuardFailed:
            if self.has_state_changes:
                self.backend.restore_global_state(self._state)
            return self._original(*args, **kwargs)

    # ---- views (lazytrace/view.py) ----------------------------------------------------
    def to_dot(self) -> str:
        """Graphviz DOT source: inputs, calls, constants, guards, outputs (needs no `dot` program)."""
        from .. import view
        return view.to_dot(self)

    def render(self, path, format: str | None = None):
        """Write a picture (.svg, .png, .pdf by the suffix) laid out by Graphviz; returns the path."""
        from .. import view
        return view.render(self, path, format)

    def show(self, path=None):
        """Write an interactive self-contained HTML view (in a notebook, also display it);
        returns the file's path (a new file in the temp directory unless `path` is given)."""
        from .. import view
        return view.show(self, path)

    def __str__(self):
        return self.source

    def __repr__(self):
        return f"<lazytrace.Graph {self.__name__}: {len(self._plan.nodes)} calls>"


def _target_name(target) -> str:
    return getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target)

"""Graphs shared by the objects of one traced class (a module made per call reuses the graphs
of the ones before it).

Each object keeps its own LazyGraph (its hit path is unchanged); on a miss of a new signature,
the object asks its class's `SharedGraphs` for graphs traced by another object of the same
structure: same class, submodules, parameter and buffer names and metadata, no hooks, and
equal plain attributes (numbers, strings, tuples ... by value; functions and classes by
identity; arrays by their metadata, read live). Such a graph is kept as a template whose
references to the tracing object and its submodules are placeholders, rebound to the new
object's at adoption; it is replayed only if all its guards (the attribute reads recorded
when it was traced) pass for the new object, else the object traces its own. A graph that
holds anything else of the object's (an attribute's array, a sampler object) is not shared.
The templates hold no object, so objects made per call are freed as before.
"""
from __future__ import annotations

import gc
import threading
from collections import OrderedDict
from types import FunctionType, MethodType

from . import codegen
from .homes import function_homes, held_code
from .ir import Graph, Node, Value
from .passes import Plan
from .tracer import _Same, _SameContents, _SameMethod

#: pool keys (signature and structure) kept per class, and templates per key
MAX_KEYS = 64
MAX_TEMPLATES = 4

_SAME_TYPES = (_Same, _SameMethod)
_LITERALS = frozenset({bool, int, float, complex, str, bytes, type(None), type(Ellipsis), range, type})


class Unshareable(Exception):
    """The plan holds an object of the instance that no placeholder stands for."""


class _Slot:
    """Stands for the object's i-th module in a template."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index

    def __repr__(self):
        return f"<module {self.index} of the object>"


class _BoundSlot:
    """Stands for a method bound to the object's i-th module."""

    __slots__ = ("func", "slot")

    def __init__(self, func, slot):
        self.func, self.slot = func, slot


class SharedGraphs:
    """Templates of the graphs traced by the objects of one class, for one method."""

    def __init__(self, name: str):
        self.name = name
        self._templates: OrderedDict = OrderedDict()      # (signature key, structure) -> [Template]
        self._lock = threading.Lock()

    @staticmethod
    def describe(extra):
        """(structure, modules, held) of the object `extra` reads live inputs from, or None."""
        shareable = getattr(extra, "shareable", None)
        try:
            described = shareable() if shareable is not None else None
            hash(described)
        except Exception:       # noqa: BLE001 - an attribute that cannot be described: not shared
            return None
        return described

    @staticmethod
    def describe_held(extra) -> frozenset:
        """ids of what the object holds now (after a trace: what its method set on it too)."""
        held = getattr(extra, "held", None)
        return held() if held is not None else frozenset()

    def candidates(self, described, key) -> list:
        """The templates of the signature `key` of an object described, newest first."""
        with self._lock:
            return list(self._templates.get((key[0], described[0]), ()))

    def publish(self, described, key, graph, held_now) -> bool:
        """Keep `graph` (traced by the object described) as a template, if it can be."""
        structure, modules, held = described
        index = {id(m): (m, _Slot(i)) for i, m in enumerate(modules)}
        try:
            plan = rebind(graph._plan, lambda obj: _detach(obj, index), held | held_now, deep=True)
        except Unshareable:
            return False
        pool_key = (key[0], structure)
        with self._lock:
            templates = self._templates.pop(pool_key, [])
            templates.insert(0, Template(plan, graph.backend, graph.__name__))
            del templates[MAX_TEMPLATES:]
            self._templates[pool_key] = templates
            while len(self._templates) > MAX_KEYS:
                self._templates.popitem(last=False)
        return True

    def clear(self):
        with self._lock:
            self._templates.clear()

    def __len__(self):
        return sum(len(t) for t in self._templates.values())


class Template:
    """A graph's plan with placeholders for the object's modules; its code is generated once, and
    each object adopting it gets that code over a copy of its constants with its own modules."""

    def __init__(self, plan: Plan, backend, name: str):
        self.plan, self.backend, self.name = plan, backend, name
        self.described = None       # {argument path: description} of its signature, made at the first adoption
        plan.function_homes = function_homes(backend, plan)
        plan.held_code = held_code(plan, plan.function_homes)
        self._generated = None
        self._lock = threading.Lock()

    def graph(self, modules, *, key, signature, original, extra, state) -> Graph:
        """A Graph of this template for the object whose modules are `modules`."""
        if self._generated is None:
            with self._lock:
                if self._generated is None:
                    source, fn, constants, aliases = codegen.generate(self.backend, self.plan, self.plan.inputs,
                                                                      self.plan.output_structure, self.name)
                    namespace = fn.__globals__
                    placed = [name for name, value in namespace.items() if _holds_slot(value)]
                    self._generated = (source, fn, constants, aliases, placed)
        source, fn, constants, aliases, placed = self._generated
        namespace = dict(fn.__globals__)
        for name in placed:
            namespace[name] = _attach(namespace[name], modules)
        own = FunctionType(fn.__code__, namespace, fn.__name__)
        namespace[fn.__name__] = own
        constants = {name: namespace.get(name, value) for name, value in constants.items()}
        generated = (source, own, constants, aliases)
        return Graph(name=self.name, build=lambda: generated, key=key, signature=signature, original=original,
                     plan=self.plan, backend=self.backend, extra=extra, state=state)


def _holds_slot(value, depth=0) -> bool:
    tp = type(value)
    if tp is _Slot or tp is _BoundSlot:
        return True
    if depth < 4 and (tp is tuple or tp is list or tp is frozenset):
        return any(_holds_slot(x, depth + 1) for x in value)
    return tp in _SAME_TYPES and _holds_slot(value.obj, depth + 1)


def _attach(value, modules):
    """`value` with the placeholders in it replaced by the object's modules."""
    tp = type(value)
    if tp is _Slot:
        return modules[value.index]
    if tp is _BoundSlot:
        return MethodType(value.func, modules[value.slot.index])
    if tp is tuple or tp is list or tp is frozenset:
        return tp(_attach(x, modules) for x in value)
    if tp in _SAME_TYPES:
        return tp(_attach(value.obj, modules))
    return value


_NOT_MAPPED = object()


def _detach(obj, index):
    found = index.get(id(obj))
    if found is not None and found[0] is obj:
        return found[1]
    if type(obj) is MethodType:
        found = index.get(id(obj.__self__))
        if found is not None and found[0] is obj.__self__:
            return _BoundSlot(obj.__func__, found[1])
    return _NOT_MAPPED


def rebind(plan: Plan, mapped, held: frozenset, deep=False) -> Plan:
    """A copy of `plan` whose objects `mapped(obj)` replaces (it returns _NOT_MAPPED for the
    others, kept as they are); Unshareable if it holds an object whose id is in `held`, or, with
    `deep`, an object of another kind that refers to one of those or to a mapped one (a partial)."""
    values: dict = {}
    nodes: dict = {}
    memo: dict = {}

    def sub(x):
        tp = type(x)
        if tp in _LITERALS:
            return x
        if tp is Value:
            return value(x)
        key = id(x)
        if key in memo:
            return memo[key][1]
        new = mapped(x)
        if new is _NOT_MAPPED:
            new = x
            if key in held:
                raise Unshareable(f"holds a {tp.__name__} of the object")
            if tp is tuple or tp is list or tp is set or tp is frozenset:
                items = [sub(i) for i in x]
                if any(a is not b for a, b in zip(items, x)):
                    new = tp(items)
            elif isinstance(x, tuple):              # a namedtuple, torch.Size
                items = [sub(i) for i in x]
                if any(a is not b for a, b in zip(items, x)):
                    new = tp(*items) if hasattr(tp, "_fields") else tp(items)
            elif tp is dict:
                items = {sub(k): sub(v) for k, v in x.items()}
                if any(a is not b for a, b in zip(items.values(), x.values())) or \
                        any(a is not b for a, b in zip(items, x)):
                    new = items
            elif tp is slice:
                new = slice(sub(x.start), sub(x.stop), sub(x.step))
            elif tp is _Same or tp is _SameMethod:
                inner = sub(x.obj)
                if inner is not x.obj:
                    new = tp(inner)
            elif tp is _SameContents:
                if sub(x.obj) is not x.obj:
                    raise Unshareable("checks the contents of an object of the object's")
            elif tp is MethodType:
                if id(x.__self__) in held or mapped(x.__self__) is not _NOT_MAPPED:
                    raise Unshareable("holds a method of an object of the object's")
            elif deep:
                for inner in gc.get_referents(x):
                    if id(inner) in held or type(inner) not in _LITERALS and mapped(inner) is not _NOT_MAPPED:
                        raise Unshareable(f"holds a {tp.__name__} referring to the object")
        memo[key] = (x, new)
        return new

    def leaf(obj):
        """An array or object the graph holds (a constant, a module's globals): not looked into."""
        new = mapped(obj)
        if new is not _NOT_MAPPED:
            return new
        if id(obj) in held:
            raise Unshareable(f"holds a {type(obj).__name__} of the object")
        return obj

    def stripped(node):
        """A node the plan does not run (dropped, folded): its call only, for views."""
        try:
            target = sub(node.target)
        except Unshareable:
            target = None
        return Node(node.position, node.kind, target, (), {}, [], [], result_structure=node.result_structure,
                    foldable=node.foldable)

    def value(v):
        found = values.get(id(v))
        if found is not None:
            return found
        new = Value(v.source, None, v.index, v.meta, v.storage, v.foldable, None)
        values[id(v)] = new
        new.obj = leaf(v.obj) if v.obj is not None else None
        new.name, new.dynamic, new.path, new.caller_owned = v.name, v.dynamic, v.path, v.caller_owned
        if v.node is not None:
            new.node = nodes.get(id(v.node)) or stripped(v.node)
        return new

    kept = []
    for n in plan.nodes:                # (made before their outputs are copied: Value.node)
        copy = Node(n.position, n.kind, n.target, (), {}, [], list(n.input_versions),
                    result_structure=n.result_structure, foldable=n.foldable)
        nodes[id(n)] = copy
        kept.append((n, copy))
    for n, copy in kept:
        copy.target = sub(n.target)
        copy.wrapper = sub(n.wrapper) if n.wrapper is not None else None
        copy.args = sub(n.args)
        copy.kwargs = sub(n.kwargs)
        copy.inputs = [value(v) for v in n.inputs]
        copy.outputs = [value(v) for v in n.outputs]
        copy.mutated = [value(v) for v in n.mutated]
        copy.expected = sub(n.expected)
    return Plan([c for _, c in kept], [value(v) for v in plan.constants],
                {value(v) for v in plan.cloned_outputs}, folded=plan.folded,
                pruned=[stripped(n) for n in plan.pruned], untraceable=plan.untraceable,
                visible_effects=plan.visible_effects, inputs=[value(v) for v in plan.inputs],
                output_structure=sub(plan.output_structure), packages=plan.packages,
                code_globals=plan.code_globals, class_code=plan.class_code, imported=plan.imported,
                framework_functions=plan.framework_functions,
                modules=plan.modules, reads_environment=plan.reads_environment,
                constant_state=plan.constant_state, function_homes=None)


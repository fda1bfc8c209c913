"""Plan -> readable straight-line Python source -> function.

The source is registered with `linecache`, so tracebacks through a graph show
its lines. Each intermediate is deleted after its last use, so memory peaks no
higher than in eager code. Framework callables and constants are bound as
globals of the generated function (one dict lookup per use).
"""
from __future__ import annotations

import functools
import itertools
import keyword
import linecache
import math
import operator
import re
import sys
import types

from .ir import Kind, Source, Value
from .passes import Plan, output_values
from .homes import function_homes, held_changed, held_code
from .reads import MISSING, code_held, read_cell, read_context, read_global, read_mro, read_unbound

_SINGLETONS = (True, False, None)

_counter = itertools.count()


class GuardFailed(Exception):
    """Raised by generated code when a value read back at trace time differs now."""


_LITERAL_TYPES = (bool, int, str, bytes, type(None))
_INLINE_TYPES = (bool, int, float, str, type(None))      # a context variable's value checked inline


class _Emitter:
    def __init__(self, backend, plan: Plan, inputs: list[Value]):
        self.backend = backend
        self.plan = plan
        self.namespace: dict = dict(backend.namespace())
        self.namespace["_GuardFailed"] = GuardFailed
        self.constants: dict[str, object] = {}
        self.aliases: dict[str, str] = {}          # alias -> qualified name, for the header
        self.comments: list[str] = []              # other lines of the header (what a name stands for)
        self._alias_of: dict[int, str] = {}
        self._const_of: dict[int, str] = {}
        for i, v in enumerate(inputs):
            v.name = f"a{i}"
        for i, v in enumerate(plan.constants):
            v.name = self._const(v.obj, f"c{i}")

    # ---- names ---------------------------------------------------------------
    def _const(self, obj, name=None) -> str:
        key = id(obj)
        if key in self._const_of:
            return self._const_of[key]
        name = name or f"k{len(self._const_of)}"
        self._const_of[key] = name
        self.namespace[name] = obj
        self.constants[name] = obj
        return name

    def _alias(self, func, qualname: str) -> str:
        key = id(func)
        if key not in self._alias_of:
            base = re.sub(r"\W", "_", qualname.rsplit(".", 1)[-1]) or "fn"
            if keyword.iskeyword(base) or base in self.namespace:
                base = f"{base}_{len(self._alias_of)}"
            self._alias_of[key] = base
            self.namespace[base] = func
            self.aliases[base] = qualname
        return self._alias_of[key]

    # ---- expressions -----------------------------------------------------------
    def expr(self, obj) -> str:
        if isinstance(obj, Value):
            return obj.name
        tp = type(obj)
        if tp in _LITERAL_TYPES:
            return repr(obj)
        if tp is float:
            return repr(obj) if math.isfinite(obj) else self._const(obj)
        if tp is complex and all(math.isfinite(p) and p != 0.0 for p in (obj.real, obj.imag)):
            return repr(obj)        # `(-0-0j)` would read back as 0j: such numbers are bound as constants
        if obj is Ellipsis:
            return "..."
        if tp is tuple:
            inner = ", ".join(self.expr(x) for x in obj)
            return f"({inner},)" if len(obj) == 1 else f"({inner})"
        if tp is list:
            return "[" + ", ".join(self.expr(x) for x in obj) + "]"
        if isinstance(obj, tuple) and hasattr(tp, "_fields"):          # a namedtuple
            return f"{self._const(tp)}({', '.join(self.expr(x) for x in obj)})"
        if tp is dict and all(type(k) in _LITERAL_TYPES for k in obj):
            return "{" + ", ".join(f"{k!r}: {self.expr(v)}" for k, v in obj.items()) + "}"
        if tp is slice:
            return f"slice({self.expr(obj.start)}, {self.expr(obj.stop)}, {self.expr(obj.step)})"
        text = self.backend.literal(obj)
        return text if text is not None else self._const(obj)

    def _index(self, idx) -> str:
        def one(x):
            if type(x) is slice:
                parts = ["" if x.start is None else self.expr(x.start),
                         "" if x.stop is None else self.expr(x.stop)]
                if x.step is not None:
                    parts.append(self.expr(x.step))
                return ":".join(parts)
            return self.expr(x)
        if type(idx) is tuple:
            return ", ".join(one(x) for x in idx) if idx else "()"
        return one(idx)

    def call(self, node) -> str:
        style, text = self.backend.call_syntax(node.target)
        args, kwargs = node.args, node.kwargs
        rest = [self.expr(a) for a in args[1:]] + [f"{k}={self.expr(v)}" for k, v in kwargs.items()]
        if style == "operator" and len(args) == 2 and not kwargs:
            return f"{self.expr(args[0])} {text} {self.expr(args[1])}"
        if style == "roperator" and len(args) == 2 and not kwargs:
            if type(args[1]) in (int, float, complex, bool) or not \
                    getattr(node.target, "__name__", "").startswith("__r"):  # number <op> array: array.__rop__
                return f"{self.expr(args[1])} {text} {self.expr(args[0])}"
            return f"{self.expr(args[0])}.{node.target.__name__}({self.expr(args[1])})"
        if style == "unary" and len(args) == 1:
            return f"abs({self.expr(args[0])})" if text == "abs" else f"{text}{self.expr(args[0])}"
        if style == "getitem" and len(args) == 2:
            return f"{self.expr(args[0])}[{self._index(args[1])}]"
        if style == "setitem" and len(args) == 3:
            return f"{self.expr(args[0])}[{self._index(args[1])}] = {self.expr(args[2])}"
        if style == "attribute" and len(args) == 1:
            return f"{self.expr(args[0])}.{text}"
        if style == "method" and args:
            return f"{self.expr(args[0])}.{text}({', '.join(rest)})"
        qualname = text if style == "function" else getattr(node.target, "__qualname__", "fn")
        everything = [self.expr(a) for a in args] + [f"{k}={self.expr(v)}" for k, v in kwargs.items()]
        return f"{self._alias(node.target, qualname)}({', '.join(everything)})"


def generate(backend, plan: Plan, inputs: list[Value], output_structure, name: str, check_functions=True):
    """Return (source, function, constants, aliases). `check_functions`: first check that the
    module attributes the graph's functions were found at still hold them."""
    em = _Emitter(backend, plan, inputs)
    fn_name = re.sub(r"\W", "_", name.rsplit(".", 1)[-1]).strip("_") or "graph"
    if fn_name[0].isdigit() or keyword.iskeyword(fn_name):
        fn_name = f"_{fn_name}"
    body: list[str] = []
    outputs_needed = {id(v) for v in output_values(output_structure)}

    last_use: dict[int, int] = {}
    for i, node in enumerate(plan.nodes):
        for v in node.inputs:
            if v.source is Source.NODE and not v.foldable:
                last_use[id(v)] = i
    used = set(last_use) | outputs_needed
    counter = itertools.count()
    for i, node in enumerate(plan.nodes):
        for v in node.outputs:
            v.name = f"v{next(counter)}" if id(v) in used else "_"
        if node.kind is Kind.GUARD:
            body.append(_guard_line(node, em, i))
        else:
            body.append(_assign(node, em.call(node)))
        dead = [v.name for v in _values_in(plan.nodes, i) if last_use.get(id(v)) == i
                and id(v) not in outputs_needed]
        if dead:
            body.append(f"del {', '.join(dead)}")

    if check_functions:
        homes = plan.function_homes if plan.function_homes is not None else function_homes(backend, plan)
        wrappers = {id(n.wrapper) for n in plan.nodes if n.wrapper is not None}
        held = plan.held_code if plan.held_code is not None else held_code(plan, homes)
        body[:0] = _replaced_function_checks(em, homes, wrappers) + _replaced_code_checks(em, held)
    if plan.constant_state is not None:
        body[:0] = [f"if not ({test}): raise _GuardFailed({what!r})"
                    for test, what in backend.constant_checks(plan.constant_state, em._const)]

    returned = [v for v in output_values(output_structure) if v in plan.cloned_outputs]
    copies = {}         # a constant returned more than once is copied once: the results are one array, as in eager
    for v in returned:
        if returned.count(v) > 1 and v not in copies:
            em.namespace["_clone"] = backend.clone
            copies[v] = f"r{len(copies)}"
            body.append(f"{copies[v]} = _clone({v.name})")
    ret = _output_expr(em, output_structure, plan.cloned_outputs, copies)
    body.append(f"return {ret}")
    while fn_name in em.namespace:      # `def one_hot` must not rebind the one_hot it calls
        fn_name = f"{fn_name}_graph"
    header = [f"# {alias} = {qual}" for alias, qual in em.aliases.items() if alias != qual]
    header += [f"# {v.name}: {v.meta}" for v in plan.constants      # module globals, closure cells ...
               if v.source is Source.EXTERNAL and isinstance(v.meta, str) and " " in v.meta]
    header += [f"# {comment}" for comment in em.comments]
    params = ", ".join(v.name for v in inputs)
    source = "\n".join(header + [f"def {fn_name}({params}):"] + [f"    {line}" for line in body]) + "\n"
    exec(_compiled(source, fn_name), em.namespace)
    # (taken out of its own globals: a reference cycle else, which would keep a dropped graph and
    # its constants until a collection)
    return source, em.namespace.pop(fn_name), em.constants, em.aliases


#: source -> its code object: a retrace for new shapes, or another LazyGraph of the same function,
#: often generates the same source, whose compile() is most of the cost of generating a graph.
#: Each graph runs the code in its own namespace (its constants); tracebacks show that source.
_COMPILED: dict = {}
_COMPILED_SIZE = 256


def _compiled(source: str, fn_name: str):
    code = _COMPILED.get(source)
    if code is None:
        filename = f"<lazytrace {fn_name} #{next(_counter)}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        code = compile(source, filename, "exec")
        if len(_COMPILED) >= _COMPILED_SIZE:
            _COMPILED.clear()
        _COMPILED[source] = code
    return code


class Checked:
    """A compiled graph body preceded by the graph's checks of globals and closure variables
    (`checks`: (index in the plan, node) pairs) and of the places holding the code it ran
    (`homes`: function_homes; the compiler baked that code in). A compiler runs Python lines
    once, while it traces, so these run here at every call. Other attributes are the body's
    (`choice` ...)."""

    __slots__ = ("fn", "_items", "_homes", "_held")

    def __init__(self, fn, checks: list, homes=(), held=()):
        self.fn = fn
        self._items = [(index, node.target, tuple(a.obj if isinstance(a, Value) else a for a in node.args),
                        node.expected) for index, node in checks]
        self._homes = tuple((namespace, attribute, func, f"{module_name}.{attribute}")
                            for module_name, namespace, attribute, func in homes)
        self._held = held

    def __call__(self, *leaves):
        for namespace, attribute, func, name in self._homes:
            if namespace.get(attribute, MISSING) is not func:
                raise GuardFailed(f"code the traced function read was replaced: {name}")
        if self._held and held_changed(self._held):
            raise GuardFailed(replaced_code(self._held))
        for index, reader, args, expected in self._items:
            if expected != reader(*args):
                raise GuardFailed(index)
        return self.fn(*leaves)

    def __getattr__(self, name):
        return getattr(self.fn, name)


def read_metadata(array, backend, native=None):
    """What a graph checks at its entry of an array the function reached by itself (a global, a
    closure variable, a module's parameter; TraceSession.add_external): describe(), as a cache
    key holds it for an input. Resized, transposed, given another array's `.data` ... since the
    trace, it fails: then the metadata of every array computed from it is as fixed as an input's."""
    return backend.describe(backend.unwrap(array))


read_metadata.hoistable = True      # reads an array the function reached, not one the graph computed: passes.py
read_metadata.label = lambda node: f"metadata of {node.args[1].format_brief(node.inputs[0].meta) or 'an array'}"
read_metadata.describe = lambda node: (f"the metadata (shape, strides, dtype ...) of an array the function reached "
                                       f"by itself (traced as {node.args[1].format_brief(node.inputs[0].meta)}) "
                                       f"changed since the trace")


def node_lines(backend, plan: Plan, inputs: list[Value]) -> list[str]:
    """The line of generated source each node of `plan` became (for views; run after `generate`,
    which names the values)."""
    em = _Emitter(backend, plan, inputs)
    return [_guard_line(n, em, i) if n.kind is Kind.GUARD else _assign(n, em.call(n))
            for i, n in enumerate(plan.nodes)]


def special_float(expected) -> bool:
    """A float a plain `!=` cannot check: 0.0 equals -0.0 (yet `1 / x` tells them apart), NaN
    equals nothing."""
    return isinstance(expected, float) and (expected == 0.0 or expected != expected)


def same_float(expected: float, got) -> bool:
    """`got` is the float `expected` is, sign of zero and NaN included."""
    if not isinstance(got, float):
        return False
    if expected != expected:
        return got != got
    return got == 0.0 and math.copysign(1.0, got) == math.copysign(1.0, expected)


def _guard_line(node, em, index: int) -> str:
    expected = node.expected
    if node.target is read_global and expected[1] in _SINGLETONS \
            and type(expected[1]) in (bool, type(None)):
        # a flag: `if c0.get('_KORNIA_CHECKS_ENABLED', _MISSING) is not True` (type and value at once)
        em.namespace["_MISSING"] = MISSING
        namespace, name = node.args
        return f"if {em.expr(namespace)}.get({name!r}, _MISSING) is not {expected[1]!r}: raise _GuardFailed({index})"
    if node.target is read_context and expected[2] is None and type(expected[1]) in _INLINE_TYPES \
            and expected[0] is type(expected[1]) and not special_float(expected[1]):
        # `SCALE.get()`: `if c1.get(_MISSING) is not True`, `if type(_v := c1.get(_MISSING)) is not float or _v != 3.0`
        em.namespace["_MISSING"] = MISSING
        get = f"{em.expr(node.args[0])}.get(_MISSING)"
        if expected[1] in _SINGLETONS and type(expected[1]) in (bool, type(None)):
            return f"if {get} is not {expected[1]!r}: raise _GuardFailed({index})"
        em.namespace["_type"] = type
        return (f"if _type(_v := {get}) is not {em._const(type(expected[1]))} or _v != {em.expr(expected[1])}: "
                f"raise _GuardFailed({index})")
    if node.target is read_metadata:
        # inline: `if not (k3(c0))` (torch's native check), or `k3 == describe(c0)`
        backend, array = em.backend, em.expr(node.args[0])
        if backend.tracer_class is not None:
            conditions = [f"{em._const(expected)} == {em._const(backend.describe)}({em._const(backend.unwrap)}({array}))"]
        else:
            conditions = backend.metadata_conditions(array, expected, em._const, node.args[2])
        return f"if not ({' and '.join(conditions)}): raise _GuardFailed({index})"
    if node.target is read_cell and code_held(expected):
        # a closure variable holding code (`nonlocal helper` rebinds it): cells compare by their
        # contents, and code by identity (an emptied cell is unequal): `if c2 != k4` (~25 ns)
        return f"if {em.expr(node.args[0])} != {em._const(types.CellType(expected[1].obj))}: raise _GuardFailed({index})"
    if node.target is read_unbound and expected is True:
        namespace, names = em.expr(node.args[0]), sorted(node.args[1])   # read_unbound inline: no call
        return f"if {' or '.join(f'{name!r} in {namespace}' for name in names)}: raise _GuardFailed({index})"
    if node.target is read_mro:     # the tuple type.__mro__ holds: the same object until __bases__ is set
        return f"if {em.expr(node.args[0])}.__mro__ is not {em._const(expected)}: raise _GuardFailed({index})"
    call = em.call(node)
    if special_float(expected):
        em.namespace["_same_float"] = same_float
        return f"if not _same_float({em.expr(expected)}, {call}): raise _GuardFailed({index})"
    if expected is True:
        test = f"not ({call})"
    elif expected is False:
        test = f"{call}"
    else:
        test = f"{em.expr(expected)} != ({call})"      # expected first: its __eq__ decides (tracer._Same)
    return f"if {test}: raise _GuardFailed({index})"


def _replaced_function_checks(em, homes, wrappers=frozenset()) -> list[str]:
    """A line per module (or class) holding code the graph ran (function_homes): each place must
    still hold the same object (`torch.sin = my_sin`, a helper monkeypatched after the trace: eager
    would call the new one, so the signature traces again). ~25 ns a place (a dict item, `is`);
    where a module holds _TOGETHER or more objects that compare by identity alone (functions,
    modules, classes of a plain metaclass: `type(f).__eq__ is object.__eq__`), they are read by
    one itemgetter and compared as a tuple, in C (kornia's gaussian_blur2d: 19 helpers of its
    module in one test). `wrappers`: ids of the functions lowered calls stand for, named in the
    header like the functions called."""
    modules: dict = {}      # id(namespace) -> (its name, namespace, pairs): two classes of one name (a
    for module_name, namespace, attribute, func in homes:      # factory's) are two namespaces
        alias = em._alias_of.get(id(func)) or (em._alias(func, f"{module_name}.{attribute}") if id(func) in wrappers
                                               else em._const(func))     # (a function no call names: a constant)
        modules.setdefault(id(namespace), (module_name, namespace, []))[2].append((attribute, alias, func))
    lines, table = [], []
    if modules:
        em.namespace["_replaced"] = functools.partial(replaced, table)
    for module_name, namespace, pairs in modules.values():
        i = len(lines)
        name = f"_globals{i}"
        em.namespace[name] = namespace
        table.append((namespace, module_name, [(attribute, func) for attribute, _, func in pairs]))
        together = [(attribute, func) for attribute, _, func in pairs if type(func).__eq__ is object.__eq__]
        if len(together) < _TOGETHER:
            together = []
        tests = [f"_get{i}({name}) != _held{i}"] if together else []
        if together:
            em.namespace[f"_get{i}"] = operator.itemgetter(*(attribute for attribute, _ in together))
            em.namespace[f"_held{i}"] = tuple(func for _, func in together)
        alone = [(attribute, alias) for attribute, alias, func in pairs if (attribute, func) not in together]
        tests += [f"{name}[{attribute!r}] is not {alias}" for attribute, alias in alone]
        checked = f": {len(together)} names in _get{i}" if together else ""
        what = "entries" if namespace is sys.modules else "globals" if type(namespace) is dict else "attributes"
        em.comments.append(f"{name}: {what} of {module_name}{checked}")
        lines.append(f"if {' or '.join(tests)}: raise _GuardFailed(_replaced({i}))")
    if lines:   # one deleted since (`del Sub.scale`, eager finds Base.scale; monkeypatch.delattr): a miss,
        # not a KeyError from the graph (a try costs nothing in Python 3.11 until it catches)
        lines = ["try:", *(f"    {line}" for line in lines), "except KeyError:",
                 f"    raise _GuardFailed({'code the traced function read was deleted'!r})"]
    return lines


_TOGETHER = 6   # from this many objects of a namespace on, one itemgetter and a tuple comparison


def _replaced_code_checks(em, held) -> list[str]:
    """A line testing that each function of held_code still runs its code, and one that those
    with default values still have them (`helper.__defaults__ = (3.0,)`: baked into the graph as
    constants), by identity: `k0.__code__ is not k1 or ...`, ~37 ns a function here. (Not one map
    of an attrgetter compared as a tuple, as _replaced_function_checks does with an itemgetter:
    an attrgetter call per function costs more than the specialized attribute read, 558 against
    295 ns for 8 functions, 1.65 against 1.04 us for 30; red team 21.)"""
    if not held:
        return []
    em.namespace["_replaced_code"] = functools.partial(replaced_code, held)
    test = " or ".join(f"{em._const(func)}.__code__ is not {em._const(code)}" for func, code, _ in held)
    lines = [f"if {test}: raise _GuardFailed(_replaced_code())"]
    tests = [f"{em._const(func)}.{name} is not {em._const(defaults[i])}" for func, _, defaults in held
             if defaults is not None for i, name in enumerate(("__defaults__", "__kwdefaults__"))
             if defaults[i] is not None]
    if tests:
        lines.append(f"if {' or '.join(tests)}: raise _GuardFailed(_replaced_code())")
    em.comments.append(f"code of {len(held)} functions of the user's, replaced in place by a reloader: _replaced_code")
    return lines


def replaced_code(held) -> str:
    names = ", ".join(f"{func.__module__}.{func.__qualname__}" for func, code, defaults in held
                      if held_changed(((func, code, defaults),)))
    return (f"code (or default values) the traced function ran was replaced in place (a reloader such as "
            f"IPython's %autoreload): {names}")


def replaced(table, i: int) -> str:
    """The reason the i-th check of _replaced_function_checks gives, made when it fails: which
    names of its module (or class) hold other objects than at the trace."""
    namespace, module_name, pairs = table[i]
    names = ", ".join(f"{module_name}.{attribute}" for attribute, obj in pairs
                      if namespace.get(attribute, MISSING) is not obj)
    return f"code the traced function read was replaced: {names}"


def _values_in(nodes, i):
    seen = {}
    for v in nodes[i].inputs:
        if v.source is Source.NODE and not v.foldable:
            seen[id(v)] = v
    return seen.values()


def _assign(node, call: str) -> str:
    outs = node.outputs
    if not outs or all(v.name == "_" for v in outs):
        return call
    if node.result_structure == "single":
        return f"{outs[0].name} = {call}"
    names = ["_"] * node.result_structure
    for v in outs:
        names[v.index] = v.name
    return f"{', '.join(names)}{',' if len(names) == 1 else ''} = {call}"


def _output_expr(em: _Emitter, obj, cloned, copies) -> str:
    if isinstance(obj, Value):
        if obj in copies:
            return copies[obj]
        if obj in cloned:
            em.namespace["_clone"] = em.backend.clone
            return f"_clone({obj.name})"
        return obj.name
    tp = type(obj)
    if tp is tuple:
        inner = ", ".join(_output_expr(em, x, cloned, copies) for x in obj)
        return f"({inner},)" if len(obj) == 1 else f"({inner})"
    if tp is list:
        return "[" + ", ".join(_output_expr(em, x, cloned, copies) for x in obj) + "]"
    if isinstance(obj, tuple):     # a namedtuple takes its fields as arguments, torch.Size a tuple
        items = ", ".join(_output_expr(em, x, cloned, copies) for x in obj)
        if hasattr(tp, "_fields"):
            return f"{em._const(tp)}({items})"
        return f"{em._const(tp)}(({items}{',' if len(obj) == 1 else ''}))"
    if isinstance(obj, dict):
        items = ", ".join(f"{em.expr(k)}: {_output_expr(em, v, cloned, copies)}" for k, v in obj.items())
        return f"{em._const(tp)}({{{items}}})" if tp is not dict else f"{{{items}}}"
    return em.expr(obj)

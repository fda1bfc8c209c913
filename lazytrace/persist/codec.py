"""A graph's plan as data, and back: what the persistent cache stores.

Nothing is pickled and nothing stored is executed. A call is stored as a name
('torch.nn.functional:pad', 'torch:Tensor.add') that is resolved at load only by
reading attributes of the framework's own modules (the backend's `persist_roots`)
and only to objects the backend allows (calls its interceptor could have recorded).
Python literals are tagged JSON, framework constants (dtypes, devices) are encoded
by the backend, arrays go to the safetensors part of the file under a name. Source
is generated again from the rebuilt plan by `codegen`, as after a trace.
A guard on a module global (graph/reads.py) is stored as the module's name, the
global's name and the expected type and value: at load the module is looked up in
`sys.modules` only (nothing is imported) and the global is checked at every call. A guard on a
class attribute (`Config.GAIN`, `self.k` of a class body) is stored the same way with the class's
module and qualified name, found again at load through the namespaces of that module and its
classes (no attribute access runs code), and the names of its bases (its MRO), which must be the same.

A graph that holds anything else (arrays the function reached by itself,
stateful objects, namedtuples, enums ...) is not stored: `NotStorable` says why.
"""
from __future__ import annotations

import importlib
import json
import math
import sys
from types import MappingProxyType, ModuleType, SimpleNamespace

from ..graph.ir import Kind, Node, Source, Value
from ..graph.passes import Plan
from ..graph.reads import _TYPE_MRO, SignedZero, read_global, read_mro, read_state, read_unbound

#: the calls a stored graph may make outside the framework: checks of a module's globals, of
#: framework state read in Python
_GUARDS = {"lazytrace:read_global": read_global, "lazytrace:read_unbound": read_unbound,
           "lazytrace:read_state": read_state, "lazytrace:read_mro": read_mro}
_GUARD_NAMES = {fn: name for name, fn in _GUARDS.items()}
_TYPES = {tp.__name__: tp for tp in (bool, int, float, complex, str, bytes, type(None), tuple, list, dict,
                                     set, frozenset)}     # the types a guard on a global compares


class NotStorable(Exception):
    """This graph (or key) cannot be stored as data; the message says why."""


class CorruptEntry(ValueError):
    """A stored graph that does not decode to a valid plan (damaged or tampered)."""


class Unavailable(Exception):
    """A valid stored graph that cannot be used in this process yet: it checks globals of a module
    not imported (nothing is imported to load a graph). The call traces instead; the file stays."""


_STORED_KINDS = (Kind.OP, Kind.GENERATOR, Kind.GUARD, Kind.STATE)
_KIND_OF = {k.value: k for k in _STORED_KINDS}


# ---- calls by name ------------------------------------------------------------------------

def resolve(backend, ref):
    """The callable a stored name stands for, found only by attribute reads from the backend's
    own modules; anything else is refused (CorruptEntry)."""
    if not isinstance(ref, str) or ref.count(":") != 1:
        raise CorruptEntry(f"malformed call name {ref!r}")
    if ref in _GUARDS:
        return _GUARDS[ref]
    root, path = ref.split(":")
    if not backend.persist_root(root):
        raise CorruptEntry(f"call {ref!r} is outside the {backend.name} modules a stored graph may use")
    names = path.split(".")
    if not 1 <= len(names) <= 3 or not all(n.isidentifier() for n in names):
        raise CorruptEntry(f"malformed call name {ref!r}")
    try:
        obj = importlib.import_module(root)
    except ImportError:
        raise CorruptEntry(f"call {ref!r} names no {backend.name} module") from None
    for name in names:
        obj = getattr(obj, name, None)
        if obj is None or isinstance(obj, ModuleType):
            raise CorruptEntry(f"call {ref!r} does not name a {backend.name} function")
    if not backend.allowed_target(obj):
        raise CorruptEntry(f"call {ref!r} is not one a graph may make")
    return obj


def _ref(backend, func, enc) -> tuple[str, object]:
    """(name, encoded parameters) of a call; checked to load back as the same call."""
    if func is read_global or func is read_unbound or func is read_state or func is read_mro:
        return _GUARD_NAMES[func], None
    stored = backend.stored_call(func)
    if stored is None:
        raise NotStorable(f"the call {_name(func)} has no name in {backend.name}'s own modules")
    ref, params = stored
    encoded = None if params is None else enc(params)
    try:
        found = target(backend, ref, None if params is None else _Decoder(backend, {}, {})(encoded))
    except (CorruptEntry, Unavailable):
        found = None
    if found is not func and not backend.same_call(found, func):
        raise NotStorable(f"the call {_name(func)} cannot be found again by its name {ref!r}")
    return ref, encoded


def target(backend, ref, params):
    """The callable of a stored call: its name resolved, made by the backend from its decoded
    parameters if it has any (a JAX primitive and its parameters)."""
    obj = resolve(backend, ref)
    if params is None:
        return obj
    try:
        return backend.loaded_call(obj, params)
    except (TypeError, ValueError, KeyError) as exc:
        raise CorruptEntry(f"call {ref!r} with malformed parameters: {exc}") from None


def _module_of(obj) -> str | None:
    """The name of the module whose globals `obj` is, if it is a module's globals."""
    name = obj.get("__name__") if type(obj) is dict else None
    module = sys.modules.get(name) if type(name) is str else None
    return name if module is not None and getattr(module, "__dict__", None) is obj else None


def _state_name(backend, obj) -> list | None:
    """[module, attribute] of the framework state `obj` reads (Backend.state_reads), if it is such a reader."""
    for (module, attribute), reader in backend.state_reads().items():
        if obj is (reader or getattr(sys.modules.get(module), attribute, None)):
            return [module, attribute]
    return None


def _state_reader(backend, name):
    """The reader of a stored [module, attribute] of framework state."""
    if type(name) is not list or len(name) != 2 or tuple(name) not in backend.state_reads():
        raise CorruptEntry(f"not framework state a graph may read: {name!r:.80}")
    reader = backend.state_reads()[tuple(name)] or getattr(sys.modules.get(name[0]), name[1], None)
    if not callable(reader):
        raise Unavailable(f"a guard reads {name[0]}.{name[1]}, which is not imported")
    return reader


def _namespace(name):
    if type(name) is not str:
        raise CorruptEntry(f"malformed module name {name!r:.80}")
    module = sys.modules.get(name)
    if module is None:
        raise Unavailable(f"a guard reads globals of {name!r:.80}, which is not imported")
    return module.__dict__


def _class_ref(namespace, what) -> dict | None:
    """{"k": [module, qualified name], "mro": its bases} of the class whose namespace (`vars(cls)`) a
    guard reads, if that name finds it again; `what` is the guard's description (PythonReads.guards:
    'class m:Q')."""
    if not (isinstance(what, str) and what.startswith("class ")):
        return None
    module, _, qualname = what[len("class "):].partition(":")
    try:
        cls = _class_named([module, qualname])
    except (Unavailable, CorruptEntry):
        return None
    return {"k": [module, qualname], "mro": _mro_names(cls)} if vars(cls) == namespace else None


def _class_named(ref) -> type:
    """The class a stored [module, qualified name] names, found through namespaces only."""
    if type(ref) is not list or len(ref) != 2 or not all(type(part) is str for part in ref):
        raise CorruptEntry(f"malformed class name {ref!r:.80}")
    namespace, cls = _namespace(ref[0]), None
    for part in ref[1].split("."):
        cls = namespace.get(part)
        if not isinstance(cls, type):
            raise Unavailable(f"a guard reads attributes of the class {ref[0]}:{ref[1]:.80}, which is not there")
        namespace = vars(cls)
    return cls


_TYPE_QUALNAME = vars(type)["__qualname__"]


def _mro_names(cls) -> list:
    """'module:qualname' of the classes after `cls` in its MRO, read by type's own descriptors (no
    metaclass code runs): a class found again by its name whose bases differ (made again with
    others, `__bases__` set) looks its attributes up elsewhere than the stored checks read."""
    return [f"{vars(k).get('__module__')}:{_TYPE_QUALNAME.__get__(k)}" for k in _TYPE_MRO(cls)[1:]]


def _class_stored(entry) -> type:
    """The class a stored {"k": [module, qualified name], "mro": [...]} names, if its bases are
    those it had when stored."""
    cls = _class_named(entry["k"])
    if entry.get("mro") != _mro_names(cls):
        raise Unavailable(f"the class {entry['k'][0]}:{entry['k'][1]:.80} has other bases than when the graph "
                          f"was stored")
    return cls


def _class_code(plan) -> list:
    """[{"k": ..., "mro": ...}, attribute] of each class attribute holding code the graph checks
    (plan.class_code), or NotStorable for a class its name does not find again."""
    entries = []
    for cls, attribute in plan.class_code:
        if not isinstance(cls, type):       # an attribute of a function (`helper.impl`)
            raise NotStorable(f"the graph checks the attribute {attribute!r} of the function "
                              f"{getattr(cls, '__qualname__', '?')}, which has no stored form")
        what = f"class {cls.__module__}:{cls.__qualname__}"
        ref = _class_ref(vars(cls), what)
        if ref is None:
            raise NotStorable(f"the graph checks the method {attribute!r} of the {what.replace(':', '.')}, which "
                              f"its name does not find again (a class made in a function)")
        entries.append([ref, attribute])
    return entries


def _name(func) -> str:
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)


# ---- values and literals --------------------------------------------------------------------

class _Encoder:
    def __init__(self, backend, refs: dict, specs: bool = False):
        self.backend = backend
        self.refs = refs              # id(Value) -> its reference
        self.arrays: dict = {}        # name -> array
        self.specs = specs            # arrays as descriptions (a call's arguments), not contents

    def value(self, v: Value):
        ref = self.refs.get(id(v))
        if ref is None:
            raise NotStorable("a value the stored graph would not define")
        return ref

    def __call__(self, obj):
        tp = type(obj)
        if isinstance(obj, Value):
            return {"v": self.value(obj)}
        if obj is None or tp in (bool, int, str):
            return obj
        if tp is float:
            return {"f": repr(obj)}
        if tp is complex:
            return {"j": [repr(obj.real), repr(obj.imag)]}
        if tp is bytes:
            return {"b": obj.hex()}
        if obj is Ellipsis:
            return {"e": 0}
        if tp is tuple:
            return {"t": [self(x) for x in obj]}
        if tp is list:
            return [self(x) for x in obj]
        if tp is dict:
            return {"d": [[self(k), self(v)] for k, v in obj.items()]}
        if tp is set or tp is frozenset:
            return {"S" if tp is set else "Z": [self(x) for x in obj]}
        if tp is type and _TYPES.get(obj.__name__) is obj:
            return {"y": obj.__name__}
        if tp is slice:
            return {"s": [self(obj.start), self(obj.stop), self(obj.step)]}
        if tp is SignedZero:
            value = obj.value
            return {"z": repr(value)} if type(value) is float else {"zc": [repr(value.real), repr(value.imag)]}
        if isinstance(obj, self.backend.array_types) and self.specs:
            spec = self.backend.array_spec(obj)
            if spec is None:
                raise NotStorable(f"a {tp.__qualname__} argument that cannot be described for a rebuilt call")
            return {"A": spec}
        if isinstance(obj, self.backend.array_types):
            name = f"k{len(self.arrays)}"
            self.arrays[name] = obj
            return {"a": name}
        static = self.backend.encode_static(obj)
        if static is not None:
            return {"x": static}
        raise NotStorable(f"a {tp.__module__}.{tp.__qualname__} in the graph cannot be stored as data")


class _Decoder:
    def __init__(self, backend, values: dict, arrays: dict, synthetic: bool = False, start_devices=False):
        self.backend = backend
        self.values = values          # reference -> Value
        self.arrays = arrays
        self.synthetic = synthetic    # {"A": spec} makes an array of that description
        self.start_devices = start_devices
        self.elements = 0             # elements of the arrays made so far

    def value(self, ref) -> Value:
        try:
            return self.values[tuple(ref)]
        except (KeyError, TypeError):
            raise CorruptEntry(f"reference to an undefined value {ref!r}") from None

    def __call__(self, data):
        if data is None or type(data) in (bool, int, str):
            return data
        if type(data) is list:
            return [self(x) for x in data]
        if type(data) is not dict or len(data) != 1:
            raise CorruptEntry(f"malformed literal {data!r:.80}")
        (tag, body), = data.items()
        try:
            if tag == "v":
                return self.value(body)
            if tag == "f":
                return _float(body)
            if tag == "j":
                return complex(_float(body[0]), _float(body[1]))
            if tag == "b":
                return bytes.fromhex(body)
            if tag == "e":
                return Ellipsis
            if tag == "t":
                return tuple(self(x) for x in _list(body))
            if tag == "d":
                return {_hashable(self(k)): self(v) for k, v in _list(body)}
            if tag == "s":
                return slice(*(self(x) for x in _list(body, 3)))
            if tag == "S" or tag == "Z":
                return (set if tag == "S" else frozenset)(_hashable(self(x)) for x in _list(body))
            if tag == "y":
                return _TYPES[body]
            if tag == "z" and _float(body) == 0.0:
                return SignedZero(_float(body))
            if tag == "zc":
                value = complex(*(_float(x) for x in _list(body, 2)))
                if value.real == 0.0 or value.imag == 0.0:
                    return SignedZero(value)
            if tag == "a":
                return self.arrays[body]
            if tag == "x":
                return self.backend.decode_static(body)
            if tag == "A" and self.synthetic:
                self.elements += math.prod(_list(body[0]))
                if self.elements > MAX_SYNTHETIC_ELEMENTS:
                    raise CorruptEntry(f"a rebuilt call of more than {MAX_SYNTHETIC_ELEMENTS} elements")
                return self.backend.synthetic_array(body, self.start_devices)
        except CorruptEntry:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptEntry(f"malformed literal {data!r:.80}: {exc}") from None
        raise CorruptEntry(f"unknown literal tag {tag!r}")


def _unbound_check(namespace, names) -> tuple:
    if not isinstance(namespace, Value) or type(names) is not frozenset or not names or \
            not all(type(name) is str and name.isidentifier() for name in names):
        raise CorruptEntry("malformed check of unset globals")
    return namespace, names


def _mro_check(cls) -> tuple:
    if not isinstance(cls, Value) or not isinstance(cls.obj, type):
        raise CorruptEntry("malformed check of a class's bases")
    return (cls,)


def _float(text) -> float:
    if not isinstance(text, str):
        raise CorruptEntry(f"malformed float {text!r}")
    value = float(text)
    if repr(value) != text and not math.isnan(value):
        raise CorruptEntry(f"malformed float {text!r}")
    return value


def _list(body, length=None) -> list:
    if type(body) is not list or (length is not None and len(body) != length):
        raise CorruptEntry(f"malformed list {body!r:.80}")
    return body


def _hashable(key):
    try:
        hash(key)
    except TypeError:
        raise CorruptEntry(f"unhashable dict key {key!r:.80}") from None
    return key


# ---- a call of a signature ------------------------------------------------------------------

#: the most array elements a rebuilt call may have (a bound against damaged descriptions)
MAX_SYNTHETIC_ELEMENTS = 2**26


def encode_call(backend, args: tuple, kwargs: dict):
    """A JSON description of a call's arguments, arrays by their description only; NotStorable for
    arguments that have no such form."""
    enc = _Encoder(backend, {}, specs=True)
    return {"args": [enc(a) for a in args], "kwargs": [[k, enc(v)] for k, v in kwargs.items()]}


def decode_call(backend, doc, start_devices=False) -> tuple[tuple, dict]:
    """(args, kwargs) of the description encode_call made, its arrays new ones of the described
    shape, dtype, device... filled with a constant; CorruptEntry for anything else. RuntimeError
    if that would start an accelerator's runtime and `start_devices` is false."""
    dec = _Decoder(backend, {}, {}, synthetic=True, start_devices=start_devices)
    try:
        args = tuple(dec(a) for a in _list(doc["args"]))
        kwargs = {}
        for name, value in _list(doc["kwargs"]):
            if not isinstance(name, str) or not name.isidentifier():
                raise CorruptEntry(f"malformed keyword argument name {name!r:.80}")
            kwargs[name] = dec(value)
    except CorruptEntry:
        raise
    except (KeyError, TypeError, ValueError, IndexError, RecursionError) as exc:
        raise CorruptEntry(f"malformed call description: {type(exc).__name__}: {exc}") from None
    return args, kwargs


# ---- plans --------------------------------------------------------------------------------

def encode(backend, plan: Plan) -> tuple[dict, dict]:
    """(JSON-able description, {name: array}) of a plan; NotStorable if it holds anything but
    framework calls, literals and arrays computed from no input."""
    if plan.constant_state is not None:
        raise NotStorable("its constants depend on settings of this process (e.g. np.errstate for a "
                          "constant that divided by zero)")
    if plan.reads_environment:
        raise NotStorable("the function reads the process environment or facts of the machine (os.environ, "
                          "os.getenv, os.cpu_count, platform ...): another process may see other values")
    inputs, output_structure = plan.inputs, plan.output_structure
    refs: dict[int, list] = {id(v): ["i", i] for i, v in enumerate(inputs)}
    enc = _Encoder(backend, refs)
    constants = []
    for i, v in enumerate(plan.constants):
        refs[id(v)] = ["c", i]
        module = _module_of(v.obj) if v.source is Source.EXTERNAL else None
        if module is not None:
            constants.append({"g": module})
            continue
        state = _state_name(backend, v.obj) if v.source is Source.EXTERNAL else None
        if state is not None:
            constants.append({"s": state})
            continue
        ref = _class_ref(v.obj, v.meta) if type(v.obj) is MappingProxyType else \
            _class_ref(vars(v.obj), v.meta) if isinstance(v.obj, type) else None
        if ref is not None:     # a class's namespace, or the class itself ({"c": 1}: its MRO checked)
            constants.append(ref if type(v.obj) is MappingProxyType else {**ref, "c": 1})
            continue
        if isinstance(v.obj, (type, MappingProxyType)) and str(v.meta).startswith("class "):
            raise NotStorable(f"the graph checks attributes of the {v.meta.replace(':', '.')}, which its "
                              f"name does not find again (a class made in a function)")
        if not v.foldable and not isinstance(backend.unwrap(v.obj), backend.array_types):
            raise NotStorable(f"the graph checks a {type(v.obj).__qualname__} the traced code reached by itself "
                              f"(a closure cell, an object's attribute): it has no stored form")
        if not v.foldable:          # (a foldable EXTERNAL one is a NumPy array made by calls it did not see)
            raise NotStorable("the function reads an array it reached by itself (a global, a closure "
                              "variable, a module parameter): a stored copy would not follow its changes")
        constants.append(f"c{i}")
        enc.arrays[f"c{i}"] = backend.unwrap(v.obj)
    nodes = []
    for n, node in enumerate(plan.nodes):
        if node.kind not in _STORED_KINDS:
            raise NotStorable(f"the graph reads or writes attributes of stateful objects ({node.kind.value})")
        for j, out in enumerate(node.outputs):
            refs[id(out)] = ["n", n, j]
        call, params = _ref(backend, node.target, enc)
        # a lowered call's wrapper (F.pad of torch._C._nn.pad), checked where the code found it
        wrapper = _ref(backend, node.wrapper, enc)[0] if node.wrapper is not None and \
            backend.stored_call(node.wrapper) is not None else None
        nodes.append({"kind": node.kind.value, "call": call, **({"params": params} if params is not None else {}),
                      **({"wrapper": wrapper} if wrapper is not None else {}),
                      "args": [enc(a) for a in node.args],
                      "kwargs": [[k, enc(v)] for k, v in node.kwargs.items()],
                      "inputs": [enc.value(v) for v in node.inputs],
                      "outputs": [out.index for out in node.outputs],
                      "structure": node.result_structure,
                      # (a class's MRO: the one it has at load, where its stored bases are found again)
                      "expected": enc(node.expected) if node.kind is Kind.GUARD and node.target is not read_mro
                      else None})
    doc = {"inputs": len(inputs), "constants": constants, "nodes": nodes,
           "outputs": enc(output_structure),
           "cloned": [enc.value(v) for v in plan.cloned_outputs],
           "folded": plan.folded, "pruned": [_name(n.target) for n in plan.pruned],
           "visible_effects": plan.visible_effects, "packages": list(plan.packages),
           "code_globals": [list(pair) for pair in plan.code_globals], "class_code": _class_code(plan),
           "modules": list(plan.modules), "imported": list(plan.imported),
           "framework_functions": [[m, n] for m, n, _ in plan.framework_functions]}
    return doc, enc.arrays


def decode(backend, doc: dict, arrays: dict) -> Plan:
    """The plan `encode` described; CorruptEntry if the description is not a valid one."""
    try:
        return _decode(backend, doc, arrays)
    except CorruptEntry:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as exc:
        raise CorruptEntry(f"malformed graph description: {type(exc).__name__}: {exc}") from None


def _decode(backend, doc, arrays):
    count = doc["inputs"]
    if type(count) is not int or not 0 <= count < 100000:
        raise CorruptEntry(f"malformed input count {count!r}")
    inputs = [Value(Source.INPUT) for _ in range(count)]
    values = {("i", i): v for i, v in enumerate(inputs)}
    constants = []
    for i, name in enumerate(_list(doc["constants"])):
        if type(name) is dict and "s" in name:   # {"s": [module, attribute]}: framework state a guard reads
            v = Value(Source.EXTERNAL, obj=_state_reader(backend, name["s"]), meta=".".join(map(str, name["s"])))
        elif type(name) is dict and "k" in name:    # {"k": [module, qualname]}: a class's namespace, or the class
            cls = _class_stored(name)
            v = Value(Source.EXTERNAL, obj=cls if name.get("c") == 1 else vars(cls),
                      meta=f"class {name['k'][0]}:{name['k'][1]}")
        elif type(name) is dict:        # {"g": module}: the namespace a guard on a global reads
            v = Value(Source.EXTERNAL, obj=_namespace(name["g"]))
        else:
            v = Value(Source.NODE, foldable=True, obj=arrays[name])
        values[("c", i)] = v
        constants.append(v)
    dec = _Decoder(backend, values, arrays)
    nodes = []
    targets: dict = {}          # call name -> callable, resolved once per graph
    for n, data in enumerate(_list(doc["nodes"])):
        kind = _KIND_OF.get(data["kind"])
        if kind is None:
            raise CorruptEntry(f"node kind {data['kind']!r} is never stored")
        ref, params = data["call"], data.get("params")
        name = (ref, json.dumps(params, sort_keys=True)) if type(ref) is str else None
        call = targets.get(name) if name is not None else None
        if call is None:
            call = target(backend, ref, None if params is None else dec(params))
            if name is not None:
                targets[name] = call
        kwargs = {}
        for name, value in _list(data["kwargs"]):
            if not isinstance(name, str) or not name.isidentifier():
                raise CorruptEntry(f"malformed keyword argument name {name!r:.80}")
            kwargs[name] = dec(value)
        structure = data["structure"]
        if structure not in (None, "single") and (type(structure) is not int or structure < 0):
            raise CorruptEntry(f"malformed result structure {structure!r}")
        args = tuple(dec(a) for a in _list(data["args"]))
        if call is read_unbound:
            args = _unbound_check(*args)
        if call is read_mro:
            args = _mro_check(*args)
        node = Node(n, kind, call, args,
                    kwargs, [dec.value(r) for r in _list(data["inputs"])], [], result_structure=structure,
                    expected=(read_mro(args[0].obj) if call is read_mro else dec(data["expected"]))
                    if kind is Kind.GUARD else None,
                    wrapper=resolve(backend, data["wrapper"]) if "wrapper" in data else None)
        for j, index in enumerate(_list(data["outputs"])):
            if not (index is None and structure == "single") and not (
                    type(index) is int and type(structure) is int and 0 <= index < structure):
                raise CorruptEntry(f"malformed output index {index!r}")
            out = Value(Source.NODE, None, index)     # (no back reference: a traced graph's have
            node.outputs.append(out)                    # none either, TraceSession.unlink; no cycle)
            values[("n", n, j)] = out
        nodes.append(node)
    packages = tuple(_list(doc["packages"]))
    if not all(type(p) is str and p.isidentifier() for p in packages):
        raise CorruptEntry("malformed package names")
    code_globals = tuple(tuple(_list(pair, 2)) for pair in _list(doc["code_globals"]))
    if not all(type(m) is str and type(n) is str for m, n in code_globals):
        raise CorruptEntry("malformed global names")
    class_code = tuple((_class_stored(ref), attribute) for ref, attribute in
                       (_list(pair, 2) for pair in _list(doc["class_code"])))
    if not all(type(attribute) is str for _, attribute in class_code):
        raise CorruptEntry("malformed class attribute names")
    framework_functions = tuple(tuple(_list(pair, 2)) for pair in _list(doc["framework_functions"]))
    if not all(type(m) is str and type(n) is str for m, n in framework_functions):
        raise CorruptEntry("malformed framework function names")
    modules = tuple(_list(doc["modules"]))
    if not all(type(m) is str and all(part.isidentifier() for part in m.split(".")) for m in modules):
        raise CorruptEntry("malformed module names")
    imported = tuple(_list(doc["imported"]))
    if not all(type(m) is str and all(part.isidentifier() for part in m.split(".")) for m in imported):
        raise CorruptEntry("malformed imported module names")
    plan = Plan(nodes, constants, {dec.value(r) for r in _list(doc["cloned"])},
                folded=int(doc["folded"]),
                pruned=[SimpleNamespace(target=SimpleNamespace(__qualname__=str(name)))
                        for name in _list(doc["pruned"])],
                visible_effects=bool(doc["visible_effects"]), inputs=inputs, output_structure=dec(doc["outputs"]),
                packages=packages, code_globals=code_globals, class_code=class_code, modules=modules, imported=imported,
                framework_functions=tuple((m, n, _global_now(m, n)) for m, n in framework_functions))
    return plan  # (a framework function of a module not imported yet holds None: unchanged() decides)


def _global_now(module_name: str, name: str):
    """What a module global holds now (None: no such module or global); imports nothing."""
    namespace = getattr(sys.modules.get(module_name), "__dict__", None)
    return namespace.get(name) if type(namespace) is dict else None

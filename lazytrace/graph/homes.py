"""Where the code a graph ran lives, and what of it a graph checks at each call.

function_homes: the places (a module's globals, a class's namespace, sys.modules) holding the
functions, classes and modules the traced code read or called; a graph checks that each still
holds the same object (`torch.sin = my_sin`, a test's monkeypatch of a helper).
held_code: the user's functions the graph ran, whose code a reloader may replace in place (IPython's
%autoreload sets `__code__`): a graph checks their code and default values by identity.
codegen turns both into the lines at the top of a generated graph.
"""
from __future__ import annotations

import functools
import os
import site
import sys
import types

from .ir import Kind
from .passes import Plan
from .reads import UNWATCHED, instance_dict


def function_homes(backend, plan: Plan) -> tuple:
    """(module name, its globals, attribute, function) for each function the plan's calls name by
    a module attribute (`torch.sin`, `torch.nn.functional.relu`) that holds it now, and for the
    other public attributes holding it (`torch.special.expm1` of `torch._C._special.special_expm1`,
    Backend.other_homes), and for every module global holding code that the traced code read
    (plan.code_globals: `from torch import sin`, `relu = F.relu`, the user's own helpers and
    classes, kornia's 0-85 per function): taken when the graph is made (code generation waits
    for the first replay; a function replaced meanwhile must be seen too; one the traced call
    replaced itself made it eager: PythonReads.changed)."""
    homes, seen = [], set()
    names_of = _HOME_NAMES.get(backend.name)
    if names_of is None or len(names_of) > _HOME_NAMES_MAX:
        names_of = _HOME_NAMES[backend.name] = {}
    modules = sys.modules
    funcs = []      # each function once, in the order of the calls (the plan holds them: their ids stay their own)
    for node in plan.nodes:       # (a guard's call too: `torch._assert_async(cond)` replaced must be seen)
        func = node.target
        if id(func) not in seen:
            seen.add(id(func))
            funcs.append(func)
        # a lowered call (F.pad replayed as torch._C._nn.pad): the wrapper the code called is checked too
        func = node.wrapper
        if func is not None and id(func) not in seen:
            seen.add(id(func))
            funcs.append(func)
    for func in funcs:
        known = names_of.get(id(func))
        if known is None or known[0] is not func:
            known = names_of[id(func)] = (func, _home_names(backend, func))
        if known[1] is None:
            continue
        for module_name, attribute in known[1]:
            namespace = getattr(modules.get(module_name), "__dict__", None)
            if type(namespace) is dict and namespace.get(attribute) is func:
                homes.append((module_name, namespace, attribute, func))
    api_below = backend.api_below       # (none for torch: _package is not asked for each global)
    below = [(m, n) for m, n, f in plan.framework_functions if api_below and _package(f) in api_below]
    # a framework module's attribute the code read that held the user's own function then
    # (`torch.sin = my_sin` before the trace): the graph replays my_sin's calls, so it must stay
    patched = {(m, n) for m, n, f in plan.framework_functions if _package(f) not in UNWATCHED}
    # each module global holding code that the traced code read: the user's own (a helper, a
    # class: a test's monkeypatch after the trace) and a framework's that a call names
    # (`from torch import sin`); framework modules and classes held (kornia's `torch`, `Tensor`)
    # are not checked
    taken = {(id(home[1]), home[2]) for home in homes}
    for module_name, attribute in [*plan.code_globals, *below, *patched]:
        namespace = getattr(sys.modules.get(module_name), "__dict__", None)
        func = namespace.get(attribute) if type(namespace) is dict else None
        if func is not None and (id(namespace), attribute) not in taken and (
                id(func) in seen or _watched_code(func) or api_below and _package(func) in api_below
                or (module_name, attribute) in patched or _standard_library(func) and _users(module_name)):
            taken.add((id(namespace), attribute))
            homes.append((module_name, namespace, attribute, func))
    for klass, attribute in plan.class_code:      # `Helpers.scale`, a method of an object a global holds
        namespace = vars(klass)
        func = namespace.get(attribute)
        if func is not None:
            homes.append((f"{klass.__module__}.{klass.__qualname__}", namespace, attribute, func))
    for name in plan.imported:      # `import helpers as h` in a function body: sys.modules swapped later
        module = modules.get(name)
        if module is not None and _watched_code(module):
            homes.append(("sys.modules", modules, name, module))
    return tuple(homes)


#: backend name -> {id(function): (the function, _home_names)}: what function_homes looks up for a
#: function, fixed by the function (its names); whether each place holds it is read at every graph
_HOME_NAMES: dict = {}
_HOME_NAMES_MAX = 4096


def _home_names(backend, func) -> tuple | None:
    """(module name, attribute) of each place a call of `func` may name it from, or None for a
    call not generated as a function call (a method, an operator)."""
    style, qualname = backend.call_syntax(func)
    if style != "function":
        return None
    names = []
    for name in dict.fromkeys((qualname, *backend.other_homes(func))):
        module_name, _, attribute = name.rpartition(".")
        if not module_name.startswith("lazytrace."):
            names.append((module_name, attribute))
    return tuple(names)


def _watched_code(value) -> bool:
    """Whether a function, class, module or partial is the user's (not of a package in UNWATCHED);
    remembered per object (a library's helpers are read by many traces)."""
    known = _WATCHED.get(id(value))
    if known is not None and known[0] is value:
        return known[1]
    if len(_WATCHED) >= _HOME_NAMES_MAX:
        _WATCHED.clear()
    watched = _WATCHED[id(value)] = (value, _watched_code_of(value))
    return watched[1]


_WATCHED: dict = {}     # id(object) -> (the object, _watched_code_of): what function_homes asks of each code global


def _watched_code_of(value) -> bool:
    if isinstance(value, types.ModuleType):
        name = value.__name__
    else:
        value = getattr(value, "func", value) if type(value).__module__ == "functools" else value
        name = vars(value).get("__module__") if isinstance(value, type) else \
            getattr(value, "__module__", None) or type(value).__module__
    return str(name).partition(".")[0] not in UNWATCHED


def _standard_library(value) -> bool:
    """Whether a module global holds a standard-library module or function (`import math`): its
    calls on Python numbers are baked into the graph (`math.sqrt(2.0)`), so the global rebound
    (`mylib.math = fake_math`) must be seen."""
    name = value.__name__ if isinstance(value, types.ModuleType) else _package(value)
    return str(name).partition(".")[0] in sys.stdlib_module_names


def _users(module_name: str) -> bool:
    """Whether a module is the user's own: not of an installed distribution, whose globals holding
    the standard library are taken as fixed, as its code is (held_code: kornia's `math`)."""
    filename = getattr(sys.modules.get(module_name), "__file__", None)
    return not isinstance(filename, str) or _edited_here(filename)


def _package(func) -> str | None:
    """The top-level package a function (not a class or module) comes from."""
    if isinstance(func, (type, types.ModuleType)) or not callable(func):
        return None
    return str(getattr(func, "__module__", None) or type(func).__module__).partition(".")[0]


def held_code(plan: Plan, homes: tuple, root=None) -> tuple:
    """(function, its __code__, (its __defaults__, __kwdefaults__) or None) for each function of
    the user's that the graph's homes and closure-variable checks hold, taken with the homes (when
    the graph is made): a reloader replaces a function's code in place (IPython's %autoreload sets
    `__code__` and `__defaults__` of the functions other modules imported by name, and of a class's
    methods; jurigged too), which no check of which object a place holds sees. Code of installed
    distributions and of the standard library (site-packages, the stdlib directory) is taken as
    fixed, as the frameworks' own: kornia's ~10 helpers per graph cost nothing at a hit.
    Followed from each (_followed): what a checked place does not hold but the function runs
    without a check of its own, a decorated helper's inner function (`__wrapped__`, a wrapper's
    closure cell, which is not checked: reads._rebindable), a closure's or a default value's
    function; a function in a checked dict or list (`OPS["scale"]`, a guard's copy holds it);
    and those of the traced function `root` (its own code and defaults LazyGraph checks)."""
    objs = [func for _, _, _, func in homes]
    for node in plan.nodes:     # closure variables and attributes holding code, checked by identity
        if node.kind is Kind.GUARD:
            _same_objects(node.expected, objs, _HELD_DEPTH)
    seen = set()
    if type(root) is types.MethodType:
        root = root.__func__
    if type(root) is types.FunctionType:
        seen.add(id(root))
        objs += _followed(root)
    held, funcs = [], [func for obj in objs for func in _functions_of(obj)]
    for func in funcs:      # (grows as it goes: what each function found holds)
        if id(func) in seen or len(seen) >= _HELD_MAX:
            continue
        seen.add(id(func))
        # (_watched_code_of: _watched_code's memo would keep a function held by a closure alive)
        own = _edited_here(func.__code__.co_filename) and _watched_code_of(func)
        if own:
            defaults = None if func.__defaults__ is None and func.__kwdefaults__ is None else \
                (func.__defaults__, func.__kwdefaults__)
            held.append((func, func.__code__, defaults))
        funcs += [f for obj in _followed(func, own) for f in _functions_of(obj)]
    return tuple(held)


_HELD_DEPTH = 4     # containers nested in a guard's value looked into for functions (`{"ops": [f]}`)
_HELD_MAX = 512     # functions looked at per graph


def _same_objects(expected, out: list, depth: int) -> None:
    """The objects a guard's expected value compares by identity (tracer._Same), in the
    containers it copied (a dict or list of functions read from a global)."""
    tp = type(expected)
    if tp.__name__.startswith("_Same"):
        obj = getattr(expected, "obj", None)
        if obj is not None:
            out.append(obj)
    elif depth and isinstance(expected, (tuple, list)):
        for item in expected:
            _same_objects(item, out, depth - 1)
    elif depth and tp is dict:
        for item in expected.values():
            _same_objects(item, out, depth - 1)


def _followed(func, own=True) -> list:
    """What a function runs without a check of its own: the function it wraps (functools.wraps:
    also an installed decorator's, `@torch.no_grad()`), and, for the user's own, the functions its
    closure cells and default values hold."""
    wrapped = vars(func).get("__wrapped__")
    found = [] if wrapped is None else [wrapped]
    if own:
        for cell in func.__closure__ or ():
            try:
                found.append(cell.cell_contents)
            except ValueError:      # not set yet
                pass
        found += func.__defaults__ or ()
        found += (func.__kwdefaults__ or {}).values()
    return found


def _functions_of(obj) -> tuple:
    """The Python functions a held object runs: itself, a static or class method's, a property's
    accessors, a bound method's or a partial's function."""
    if isinstance(obj, (staticmethod, classmethod, types.MethodType)):
        obj = obj.__func__
    elif isinstance(obj, functools.partial):
        obj = obj.func
    elif isinstance(obj, property):
        return tuple(f for f in (obj.fget, obj.fset, obj.fdel) if type(f) is types.FunctionType)
    if type(obj) is types.FunctionType:
        return (obj,)
    try:        # a wrapper of C (lru_cache) or a callable object (anything a closure cell holds: a proxy ...)
        attributes = instance_dict(obj) if callable(obj) else None
    except Exception:       # noqa: BLE001 - a descriptor of its own raised
        return ()
    wrapped = attributes.get("__wrapped__") if type(attributes) is dict else None
    return (wrapped,) if type(wrapped) is types.FunctionType else ()


@functools.lru_cache(maxsize=1024)
def _edited_here(filename: str) -> bool:
    """Whether code of this file may be edited while a program runs: not under an installation
    directory (site-packages, the standard library). The file's name as its code holds it (the
    path it was imported by) is compared with those directories' as named and resolved: no
    realpath per file (a stat per component). One reached through another link counts as the
    user's: checked, which is safe."""
    return not filename.startswith(_installed())


@functools.cache
def _installed() -> tuple:
    """The installation directories, as named and resolved (0.1 ms once; sysconfig.get_paths()
    took 2 ms, the first graph's holding the user's code paid it)."""
    dirs = {os.path.dirname(os.__file__), *getattr(site, "getsitepackages", tuple)(), site.getusersitepackages()}
    return tuple({os.path.join(form, "") for d in dirs if d for form in (d, os.path.realpath(d))})


def held_changed(held) -> bool:
    """Whether a function of held_code runs other code or default values now."""
    for func, code, defaults in held:
        if func.__code__ is not code or defaults is not None and (
                func.__defaults__ is not defaults[0] or func.__kwdefaults__ is not defaults[1]):
            return True
    return False

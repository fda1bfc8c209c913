"""What a stored graph's key is made of: everything that could make it wrong.

The function (module, qualified name, hash of its compiled code and defaults), the files of its
package and of lazytrace (sizes and modification times: an edit anywhere in the
library or in lazytrace misses), and, stored with each graph and checked at load, the files of
every other package whose Python code the trace ran (graph/reads.py notes them) and the
data globals (numbers, strings, containers of them) of the modules of that code, the versions of the library's distribution and
of the framework (importlib-metadata), the format version, the Python version,
the trace options and the call's signature key written as stable text. Any
difference gives another digest: a miss, never a wrong graph.
"""
from __future__ import annotations

import contextlib
import contextvars
import enum
import hashlib
import inspect
import linecache
import operator
import os
import sys
import weakref
from functools import lru_cache

import importlib_metadata

from . import versions
from .codec import NotStorable

#: bumped whenever the stored description of a graph changes meaning
FORMAT_VERSION = 7       # 7: the checks of session 21 (a class's MRO, read_mro); format 6 graphs lack them


def function_identity(fn) -> dict:
    """The parts of the key that name the code a graph was traced from."""
    if not inspect.isfunction(fn):
        raise NotStorable(f"only plain functions are stored, not a {type(fn).__name__}")
    if fn.__closure__ or "<locals>" in fn.__qualname__:
        raise NotStorable("a nested function: the values it captured are baked into its graphs "
                          "but are not part of a stored key")
    package = fn.__module__.partition(".")[0]
    return {"function": f"{fn.__module__}:{fn.__qualname__}",
            "code": function_digest(fn),
            "package": package_fingerprint(package),
            "distributions": distribution_versions(package)}


def function_digest(fn) -> str:
    """A hash of what the function runs: its compiled code (bytecode, constants, names, nested
    code, exception table) and its default values. Read from memory, no file: this runs at every
    process's first load of each function. Defaults without a stable text form are covered by a
    hash of the function's source instead."""
    digest = hashlib.sha256()
    _hash_code(fn.__code__, digest)
    try:
        digest.update(_literal_text((fn.__defaults__, fn.__kwdefaults__)).encode())
    except NotStorable:
        source = _source(fn.__code__)
        if not source:
            raise NotStorable(f"the source of {fn.__qualname__} is not available") from None
        digest.update(source.encode())
    return digest.hexdigest()


_CODE_PARTS = ("co_name", "co_qualname", "co_argcount", "co_posonlyargcount", "co_kwonlyargcount",
               "co_flags", "co_names", "co_varnames", "co_freevars", "co_cellvars")


def _hash_code(code, digest) -> None:
    nested, others, kinds = [], [], []
    for c in code.co_consts:
        if type(c) is str:        # docstrings are long: hashed as bytes, not repr'd
            digest.update(b"%d:%s" % (len(c), c.encode("utf-8", "surrogatepass")))
            kinds.append("s")
        elif hasattr(c, "co_code"):
            nested.append(c)
            kinds.append("c")
        else:
            others.append(c)
            kinds.append("o")
    text = repr(("".join(kinds), others, [getattr(code, part, None) for part in _CODE_PARTS]))
    if "frozenset(" in text:      # the only constants whose repr depends on the process (set order)
        text = "".join(kinds) + _literal_text(others) + repr([getattr(code, p, None) for p in _CODE_PARTS])
    table, text = code.co_exceptiontable, text.encode()
    digest.update(b"%d\0%d\0%d\0%d\0%s%s%s" % (len(nested), len(code.co_code), len(table), len(text),
                                                code.co_code, table, text))      # lengths: one reading
    for c in nested:
        _hash_code(c, digest)


def _literal_text(obj) -> str:
    """Text equal for two constants exactly when they are equal (the same in every process:
    frozensets sorted); NotStorable for other objects."""
    tp = type(obj)
    if obj is None or obj is Ellipsis or tp in (bool, int, float, complex, str, bytes):
        return f"{tp.__name__}:{obj!r}"
    if tp in (tuple, list):
        return f"{tp.__name__}(" + ",".join(_literal_text(x) for x in obj) + ")"
    if tp is frozenset or tp is set:
        return f"{tp.__name__}(" + ",".join(sorted(_literal_text(x) for x in obj)) + ")"
    if tp is dict:
        return "dict(" + ",".join(f"{_literal_text(k)}:{_literal_text(v)}" for k, v in obj.items()) + ")"
    raise NotStorable(f"a {tp.__qualname__} has no stable text form")


def _source(code) -> str:
    """The source lines of a function: from its first line to the last line of its code or of any
    code nested in it (line tables, no tokenizing)."""
    lines = linecache.getlines(code.co_filename)
    last = _last_line(code)
    if not lines or last > len(lines):
        return ""
    return "".join(lines[code.co_firstlineno - 1:last])


def _last_line(code) -> int:
    last = max((line for _, _, line in code.co_lines() if line is not None), default=code.co_firstlineno)
    nested = [_last_line(c) for c in code.co_consts if hasattr(c, "co_lines")]
    return max([last, *nested])


def code_state(packages, code_globals, modules=(), strict=True) -> dict:
    """What a graph's trace depended on besides its key: {package: package_fingerprint} of the
    packages whose code it ran, and what each module global holding code that it read names
    now (the same file can pick another function at import, from the environment). With
    strict=False, what cannot be described (a module no longer imported) gives None."""
    def described(describe, *args):
        try:
            return describe(*args)
        except NotStorable:
            if strict:
                raise
            return None
    return {"packages": {p: described(package_fingerprint, p) for p in packages},
            "data": {m: module_data(m) for m in modules},
            "globals": [[m, n, described(_global_code_text, m, n)] for m, n in code_globals]}


@contextlib.contextmanager
def hashed_once():
    """Within this block each module's data hash is taken once (a library's preload checks many
    graphs that ran the same modules; nothing runs their Python code meanwhile)."""
    if _module_data_memo.get() is not None:       # inside an outer block: its hashes are shared
        yield
        return
    token = _module_data_memo.set({})
    try:
        yield
    finally:
        _module_data_memo.reset(token)


_module_data_memo: contextvars.ContextVar[dict | None] = contextvars.ContextVar("module_data_memo", default=None)


def module_data(module_name: str) -> str | None:
    """A hash of a module's data globals (numbers, strings, containers of them): code of it the
    trace ran without being seen (a method, a helper deeper than the guards follow) may have
    read one, and a value computed at import (from the environment, a file, the machine) can
    differ in another process with the same files. None: the module is not imported."""
    memo = _module_data_memo.get()
    if memo is None:
        return _module_data(module_name)
    if module_name not in memo:
        memo[module_name] = _module_data(module_name)
    return memo[module_name]


#: module name -> (its globals' names, their ids, _holders, (watch, [(key, value, check)]) of its data that can
#: change in place, hash, the version of its dict then, that dict, a view of its version): a module whose
#: globals are the same objects, with that data unchanged, has the same hash (a preloaded graph's first call
#: checks its modules again: see LazyGraph._confirm). `watch` covers in O(1) each class, dict and object of
#: that data (versions.py); the list holds the data no version covers (other Pythons, text that fails),
#: checked by _unchanged. The dict is held so that its view reads a live object.
_data_memo: dict = {}
_FROZEN = frozenset({type(None), bool, int, float, complex, str, bytes})


def _module_data(module_name: str) -> str | None:
    module = sys.modules.get(module_name)
    if module is None:
        return None
    memo = _data_memo.get(module_name)
    live = module.__dict__
    package = module_name.partition(".")[0]
    if memo is not None and memo[6] is live and memo[7] is not None and memo[7].value == memo[5] and \
            _watched(memo[3][0]) and (not memo[3][1] or all(_unchanged(value, check, package)
                                                          for _, value, check in memo[3][1])):
        return memo[4]               # (the first call of each preloaded graph checks its modules: ~1 us each)
    view = versions.dict_view(live)
    version = None if view is None else view.value
    namespace = None
    if memo is not None and (version is None or version != memo[5] or memo[6] is not live):
        namespace = live.copy()
        if len(namespace) != len(memo[0]) or not all(map(operator.is_, namespace, memo[0])) \
                or tuple(map(id, namespace.values())) != memo[1]:
            memo = None
        elif version is not None:                   # set again to the same objects: the same data
            _data_memo[module_name] = memo = (*memo[:5], version, live, view)
    if memo is not None and _watched(memo[3][0]) and \
            all(_unchanged(value, check, package) for _, value, check in memo[3][1]):
        return memo[4]
    namespace = live.copy() if namespace is None else namespace
    digest, watch, mutable = hashlib.sha256(), ([], [], [], []), []
    for key, value in sorted(namespace.items()):
        if key.startswith("__"):
            continue
        try:
            text = _data_text(value, package)
        except (NotStorable, RecursionError):
            if _mutable_data(value, package):
                mutable.append((key, value, _failing_part(value)))
            continue
        if _mutable_data(value, package) and not _watch(value, package, watch):
            mutable.append((key, value, _shallow(value, package) or text))
        digest.update(f"{key}\0{text}\n".encode("utf-8", "surrogatepass"))
    _data_memo[module_name] = (tuple(namespace), tuple(map(id, namespace.values())),
                               _holders(module_name, namespace.values()), (tuple(map(tuple, watch)), mutable),
                               digest.hexdigest(), version if version == versions.dict_version(live) else None,
                               live, view)
    return digest.hexdigest()


def memos_of(module_names) -> tuple:
    """The data memos of these modules now (module_data took them): still_memoized tells, in
    O(1) a module, whether their data is still what they say."""
    return tuple((name, _data_memo.get(name)) for name in module_names)


def still_memoized(memos) -> bool:
    """Whether each module's data is still what its memo (from memos_of) hashed: the same memo,
    the module's same dict at the same version, its watched classes, dicts and lists unchanged,
    and the data no version covers as _unchanged finds it. False: not known so (compare module_data)."""
    for name, memo in memos:
        if memo is None or _data_memo.get(name) is not memo or memo[7] is None:
            return False
        module = sys.modules.get(name)
        if module is None or module.__dict__ is not memo[6] or memo[7].value != memo[5] or not _watched(memo[3][0]):
            return False
        if memo[3][1] and not all(_unchanged(value, check, name.partition(".")[0]) for _, value, check in memo[3][1]):
            return False
    return True


def _watch(value, package: str, watch: tuple) -> bool:
    """Add to `watch` ([(version view, version)], [(object, class, its dict)], [(list or set, items)],
    [objects held]) what keeps the data text of `value` (a module global) the same: the versions of
    its classes and dicts, the class and dict of its objects, the items of its lists and sets. False
    (and nothing added) where a part has no version to read."""
    sizes = [len(part) for part in watch]
    if _watch_parts(value, package, 3, False, *watch):
        return True
    for part, size in zip(watch, sizes):
        del part[size:]
    return False


def _watch_parts(value, package, depth, literal, stamps, homes, items, held) -> bool:
    """_watch for `value` as _data_text (or, `literal`, _literal_text inside a container) reads it."""
    tp = type(value)
    if tp in _FROZEN or isinstance(value, enum.Enum):
        return True
    parts = ()
    if tp is tuple or tp is frozenset:
        parts = value
    elif tp is list or tp is set:
        parts = tuple(value)
        items.append((value, parts))
    elif tp is dict:
        view = versions.dict_view(value)
        if view is None:
            return False
        stamps.append((view, view.value))
        held.append(value)
        parts = (*value, *value.values())
    else:
        cls = isinstance(value, type)
        home = value.__module__ if cls else tp.__module__
        if literal or depth <= 0 or str(home).partition(".")[0] != package or not hasattr(value, "__dict__"):
            return True         # no text (_literal_text fails) while it is the same object
        attributes = vars(value)
        if cls:
            found = versions.type_view(value)
            if found is None:
                return False
            stamps.append(found)
        else:
            view = versions.dict_view(attributes) if type(attributes) is dict else None
            if view is None:
                return False
            stamps.append((view, view.value))
            homes.append((value, tp, attributes))
        held.append(value)
        return all(_watch_parts(a, package, depth - 1, False, stamps, homes, items, held)
                   for name, a in attributes.items() if not (cls and name.startswith("__")))
    return all(_watch_parts(x, package, depth, True, stamps, homes, items, held) for x in parts)


def _watched(watch) -> bool:
    """Whether everything `watch` (see _watch) covers is unchanged."""
    stamps, homes, items, _ = watch
    for view, number in stamps:           # (loops, not all() of generators: most lists are empty or short)
        if view.value != number:
            return False
    for obj, tp, attributes in homes:
        if type(obj) is not tp or vars(obj) is not attributes:
            return False
    for container, parts in items:
        if len(container) != len(parts) or not all(map(operator.is_, container, parts)):
            return False
    return True


def _holders(module_name, values) -> list:
    """What keeps the ids of a module's globals, as a memo saw them, theirs: a weak reference to
    each that takes one (its end forgets the memo: a big model the user replaced is not kept
    alive), the others themselves (numbers, strings, lists ...)."""
    def forget(_, name=module_name):
        _data_memo.pop(name, None)
    held = []
    for value in values:
        try:
            held.append(weakref.ref(value, forget))
        except TypeError:
            held.append(value)
    return held


def _mutable_data(value, package: str) -> bool:
    """Whether a global's contents can change without rebinding it: a list, dict or set (or a
    tuple holding one), an object of a class of the module's own package."""
    tp = type(value)
    if tp in _FROZEN or isinstance(value, enum.Enum):
        return False
    if tp is tuple or tp is frozenset:
        return any(_mutable_data(x, package) for x in value)
    if isinstance(value, type):     # a class of the package: its data attributes (`Config.SCALE = 3`)
        return str(getattr(value, "__module__", "")).partition(".")[0] == package
    return tp in (list, dict, set) or (tp.__module__.partition(".")[0] == package and hasattr(value, "__dict__"))


def _shallow(value, package):
    """A list, dict or set of immutable data (a table of tuples, valid names): its items, which stay
    the same objects exactly while its text stays the same (compared by identity, without the text).
    A class of the package: its attributes and the items of the lists, dicts and sets among them,
    likewise ("class", ...; kornia's modules hold dozens of nn.Module classes)."""
    tp = type(value)
    if isinstance(value, type):     # its number of attributes, and those its text holds (data, not methods)
        attributes, data, tables = vars(value), [], []
        for name, attribute in attributes.items():
            if name.startswith("__"):
                continue
            if _mutable_data(attribute, package):
                inner = _shallow(attribute, package)
                if inner is None or inner[0] != "same":
                    return None         # an object or class held by the class: by its text
                tables.append((attribute, inner[1]))
            elif callable(attribute) or isinstance(attribute, (staticmethod, classmethod, property)):
                continue                # methods: no part of its text
            data.append((name, attribute))
        return ("class", len(attributes), tuple(name for name, _ in data), tuple(a for _, a in data), tuple(tables))
    parts = _parts(value) if tp is dict or tp is list or tp is set else None
    if parts is None or any(_mutable_data(x, package) for x in parts):
        return None
    return ("same", parts)


def _parts(value) -> tuple:
    return (*value, *value.values()) if type(value) is dict else tuple(value)


def _failing_part(value):
    """("at", index or key, element) of a list/dict whose text fails by that element (not data):
    it still fails while that element is there. None: checked by its text again."""
    parts = value.items() if type(value) is dict else enumerate(value) if type(value) is list else ()
    for where, element in parts:
        try:
            _literal_text(element)
        except (NotStorable, RecursionError):
            return ("at", where, element)
    return None


def _unchanged(value, check, package) -> bool:
    """Whether mutable data has what the memo saw: its text `check` (a str), the same items
    (("same", items)), or the element that kept its text from existing (("at", where, element));
    None: it still has no text."""
    if type(check) is str:
        try:
            return _data_text(value, package) == check
        except (NotStorable, RecursionError):
            return False
    if check is None:
        try:
            _data_text(value, package)
        except (NotStorable, RecursionError):
            return True
        return False
    if check[0] == "same":
        parts = _parts(value)
        return len(parts) == len(check[1]) and all(map(operator.is_, parts, check[1]))
    if check[0] == "class":
        _, count, names, values, tables = check
        attributes = vars(value)
        return len(attributes) == count and all(map(operator.is_, map(attributes.get, names), values)) \
            and (not tables or all(_unchanged(table, ("same", items), package) for table, items in tables))
    _, where, element = check
    try:
        return value[where] is element
    except (KeyError, IndexError):
        return False


def _data_text(value, package: str, depth: int = 3) -> str:
    """_literal_text of a module global, also for an enum member (`MODE = Mode.A if ... else
    Mode.B`), for an object of a class of the module's own package (a config object made at
    import) and for such a class itself (`Config.SCALE`): its data attributes, `depth` levels
    (`CONFIG.inner.scale`). NotStorable for anything else."""
    tp = type(value)
    if isinstance(value, enum.Enum):
        return f"enum {tp.__module__}.{tp.__qualname__}.{value.name}"
    cls = isinstance(value, type)
    home = value.__module__ if cls else tp.__module__
    if depth <= 0 or str(home).partition(".")[0] != package or not hasattr(value, "__dict__"):
        return _literal_text(value)
    parts = []
    for name, attribute in sorted(vars(value).items()):
        if cls and name.startswith("__"):
            continue
        try:
            parts.append(f"{name}={_data_text(attribute, package, depth - 1)}")
        except NotStorable:
            continue
    return f"{'class' if cls else 'object'} {value.__qualname__ if cls else tp.__qualname__}(" + ",".join(parts) + ")"


def _global_code_text(module_name, name) -> str:
    """A stable text naming what the global `name` of a module holds (a function, class, module);
    for a function, with a hash of its code. A dotted name is a class attribute (`Helpers.scale`,
    found through the class namespaces): a method, property or class/static method."""
    module = sys.modules.get(module_name) if type(module_name) is str else None
    if module is None:
        raise NotStorable(f"a global read from {module_name!r}, which is not an imported module")
    namespace, (*classes, name) = vars(module), name.split(".")
    for part in classes:
        owner = namespace.get(part)
        namespace = vars(owner) if isinstance(owner, type) else {}
    value = namespace.get(name)
    if isinstance(value, type(sys)):
        return f"module {value.__name__}"
    if isinstance(value, (property, classmethod, staticmethod)):     # described by its function
        function = value.fget if isinstance(value, property) else value.__func__
        return f"{type(value).__name__} {_global_code_text_of(function, name, module_name)}"
    return _global_code_text_of(value, name, module_name)


def _global_code_text_of(value, name, module_name) -> str:
    qualname, owner = getattr(value, "__qualname__", None), getattr(value, "__module__", None)
    if type(qualname) is not str or type(owner) is not str or "<locals>" in qualname or "<lambda>" in qualname:
        raise NotStorable(f"the global {name!r} of {module_name} holds a {type(value).__qualname__} "
                          f"that has no stable name")
    text = f"{type(value).__qualname__} {owner}:{qualname}"
    if inspect.isfunction(value):     # redefined under the same name (importlib.reload of an edited file)
        text += " " + _function_digest_once(value)
    return text


_digests: dict = {}     # id(function) -> (function, its code, defaults, keyword defaults, digest)


def _function_digest_once(fn) -> str:
    """function_digest (shortened), taken again only when the function's code or defaults changed."""
    entry = _digests.get(id(fn))
    if entry is None or entry[0] is not fn or entry[1] is not fn.__code__ or entry[2] is not fn.__defaults__ \
            or entry[3] is not fn.__kwdefaults__:
        entry = _digests[id(fn)] = (fn, fn.__code__, fn.__defaults__, fn.__kwdefaults__, function_digest(fn)[:16])
    return entry[4]


def environment(backend, start=False) -> dict:
    """The parts of the key that describe the running software (and, `start`ing the framework's
    runtime if it has not started, the devices it has)."""
    return {"format": FORMAT_VERSION, "python": sys.implementation.cache_tag + " " + sys.version,
            "lazytrace": package_fingerprint("lazytrace"),
            "framework": [backend.name, *framework_versions(backend.distribution)],
            **backend.persist_environment(start)}


def framework_versions(distribution) -> list:
    """The version of a backend's distribution, or 'name version' of each of several."""
    if isinstance(distribution, str):
        return [_version(distribution)]
    return [f"{name} {_version(name)}" for name in distribution]


@lru_cache(maxsize=None)
def package_fingerprint(package: str) -> str:
    """A hash of the path, size and modification time of every Python file of a top-level
    package (or of a single-file module), taken once per process."""
    module = sys.modules.get(package)
    paths = list(getattr(module, "__path__", None) or [])
    files = []
    if paths:
        for root in paths:
            for folder, dirs, names in os.walk(root):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                files += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".py")]
    elif getattr(module, "__file__", None):
        files = [module.__file__]
    else:
        raise NotStorable(f"module {package!r} has no files to fingerprint")
    digest = hashlib.sha256()
    for path in files:
        stat = os.stat(path)
        digest.update(f"{path.replace(os.sep, '/')}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


@lru_cache(maxsize=None)
def distribution_versions(package: str) -> list:
    """[[distribution, version]] of the installed distributions providing `package`: the
    distribution of the same name if it provides it (fast), else from all distributions' files."""
    try:
        dist = importlib_metadata.distribution(package)
    except importlib_metadata.PackageNotFoundError:
        dist = None
    if dist is not None and _provides(dist, package):
        metadata = dist.metadata          # parsed once (a long description makes it slow)
        return [[metadata["Name"], metadata["Version"]]]
    names = _providers().get(package, [])
    return sorted([name, _version(name)] for name in set(names))


@lru_cache(maxsize=1)
def _providers() -> dict:
    """{top-level package: distributions}, read once per process (it reads every distribution's
    file list: ~0.3 s here; a library and its framework, e.g. tensorflow-cpu, both ask)."""
    return importlib_metadata.packages_distributions()


def _provides(dist, package: str) -> bool:
    top_level = dist.read_text("top_level.txt")
    if top_level is not None:
        return package in top_level.split()
    record = dist.read_text("RECORD") or ""
    return any(line.startswith((f"{package}/", f"{package}.py,")) for line in record.splitlines())


@lru_cache(maxsize=None)
def _version(distribution: str) -> str | None:
    try:
        return importlib_metadata.version(distribution)
    except importlib_metadata.PackageNotFoundError:
        return None


def clear_caches() -> None:
    """Forget fingerprints and versions taken in this process (after files changed)."""
    package_fingerprint.cache_clear()
    distribution_versions.cache_clear()
    _providers.cache_clear()
    _version.cache_clear()
    _data_memo.clear()
    _digests.clear()


# ---- the signature key as text ------------------------------------------------------------

def key_text(key, backend) -> str:
    """A text that is equal for two keys exactly when they are equal, the same in every process;
    NotStorable for keys holding objects without such a form (static arguments of user types)."""
    out: list[str] = []
    _write(key, backend, out)
    return "".join(out)


def _write(obj, backend, out):
    tp = type(obj)
    if tp is tuple or tp is list:
        out.append("(" if tp is tuple else "[")
        for x in obj:
            _write(x, backend, out)
            out.append(",")
        out.append(")" if tp is tuple else "]")
    elif obj is None or tp in (bool, int, float, complex, str, bytes, range) or obj is Ellipsis:
        out.append(f"{tp.__name__}:{obj!r}")
    elif tp is type or isinstance(obj, type):
        out.append(f"type:{_type_name(obj)}")
    elif isinstance(obj, enum.Enum):
        out.append(f"enum:{_type_name(tp)}.{obj.name}")
    elif isinstance(obj, tuple):                      # torch.Size and other tuples of values
        out.append(f"{_type_name(tp)}")
        _write(tuple(obj), backend, out)
    elif isinstance(obj, backend.static_types):
        out.append(f"{_type_name(tp)}:{obj!r}")
    else:
        text = backend.key_text(obj)
        if text is None:
            raise NotStorable(f"the call's key holds a {_type_name(tp)}, which has no stable text form")
        out.append(f"{_type_name(tp)}:{text}")


def _type_name(tp: type) -> str:
    name = f"{tp.__module__}.{tp.__qualname__}"
    if "<locals>" in name or tp.__module__ == "__main__":
        raise NotStorable(f"the call's key holds the local type {name}")
    return name


def digest(fixed_text: str, signature: str) -> str:
    """The file name's hash of a key: its call-independent parts as JSON, and the signature text."""
    return hashlib.sha256(f"{fixed_text}\0{signature}".encode()).hexdigest()

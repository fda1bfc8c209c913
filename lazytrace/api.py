"""trace_graph(): dispatch on what is passed (a callable, or an object a
backend knows how to trace, like a torch.nn.Module) and on whether example
arguments are given (eager Graph) or not (LazyGraph)."""
from __future__ import annotations

import dataclasses
import inspect
from types import FunctionType, MethodType, ModuleType
from typing import Any

from .backends import available, get_backend
from .convert import Converting, convert_arguments
from .graph.ir import Graph
from .graph.lazy import LazyGraph, Recipe
from .graph.signature import Signature
from .graph.tracer import NotTraceable, TraceOptions, trace
from .importhook.proxy import TracedLibrary


_DEFAULT_OPTIONS = TraceOptions()


class TraceError(RuntimeError):
    """trace_graph(..., args=...) was asked for a graph this call cannot become."""


def _as_tuple(value) -> tuple:
    if value is None:
        return ()
    if isinstance(value, (int, str)):
        return (value,)
    return tuple(value)


def _stateful_indices(paths) -> tuple:
    out = []
    for path in _as_tuple(paths):
        path = _as_tuple(path)
        if len(path) != 1:
            raise NotImplementedError(f"stateful index path {list(path)}: only top-level arguments "
                                      f"([[0]], [[2]]...) are supported")
        out.append(path[0])
    return tuple(out)


def trace_graph(*objs, stateful=None, arg_stateful_idxs=None, kwarg_stateful_idxs=None, to=None,
                include_generators=True, array_caching=True, return_backend_traced_fn=False,
                static_argnums=None, static_argnames=None, args=None, kwargs=None,
                max_signatures: int = 64, include=None, exclude=None, cache=None, prewarm=None):
    """Trace callables into graphs of framework calls (names follow ivy.trace_graph).

    With `args`/`kwargs`: trace now and return a `Graph`. Without: return a
    `LazyGraph` that traces on its first call, one graph per input signature.
    A torch.nn.Module has its forward traced and is returned itself.
    `cache`: persistent graph cache (True: the default directory, a path: that directory, False:
    off; None follows $LAZYTRACE_CACHE): graphs traced here are stored, and a later process
    replays them without tracing. The graphs stored for a function are loaded when its LazyGraph
    is made (for a module: when the proxy is made, for the functions that have stored graphs);
    `prewarm=True` (None follows $LAZYTRACE_PREWARM) also runs each such graph that has no
    visible effect once on constant-filled inputs of its signature, so that the framework's
    own first-run costs are paid then, not at the first call.
    A module (a library) gives a proxy module whose functions and classes are
    traced lazily, with these options; `include`/`exclude` are name patterns
    (fnmatch, e.g. "kornia.color.*") choosing its functions.
    Several objects give a tuple of results, in order.
    `return_backend_traced_fn` may be a dict of options for the framework's compiler, e.g.
    {"jit_compile": True} for tf.function.
    """
    if not objs:
        raise TypeError("trace_graph() needs at least one callable")
    if prewarm not in (None, True, False):
        raise TypeError(f"prewarm= takes True, False or None ($LAZYTRACE_PREWARM), got {prewarm!r}")
    if any(isinstance(obj, ModuleType) for obj in objs):
        if args is not None or kwargs is not None:
            raise TypeError("trace_graph(module) traces lazily: args=/kwargs= apply to single functions")
        settings = dict(stateful=stateful, arg_stateful_idxs=arg_stateful_idxs,
                        kwarg_stateful_idxs=kwarg_stateful_idxs, to=to, include_generators=include_generators,
                        array_caching=array_caching, return_backend_traced_fn=return_backend_traced_fn,
                        static_argnums=static_argnums, static_argnames=static_argnames,
                        max_signatures=max_signatures, cache=cache, prewarm=prewarm)
        results = [trace_library(obj, settings, include, exclude) if isinstance(obj, ModuleType)
                   else trace_graph(obj, **settings) for obj in objs]
        return results[0] if len(results) == 1 else tuple(results)
    if include is not None or exclude is not None:
        raise TypeError("include=/exclude= choose functions of a module: pass a module to trace_graph()")
    if to is not None:
        get_backend(to)   # unknown names fail here, clearly
    if isinstance(return_backend_traced_fn, dict):     # options for the framework's compiler
        return_backend_traced_fn = tuple(sorted(return_backend_traced_fn.items()))
    if include_generators is True and array_caching is True and to is None and return_backend_traced_fn is False \
            and not stateful and cache is None and prewarm is None:
        options = _DEFAULT_OPTIONS      # (frozen: shared)
    else:
        options = TraceOptions(include_generators=include_generators, array_caching=array_caching, to=to,
                               return_backend_traced_fn=return_backend_traced_fn, stateful=tuple(stateful or ()),
                               cache=cache, prewarm=prewarm)
    if len(objs) == 1:
        return _trace_one(objs[0], options, static_argnums, static_argnames, arg_stateful_idxs,
                          kwarg_stateful_idxs, args, kwargs, max_signatures)
    return tuple([_trace_one(obj, options, static_argnums, static_argnames, arg_stateful_idxs,
                             kwarg_stateful_idxs, args, kwargs, max_signatures) for obj in objs])


def _trace_one(obj, options, static_argnums, static_argnames, arg_stateful_idxs, kwarg_stateful_idxs,
               args, kwargs, max_signatures):
    if static_argnums is None and static_argnames is None and arg_stateful_idxs is None and \
            kwarg_stateful_idxs is None:
        signature = Signature(to=options.to)
    else:
        static = _by_position_and_name(obj, _as_tuple(static_argnums), _as_tuple(static_argnames), "static_argnums")
        stateful = _by_position_and_name(obj, _stateful_indices(arg_stateful_idxs), _as_tuple(kwarg_stateful_idxs),
                                         "arg_stateful_idxs")
        signature = Signature(static_argnums=static[0], static_argnames=static[1],
                              stateful_argnums=stateful[0], stateful_argnames=stateful[1], to=options.to)
    if type(obj) is FunctionType:       # (a plain function: no backend binds one, nor holds state of its own)
        fn, extra, install, state_objects = obj, None, None, ()
    else:
        binding = _bind(obj)
        fn, extra, install, state_objects = binding if binding else (obj, *_bound_state(obj))
    if state_objects:
        options = dataclasses.replace(options, stateful=options.stateful + tuple(state_objects))
    if not callable(fn):
        raise TypeError(f"trace_graph() takes callables, got {type(obj).__name__}")
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    target = get_backend(options.to) if options.to is not None else None
    if args is None and kwargs is None:
        traced = LazyGraph(fn, options=options, signature=signature, name=name, extra=extra,
                           max_signatures=max_signatures)
        traced.preload()
    else:
        if not isinstance(args, (tuple, list, type(None))) or not isinstance(kwargs, (dict, type(None))):
            raise TypeError(f"args= takes a tuple of positional arguments and kwargs= a dict of keyword "
                            f"arguments, got args={type(args).__name__}, kwargs={type(kwargs).__name__}")
        args, kwargs = tuple(args or ()), dict(kwargs or {})
        if target is not None:
            args, kwargs = convert_arguments(args, kwargs, signature, target)
        traced = eager_graph(fn, args, kwargs, options=options, signature=signature, name=name, extra=extra)
    if target is not None:
        traced = Converting(traced, signature, target)
    return install(traced) if install else traced


def like_options(obj, lazy: LazyGraph) -> tuple | None:
    """(backend, Recipe) of `lazy`, which trace_graph(obj) installed on `obj`, without obj's own
    parts: a traced library binds the later objects of obj's class with them, without reading
    trace_graph's arguments again; None if no backend binds `obj`."""
    for name in available():
        backend = get_backend(name)
        binding = backend.bind(obj)
        if binding is not None:
            own = {id(o) for o in binding[3]}
            options = dataclasses.replace(lazy._options, stateful=tuple(o for o in lazy._options.stateful
                                                                        if id(o) not in own))
            return backend, Recipe(options, lazy._signature, lazy._name, lazy.max_signatures)
    return None


_NAMES_OPTION = {"static_argnums": "static_argnames", "arg_stateful_idxs": "kwarg_stateful_idxs"}


def _by_position_and_name(obj, nums: tuple, names: tuple, option: str) -> tuple[tuple, tuple]:
    """(argnums, argnames) completed from the function's parameters, as jax.jit does: a parameter
    named in one is also given by the other way of passing it; negative indices count from the end."""
    if not nums and not names:
        return (), ()           # nothing to complete (the function's signature is not read)
    try:
        params = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):         # a builtin without a signature: as given
        params = None
    if any(not isinstance(i, int) or isinstance(i, bool) for i in nums):
        raise TypeError(f"{option} takes argument indices (int), got {nums!r}")
    if any(not isinstance(n, str) for n in names):
        raise TypeError(f"{_NAMES_OPTION[option]} takes parameter names (str), got {names!r}")
    positional = [p.name for p in params or () if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(i < 0 for i in nums):
        if params is None or any(p.kind is p.VAR_POSITIONAL for p in params):
            raise ValueError(f"{option}={nums!r}: a negative index needs a function with a fixed number "
                             f"of positional parameters")
        if any(i < -len(positional) for i in nums):
            raise ValueError(f"{option}={nums!r}: the function has {len(positional)} positional parameters")
        nums = tuple(i % len(positional) if i < 0 else i for i in nums)
    by_name = {p: i for i, p in enumerate(positional)}
    nums += tuple(by_name[n] for n in names if n in by_name and by_name[n] not in nums)
    names += tuple(positional[i] for i in nums if i < len(positional) and positional[i] not in names)
    return nums, names


def trace_library(module: ModuleType, settings: dict, include=None, exclude=None):
    """A proxy of `module`: its functions and classes are traced lazily with `settings`."""
    if to := settings.get("to"):
        get_backend(to)
    return TracedLibrary(module.__name__, settings, _as_patterns(include), _as_patterns(exclude)).proxy(module)


def _as_patterns(value) -> tuple:
    patterns = _as_tuple(value)
    if not all(isinstance(p, str) for p in patterns):
        raise TypeError(f"include=/exclude= take name patterns (str), got {value!r}")
    return patterns


def eager_graph(fn, args: tuple, kwargs: dict, *, options, signature, name, extra=None) -> Graph:
    key, _, backends = signature.key(args, kwargs)
    if extra is not None:
        key = (key, extra()[0])
    try:
        graph, _ = trace(fn, args, kwargs, key=key, backends=backends, signature=signature,
                         options=options, name=name, extra=extra)
    except NotTraceable as exc:
        raise TraceError(f"cannot trace {name}: {exc.reason}") from None
    if isinstance(graph, NotTraceable):
        raise TraceError(f"cannot trace {name} into a graph that is correct for other inputs: "
                         f"{graph.reason}. Use trace_graph({name}) without args= to run such "
                         f"signatures eagerly.")
    graph.fn                     # an eager graph is generated (and compiled) now
    return graph


def _bound_state(obj) -> tuple:
    """(extra live inputs, install, stateful objects) of a bound method or a callable object: its
    object's attributes are read at every call, so they are recorded like those of `stateful`
    objects (a model's modules and parameters as trace_graph(model) records them)."""
    if isinstance(obj, MethodType):
        owner = obj.__self__
    elif inspect.isfunction(getattr(type(obj), "__call__", None)) and not isinstance(obj, (type, LazyGraph, Graph)):
        owner = obj                 # an instance of a class with a Python __call__
    else:
        return None, None, ()
    if owner is None or isinstance(owner, ModuleType):
        return None, None, ()
    binding = _bind(owner)
    return (binding[1], None, binding[3]) if binding else (None, None, (owner,))


def _bind(obj: Any):
    """(function to trace, extra live inputs, install) for framework objects, or None."""
    for name in available():
        binding = get_backend(name).bind(obj)
        if binding is not None:
            return binding
    return None

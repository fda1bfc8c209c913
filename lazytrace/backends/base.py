"""The protocol every framework backend implements.

A backend answers questions about its own framework only; the tracer, passes,
code generation and caches are framework-free and talk to frameworks through
this class.
"""
from __future__ import annotations

import copy
import enum
import functools
import operator
import sys
import types
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Callable


class CallKind(enum.Enum):
    """How the tracer must treat one intercepted call."""

    OP = "op"                  # array computation: record it
    DYNAMIC_SHAPE = "dynamic"  # like OP, but output shapes depend on array values
    GENERATOR = "generator"    # draws random numbers
    STATE = "state"            # sets framework global state (grad mode): record, replay in order
    METADATA = "metadata"      # reads shape/dtype/device...: covered by the signature key
    HISTORY = "history"        # reads what happened to an array before (torch's version counter): not
                               # keyed, so guarded for arrays passed in; fixed by the graph for those it made
    DISPLAY = "display"        # repr/str/format: for printing, not recorded
    READBACK = "readback"      # returns a Python value computed from array data: guard it
    ESCAPE = "escape"          # hands array memory to code the tracer cannot see
    UNKNOWN = "unknown"        # decide from the result: arrays -> OP, Python values -> READBACK


class CallFacts:
    """What a backend knows of one callable whatever its arguments (Backend.call_facts), asked
    once per call: the tracer calls the per-call methods below only where their answer may be
    other than the plain one. A flag False: that method's answer is known (`metadata_inputs`: none,
    `specialize_args` and `replay_call`: the call as recorded, `caller_owned`, `stores_arguments`:
    False); True: ask it. `fixed`: `kind` is what classify answers for any arguments."""

    __slots__ = ()
    fixed = False
    kind = None
    metadata = specializes = replays = caller_owned = stores_arguments = True
    #: may give its first argument another argument's metadata (torch: `x.data = y`, `x.resize_as_(y)`)
    takes_metadata = False


#: the facts of a callable a backend says nothing of: every method is asked
ASK_EVERY_CALL = CallFacts()


def kept_per_argument(limit: int):
    """A backend method of one hashable argument whose result is kept per argument (at most
    `limit` of them; results are read, never changed): the texts a trace describes the global
    state and its inputs with, at every trace."""
    def decorate(method):
        attribute = f"_kept_{method.__name__}"

        @functools.wraps(method)
        def kept(self, argument):
            memo = self.__dict__.get(attribute)
            if memo is None:
                memo = self.__dict__[attribute] = {}
            found = memo.get(argument)
            if found is None:
                if len(memo) >= limit:
                    memo.clear()
                found = memo[argument] = method(self, argument)
            return found
        return kept
    return decorate


def public_attributes(array) -> list:
    """The Python attributes set on an array that are not a framework's own (no leading underscore)."""
    return [name for name in array.__dict__ if not name.startswith("_")]


class Backend:
    """Base class: one instance per framework, created on first use."""

    name: str = ""
    #: calls whose Python result depends only on metadata in the signature key
    array_types: tuple = ()
    #: immutable framework objects keyed by value (dtype, device ...)
    static_types: tuple = ()
    #: objects passed as arguments that the graph takes as live inputs (RNG generators)
    live_types: tuple = ()
    #: methods of a live input that give Python values or change it with no call the backend sees
    #: (torch.Generator's initial_seed(), get_state() ...): code naming one runs eagerly
    live_unseen_methods: frozenset = frozenset()
    #: names of framework functions that change arrays where no call the backend sees shows it
    #: (torch.utils.swap_tensors): code naming one runs eagerly
    unseen_changes: frozenset = frozenset()
    #: the class of the objects handed to the traced function in place of arrays, if any
    tracer_class: type | None = None
    internal_modules: tuple = ("lazytrace.",)   # module name prefixes of code that sees tracers as such
    #: packages whose API functions a graph does not name, because it records the calls below them
    #: (JAX's primitives under jnp.sin): replacing one the traced code read (`jnp.sin = f`,
    #: `from jax.numpy import cos` rebound) is checked by the graph (homes.function_homes)
    api_below: tuple = ()
    #: types of the objects the traced function holds for arrays (tracers, or the arrays)
    tracked_types: tuple = ()
    #: whether array creation (zeros, arange...) is intercepted; if not, an unseen array may
    #: have been made inside the function, so writing into one cannot be replayed safely
    sees_creation: bool = True
    #: whether every array a function makes comes from a call the interceptor sees (torch: its
    #: creation functions are overridable; JAX binds no primitive for `jnp.array(constant)`): then
    #: an array that is neither made by a seen call nor reached through a global, a closure or an
    #: attribute was made by an unseen call (`x.as_subclass(...)`, `nn.Parameter(x)`, another thread)
    sees_every_array: bool = False
    #: whether the backend knows every call whose output shape depends on array values
    #: (torch: aten's operator tags); if not, metadata read from any intermediate is guarded
    knows_dynamic_shapes: bool = True

    #: exceptions the framework's own hooks raise through a call to stop it (torch.utils.checkpoint
    #: ends a recomputation so): a graph raising one passes it on, as the function would, rather
    #: than running the function again to let it decide
    control_flow_exceptions: tuple = ()

    #: whether this framework's arrays can be written in place (to=: a write into a converted
    #: argument is carried back to the caller's array)
    writable_arrays: bool = True

    #: attributes of framework objects that their own machinery reads (torch.nn.Module's hook and
    #: parameter dicts): never recorded on stateful objects, lazytrace handles their content otherwise
    bookkeeping_attributes: frozenset = frozenset()

    #: the framework's context manager classes (or functions making one) that never swallow an
    #: error but whose `__exit__` lazytrace cannot read (written in C): a call in their `with`
    #: block in a function with effects keeps its graph (graph/handlers.py reads a Python `__exit__`)
    reraising_managers: tuple = ()

    def trace_refused(self) -> str | None:
        """Why a call must not be traced now, if it must not: it runs eagerly and nothing is cached
        (a later call may trace)."""
        return None

    def refused_call(self, fn):
        """What runs `fn` where trace_refused gave a reason (TensorFlow: converted by AutoGraph
        inside tf.function, as tf.function converts the functions it calls)."""
        return fn

    def bind(self, obj):
        """For a framework object with its own tracing rules (torch.nn.Module):
        (function to trace, extra live inputs, install, objects whose attributes the traced call
        reads and writes: recorded as stateful); else None."""
        return None

    def reached_model(self, obj) -> tuple[tuple, tuple]:
        """For an object the function reaches by itself (a global model): the objects whose
        attribute use a trace records (the module and its submodules), and the containers that
        hold its structure, checked item by item at every call (parameters, buffers, submodules).
        ((), ()) for other objects."""
        return (), ()

    def model_state_reads(self, modules) -> tuple:
        """(module, attribute) of framework state that the framework's own code reads around
        calls of these models (a model and its submodules), which the function reaching them
        does not read itself: checked like state it reads (keys of `state_reads`)."""
        return ()

    def model_refused(self, modules) -> str | None:
        """Why calls of these framework models (a model and its submodules) cannot be replayed,
        if they cannot: Python code the framework runs around them at every call (torch's module
        hooks: what they store, log or count a graph would not repeat). None if they can."""
        return None

    def traced_method(self, cls: type) -> str | None:
        """For a class whose instances `bind` handles (torch.nn.Module subclasses): the name of
        the method `bind` traces and installs on an instance ('forward'); else None."""
        return None

    # --- signature -------------------------------------------------------
    def unkeyable_reason(self, tp: type) -> str | None:
        """Why arrays of this type (one of `array_types` or a subclass) cannot be traced, if so."""
        return None

    def describe(self, array) -> tuple:
        """Everything about an array that a graph may bake in (not its values)."""
        raise NotImplementedError

    def metadata_fixed(self, array) -> bool:
        """Whether nothing can change describe(array) in place (immutable arrays: JAX's, TensorFlow's
        tensors). A graph checks the metadata of every other array the function reached by itself
        (a global, a closure variable, a module's parameter) at its entry (TraceSession.add_external)."""
        return False

    def metadata_check(self, array):
        """Optionally, a native callable(array) -> bool, made from `array` as it is now: True only if
        describe(array) is still what it is now (it may be stricter), apart from what
        metadata_conditions adds; for metadata_conditions."""
        return None

    def metadata_conditions(self, expr: str, described: tuple, const, native=None) -> list[str]:
        """Python conditions that hold only when describe(expr) == described (a graph's check of an
        array the function reached by itself, at its entry: codegen.read_metadata), and do
        whenever it does (or fail a little more often); `expr` an array, not a tracer; `native`:
        metadata_check() of that array when it was `described`. By default the comparison itself."""
        return [f"{const(described)} == {const(self.describe)}({expr})"]

    #: array types whose objects hold no Python attributes but those the user sets (`x.units = "km"`)
    attribute_types: tuple = ()

    def describe_argument(self, array) -> tuple:
        """describe() of an array passed as an argument, with what else a function may read of it
        that no call shows: Python attributes set on it (JAX arrays and TensorFlow tensors take
        them too; not the framework's own, `_is_zeros_tensor`) make the call eager here (the tracer
        standing for a JAX array has none); torch keys them."""
        if type(array) in self.attribute_types and array.__dict__ and public_attributes(array):
            from ..graph.signature import Unkeyable
            raise Unkeyable(f"an array argument carries Python attributes ({', '.join(public_attributes(array))}): "
                            f"the function may read them, and no call shows it")
        return self.describe(array)

    def attribute_conditions(self, expr: str, array, const) -> list[str]:
        """Conditions of the fast path on what describe_argument holds of an array's attributes."""
        if type(array) not in self.attribute_types:
            return []
        return [f"not {const(public_attributes)}({expr})" if array.__dict__ else f"not {expr}.__dict__"]

    def guard_conditions(self, expr: str, array, const) -> list[str]:
        """Python conditions on `expr` that hold exactly when describe(expr) == describe(array);
        `const(obj)` returns a name bound to obj in the generated code."""
        raise NotImplementedError

    def array_check(self, arrays: list):
        """Optionally, a native callable checking all array leaves at once: True only if each
        has the describe() of the matching example (it may be stricter, e.g. on strides)."""
        return None

    def array_check_distinct(self) -> bool:
        """Whether an `array_check` fails when one array is given for two of its examples (then
        it tells too that the arrays of a call are distinct objects)."""
        return False

    def array_check_extra(self, expr: str, array, const) -> list[str]:
        """Conditions the native `array_check` leaves out but describe() holds."""
        return []

    def state_conditions(self, state: tuple, const, covered: frozenset = frozenset()) -> list[str]:
        """Python conditions that hold exactly when global_state() == state, given that the parts
        named in `covered` (see state_covered) are checked by array_check already."""
        return [f"{const(self.global_state)}() == {const(state)}"] if state else []

    def state_covered(self, arrays: list, plan) -> frozenset:
        """Parts of global_state() that array_check(arrays) compares too, for a graph of `plan`."""
        return frozenset()

    def constant_state(self, plan):
        """Settings the computation of the plan's constants (and of the literal arguments of its
        calls) depended on at the trace, that a graph must check at every call (a call under other
        settings traces again), or None."""
        return None

    def constant_checks(self, state, const) -> list[tuple[str, str]]:
        """(Python condition, what failed) for each check of a constant_state()."""
        return []

    def global_state(self) -> tuple:
        """Framework-wide settings that change results (grad mode, default dtype)."""
        return ()

    def restore_global_state(self, state: tuple) -> None:
        """Put back settings a graph may have changed before it raised."""

    def quiet(self) -> AbstractContextManager:
        """A context in which this framework reports no numerical errors through channels of its
        own (NumPy's seterr handlers): prewarm runs graphs on made-up inputs inside it."""
        return nullcontext()

    # --- tracing ---------------------------------------------------------
    def caused_by_tracing(self, exc: BaseException) -> bool | str:
        """True (or the reason, as text) for an exception the trace itself caused where an eager
        call would not (JAX asking a tracer for a concrete value, a library refusing a tracer type
        it does not know, e.g. "Tensor type unknown ... NumpyTracer"): the call then runs eagerly
        instead."""
        names = [tp.__name__ for tp in self.tracked_types if tp not in self.array_types]
        return any(name in str(exc) for name in names)

    def intercept(self, session) -> AbstractContextManager:
        """Route this thread's framework calls to `session.on_call` while active (a call known to
        read an array's metadata only, whatever its arguments, may go to `session.on_metadata`)."""
        raise NotImplementedError

    def wrap_input(self, array, session):
        """The object the traced function receives for an input array: a `tracer_class`
        object where the backend has one (it keeps the array as `_lt_array`)."""
        return array if self.tracer_class is None else self.tracer_class(array, session)

    def wrap_live(self, obj, session):
        """The object the traced function receives for a live input (e.g. an RNG generator)."""
        return obj

    def unwrap(self, obj):
        """The real array behind a traced object (inverse of wrap_input)."""
        return obj._lt_array if type(obj) is self.tracer_class else obj

    def classify(self, func, args, kwargs) -> CallKind:
        raise NotImplementedError

    def call_facts(self, func) -> CallFacts:
        """What holds for every call of `func` (CallFacts), kept per callable by the backend."""
        return ASK_EVERY_CALL

    def run(self, func, args, kwargs) -> tuple[Any, list]:
        """Call `func`; return its result and the arguments whose memory it wrote."""
        raise NotImplementedError

    #: run() takes a fourth argument, the frame making the call (TraceSession.on_call's `caller`;
    #: the frames between it and run's are lazytrace's): where call_as_caller starts its walk, a
    #: fifth, call_facts(func), and a sixth, the arrays in the arguments at any depth, in order
    #: (those the tracer replaced by Values; None: run finds them)
    run_takes_caller = False

    def run_detached(self, func, args, kwargs):
        """Call `func` on the arrays of tracers whose trace has ended: its plain result, as eager."""
        return func(*unwrap_tree(args, self.tracer_class), **unwrap_tree(kwargs, self.tracer_class))

    def suspended(self) -> AbstractContextManager:
        """Stop interception in this thread for the duration (for tracer-internal calls)."""
        from contextlib import nullcontext
        return nullcontext()

    def folds_constants(self) -> bool:
        """Whether calls computed from no input may become constants in a trace starting now: not
        where something outside the key would make them anew at each eager call."""
        return True

    def unseen_state(self):
        """A snapshot of the global state that changes results but that code can change without the
        interceptor seeing it. The tracer compares it before every call and at the end: a change
        inside the function makes the signature run eagerly."""
        return None

    def state_reads(self) -> dict:
        """Framework state that Python code reads without a call the interceptor sees
        (`torch.are_deterministic_algorithms_enabled()`, `torch.backends.mkldnn.enabled`):
        {(module name, attribute): reader}, the reader a function of no arguments giving the
        value (None where the attribute is itself that function). A trace whose code reads one
        checks it like a global (graph/reads.py)."""
        return {}

    def returned_its_input(self, func, args, result, mutated) -> bool:
        """True when this call returned its first argument itself and did nothing else, decided by
        what the signature key fixes (dtype, device, strides): the graph then skips the call.
        Asked only when `result is args[0]`."""
        return False

    def state_change(self, before, after):
        """(callable, args) that replays a change of unseen_state() from `before` to `after`, or
        None when it cannot be replayed (the signature then runs eagerly)."""
        return None

    def metadata_inputs(self, func, args, kwargs, raw_args=(), raw_kwargs=None) -> tuple:
        """The arguments of this call whose values it never reads, only their shape, dtype and
        device (`ones_like(x)`'s x, `k.to(x)`'s x): a call whose other inputs are constants is
        then a constant per signature. Positions only: the items of `args`/`kwargs` are returned
        as given; `raw_args`/`raw_kwargs` are the call's own arrays (is what it reads keyed?)."""
        return ()

    def specialize_args(self, func, args, kwargs, recorded: tuple) -> tuple:
        """The arguments a recorded call should replay with (default: as recorded). `args` are
        the real ones; a backend may swap a Python number for an equivalent cached array (asked
        only where fewer arrays were found in the call than it has positional arguments)."""
        return recorded

    def replay_call(self, func, args, kwargs, recorded: tuple, recorded_kwargs: dict) -> tuple:
        """(callable, arguments, keyword arguments) a recorded call replays with (default: as
        recorded). `args` and `kwargs` are the real ones; a backend may name a lower-level call
        that does the same work (the graph still checks that `func` is where the code found it)."""
        return func, recorded, recorded_kwargs

    def storage_key(self, array) -> Any:
        """Equal for arrays that share memory."""
        return id(array)

    def requires_grad(self, array) -> bool:
        return False

    def caller_owned(self, func) -> bool:
        """Whether this call returns an array the caller can reach besides the inputs, without being
        a view of one (torch's `x.grad`): a write into it is an effect to replay."""
        return False

    def stores_arguments(self, func) -> bool:
        """Whether this call keeps its arguments where the caller finds them later (torch's
        `x.grad = g`, `x.data = d`): a cached constant among them is copied at every call."""
        return False

    def write_count(self, array) -> int | None:
        """How many in-place writes `array` has had (torch: its version counter), if the framework
        counts them: an input written more often than the trace saw was written by a call the
        interceptor missed (torch's `set_`), which a graph could not replay."""
        return None

    def write_counts(self, arrays: list) -> list:
        """write_count of each array, in one call (a trace's check of the arrays its calls made)."""
        return [self.write_count(a) for a in arrays]

    def clone(self, array):
        raise NotImplementedError

    def snapshot(self, array) -> Callable[[], None] | None:
        """Before a trace writes into `array` (an input, or an array the function reached): a
        callable that puts its contents back, or None where the framework's arrays are immutable
        or a rerun is never needed."""
        return None

    def snapshot_rng(self) -> Callable[[], None] | None:
        """A callable that puts the framework's global RNG back in its present state, or None."""
        return None

    def to_numpy(self, array):
        """A NumPy copy or view of an array of this framework (for to= conversion)."""
        import numpy as np
        return np.asarray(array)

    def from_numpy(self, data):
        """An array of this framework holding `data` (a NumPy array), for to= conversion."""
        raise NotImplementedError

    def write_back(self, array, data) -> str | None:
        """For to=: put `data` (a NumPy array of `array`'s shape, what a function converted into
        another framework wrote into its copy of `array`) into `array`; None when done, else why
        it cannot be."""
        return f"{self.name} arrays cannot be written in place"

    def rng_token(self, source=None) -> Any:
        """A fingerprint of the state of an RNG (`source`: one from rng_sources, or None for the
        global one), to catch random draws and reseeding that calls do not show."""
        return None

    def generator_state(self, obj, tracing: bool) -> Any:
        """For a random generator object of this framework (np.random.Generator, torch.Generator)
        whose draws a trace does not record (by this backend if `tracing`, else by another one):
        a fingerprint of its state; None for other objects."""
        return None

    def rng_sources(self, func, args, kwargs) -> list:
        """The RNGs a random call draws from (its generator argument, else the global one)."""
        return []

    def enter_rngs(self) -> tuple:
        """(snapshot_rng(), [(rng, rng_token(rng)) for each global RNG]): what a trace takes of the
        framework's global RNG(s) as the function starts (a backend may take both from one read)."""
        return self.snapshot_rng(), [(rng, self.rng_token(rng)) for rng in self.rng_sources(None, (), {})]

    def meta(self, array) -> str:
        """Short description for displays: '1x3x32x32 float32'."""
        return self.format_brief(self.brief(array))

    def brief(self, array) -> tuple:
        """A cheap record of what `meta` shows (taken for every value a trace makes)."""
        return ()

    def format_brief(self, brief: tuple) -> str:
        """The display text of a `brief` record."""
        return ""

    def output_facts(self, obj) -> tuple:
        """(brief, storage_key, requires_grad, write_count) of an array (or tracer) a call
        returned: what the tracer notes of every output, in one call."""
        raw = self.unwrap(obj)
        return self.brief(raw), self.storage_key(raw), self.requires_grad(raw), self.write_count(raw)

    # --- command line and views ------------------------------------------
    def example_array(self, shape: tuple, dtype: str, seed: int):
        """A random array for trying a function from the command line ('float32', 'int64'...);
        by default NumPy's, converted with from_numpy."""
        from . import get_backend
        return self.from_numpy(get_backend("numpy").example_array(shape, dtype, seed))

    def baked_contents(self, obj):
        """For an object the function reaches by itself whose contents a call could copy into a
        constant (a NumPy array given to tf.constant / torch.tensor / jnp.asarray by a function
        of another framework; in a NumPy function, `x * TABLE[0]`: an item read without a tracer
        is a number baked in, `TABLE[0] += 1` a write no call shows): a function reading what a
        guard compares. None: identity is enough (the object is used live)."""
        numpy = sys.modules.get("numpy")
        if numpy is not None and type(obj) is numpy.ndarray:
            return _host_contents
        return None

    def describe_global_state(self, state: tuple) -> dict[str, str]:
        """{name: value} for each part of global_state(), for explaining retraces."""
        return {f"global state [{i}]": repr(x) for i, x in enumerate(state)}

    # --- persistent cache (lazytrace/persist) -------------------------------
    #: the distribution whose version is part of a stored graph's key (or a tuple of several:
    #: JAX's results depend on jaxlib's version too)
    distribution: str | tuple = ""
    #: modules a stored graph's calls are named in ('module:attr' or 'module:Class.attr')
    persist_roots: tuple = ()

    def persist_environment(self, start: bool = False) -> dict:
        """What else of this process a stored graph's key holds: facts code reads in Python
        that stay the same within a process but not from one to the next (JAX: its devices).
        Known only once the framework's runtime has started: Unavailable before, unless `start`
        (prewarm, which runs graphs and so starts it anyway) starts it now."""
        return {}

    def persist_root(self, module: str) -> bool:
        """Whether a stored graph's call may be named in this module (read with its attributes only)."""
        return module in self.persist_roots

    def target_ref(self, func) -> str | None:
        """'module:attr.path' naming `func` inside persist_roots, or None: such a graph is not
        stored. The persist layer checks that the name resolves back to `func`."""
        return None

    def stored_call(self, func) -> tuple[str, Any] | None:
        """(name, parameters) of a recorded call: the name as target_ref, and for a call made
        from data (a JAX primitive and its parameters) that data as literals, else None.
        None: not storable."""
        ref = self.target_ref(func)
        return None if ref is None else (ref, None)

    def loaded_call(self, obj, params):
        """The callable a stored call with parameters stands for (obj: its resolved name);
        ValueError for parameters this backend did not write."""
        raise ValueError(f"the {self.name} backend stores no calls with parameters")

    def same_call(self, found, func) -> bool:
        """Whether `found`, loaded from the stored name of `func`, makes the same call (`func`
        itself may be a copy made during the trace, e.g. JAX's jitted functions)."""
        return found == func

    def key_text(self, obj) -> str | None:
        """A stable text of a framework object in a signature key that is not one of the
        static_types (JAX's abstract values), equal exactly when the objects are; else None."""
        return None

    def allowed_target(self, obj) -> bool:
        """Whether a stored graph may call `obj`: only calls this backend's interceptor could
        have recorded (never file or pickle readers/writers)."""
        return False

    def encode_static(self, obj):
        """A JSON-able form of a framework constant (dtype, device) found in a call, or None."""
        return None

    def decode_static(self, data):
        """The inverse of encode_static; raises ValueError for anything it did not write."""
        raise ValueError(f"the {self.name} backend stores no constants of this kind")

    def array_spec(self, array):
        """A JSON-able description of what `describe` keys (shape, dtype, device...), from which
        `synthetic_array` makes an array with the same key: stored with a graph so that a new
        process can rebuild a call of its signature (preload, prewarm). None: not rebuildable."""
        return None

    def synthetic_array(self, spec, start_devices: bool = False):
        """An array of `spec` (from array_spec) filled with a constant (0.5, or 1 for integers,
        True for bool); ValueError for a spec it did not write. On an accelerator whose runtime
        this process has not started, RuntimeError unless `start_devices` (starting one at import
        would surprise: a fork after it cannot use the device)."""
        raise ValueError(f"the {self.name} backend makes no synthetic arrays")

    def save_arrays(self, arrays: dict, metadata: dict) -> bytes:
        """A safetensors file of `arrays` (by name) with string `metadata`."""
        raise NotImplementedError(f"the {self.name} backend cannot store arrays")

    def load_arrays(self, data: bytes, metadata: dict) -> dict:
        """Arrays of a file written by save_arrays (its `metadata` already read)."""
        raise NotImplementedError(f"the {self.name} backend cannot load arrays")

    # --- code generation ---------------------------------------------------
    def call_syntax(self, func) -> tuple[str, str]:
        """How generated code names a call: ('function', 'torch.add'),
        ('method', 'add'), ('operator', '+'), ('getitem', ''), ('attribute', 'T')."""
        raise NotImplementedError

    def other_homes(self, func) -> tuple[str, ...]:
        """Other module attributes ('torch.special.expm1') holding the function call_syntax names
        by another ('torch._C._special.special_expm1'): user code may reach it through them, so a
        graph checks that they still hold it (homes.function_homes)."""
        return ()

    def qualified_name(self, func) -> str:
        """The name a view shows for a call: 'torch.conv2d', 'torch.Tensor.reshape'."""
        style, text = self.call_syntax(func)
        if style == "function":
            return text
        array_type = self.array_types[0] if self.array_types else object
        name = text if style in ("method", "attribute") else getattr(func, "__name__", "call")
        return f"{array_type.__module__}.{array_type.__qualname__}.{name}" + (
            f" ({text})" if style in ("operator", "roperator", "unary") else "")

    def literal(self, obj) -> str | None:
        """Python source for a framework constant (e.g. 'torch.float32'), or None."""
        return None

    def namespace(self) -> dict:
        """Names generated code may use (e.g. {'torch': torch})."""
        return {}

    def compile(self, fn: Callable, graph, **options) -> Callable:
        """Hand a generated function to the framework's own compiler; `options` are the user's
        (return_backend_traced_fn={...}), e.g. jit_compile for tf.function."""
        return fn


OPERATORS = {
    "__add__": "+", "__sub__": "-", "__mul__": "*", "__truediv__": "/", "__floordiv__": "//",
    "__mod__": "%", "__pow__": "**", "__matmul__": "@", "__and__": "&", "__or__": "|", "__xor__": "^",
    "__lshift__": "<<", "__rshift__": ">>", "__eq__": "==", "__ne__": "!=", "__lt__": "<",
    "__le__": "<=", "__gt__": ">", "__ge__": ">=", "__div__": "/",
}
ROPERATORS = {"__r" + k[2:]: v for k, v in OPERATORS.items() if k not in ("__eq__", "__ne__", "__lt__",
                                                                               "__le__", "__gt__", "__ge__")}
UNARY = {"__neg__": "-", "__pos__": "+", "__invert__": "~", "__abs__": "abs"}


def operator_syntax(name: str):
    """How generated code writes a call of the array dunder `name`, or None."""
    if name in OPERATORS:
        return ("operator", OPERATORS[name])
    if name in ROPERATORS:
        return ("roperator", ROPERATORS[name])
    if name in UNARY:
        return ("unary", UNARY[name])
    if name == "__getitem__":
        return ("getitem", "")
    if name == "__setitem__":
        return ("setitem", "")
    return None


#: modules whose code answers isinstance() for ABCs and runtime-checkable Protocols (the caller
#: is the code that asked)
_ISINSTANCE_MODULES = frozenset({"abc", "typing", "typing_extensions"})

#: the Python conversions ReadbackMixin reports
READBACK_BUILTINS = frozenset({bool, int, float, complex, operator.index})


class ReadbackMixin:
    """Python conversions of a tracer object (`bool(x)`, `float(x)`, `int(x)`, `operator.index`)
    reported to the session as calls of those builtins, so the value read back is guarded; its
    text and class as its array's. The tracer class provides `_lt_call(func, args)`,
    `_lt_array` and `_lt_session`."""

    __slots__ = ()

    def __bool__(self):
        return self._lt_call(bool, (self,))

    def __float__(self):
        return self._lt_call(float, (self,))

    def __int__(self):
        return self._lt_call(int, (self,))

    def __complex__(self):
        return self._lt_call(complex, (self,))

    def __index__(self):
        return self._lt_call(operator.index, (self,))

    # shown as eager code shows the array (`print(x)`, a log line); the session checks text
    # that other code uses (TraceSession.on_display)
    def __repr__(self):
        return self._lt_session.on_display(repr(self._lt_array), repr, (self,))

    def __str__(self):
        return self._lt_session.on_display(str(self._lt_array), str, (self,))

    def __format__(self, spec):
        return self._lt_session.on_display(format(self._lt_array, spec), format, (self, spec))

    @property
    def __class__(self):
        """The array's class, to the traced code: `isinstance(x, np.ndarray)` (or tf.Tensor)
        answers as it does for the array, so the function takes eager's path (`type(x)` cannot
        be answered so). The framework's own code, and lazytrace's, see the tracer."""
        frame = sys._getframe(1)
        while frame.f_globals.get("__name__") in _ISINSTANCE_MODULES:   # isinstance(x, SomeABC): who asks
            frame = frame.f_back
        if frame.f_globals.get("__name__", "").startswith(self._lt_sees_tracer()):
            return type(self)
        return type(self._lt_array)

    def _lt_sees_tracer(self) -> tuple:
        """Prefixes of the modules whose code `__class__` answers with the tracer's class."""
        return self._lt_session.backend.internal_modules


class ArrayTracer(ReadbackMixin):
    """Base of tracer objects that hold a real array (`_lt_array`) and report each operation on
    it to their session."""

    __slots__ = ("_lt_array", "_lt_session")
    __hash__ = None


    def __init__(self, array, session):
        self._lt_array = array
        self._lt_session = session

    def __copy__(self):         # copy.copy(x): a call like any other (not a copy of the tracer)
        return self._lt_call(copy.copy, (self,))

    def __deepcopy__(self, memo):
        return self._lt_call(copy.deepcopy, (self,))

    def __reduce_ex__(self, protocol):      # pickled as the array: data lazytrace cannot follow
        self._lt_session.fail("pickles an array: its data goes where lazytrace cannot follow")
        return self._lt_array.__reduce_ex__(protocol)

    def _lt_call(self, func, args, kwargs=None):
        return self._lt_session.on_call(func, args, kwargs or {})


def unwrap_tree(obj, tracer_type):
    """`obj` with each `tracer_type` object replaced by its `_lt_array`, through tuples, lists
    and dicts (the containers framework calls take arrays in)."""
    tp = type(obj)
    if tp is tracer_type:
        return obj._lt_array
    if tp is tuple or tp is list:
        return tp([unwrap_tree(x, tracer_type) for x in obj])
    if tp is dict:
        return {k: unwrap_tree(v, tracer_type) for k, v in obj.items()}
    return obj


def flat_unwrap(args, tracer_type, plain=None) -> tuple:
    """(the first `tracer_type` object or None, the arguments with each such object replaced by its
    `_lt_array`) of positional call arguments that hold no container, but tuples and lists that
    `plain` accepts (nothing in them to replace): one pass where most calls need no more than
    that. (None, None) otherwise: see unwrap_tree."""
    first, values = None, []
    for a in args:
        tp = type(a)
        if tp is tracer_type:
            if first is None:
                first = a
            values.append(a._lt_array)
        elif tp is dict or (tp is tuple or tp is list) and (plain is None or not plain(a)):
            return None, None
        else:
            values.append(a)
    return first, values


def _host_contents(array) -> tuple:
    """What a guard on a NumPy array compares besides its identity: shape, dtype and bytes."""
    return array.shape, array.dtype.str, array.tobytes()


#: dtypes safetensors' NumPy interface writes itself; others (bfloat16, float8 ...) are stored as bytes
_SAFETENSORS_DTYPES = frozenset({"float64", "float32", "float16", "int64", "uint64", "int32", "uint32", "int16",
                                 "uint16", "int8", "uint8", "bool", "complex64"})


def save_numpy_arrays(arrays: dict, metadata: dict) -> bytes:
    """A safetensors file of NumPy arrays (by name); an array of a dtype safetensors has no code
    for is stored as its bytes, with its dtype name and shape in the metadata ('lazytrace.raw')."""
    import json
    import numpy as np
    from safetensors.numpy import save
    plain, raw = {}, {}
    for name, a in arrays.items():
        a = np.array(a, order="C", copy=None)      # (np.ascontiguousarray makes a 0-d array 1-d)
        if a.dtype.name in _SAFETENSORS_DTYPES:
            plain[name] = a
        else:
            raw[name] = [a.dtype.name, list(a.shape)]
            plain[name] = a.reshape(-1).view(np.uint8)
    return save(plain, metadata={**metadata, "lazytrace.raw": json.dumps(raw)})


def load_numpy_arrays(data: bytes, metadata: dict, dtype_of) -> dict:
    """The arrays of a file save_numpy_arrays wrote; `dtype_of(name)` gives a stored dtype name's
    NumPy dtype (ValueError for a name it does not know)."""
    import json
    from safetensors.numpy import load
    raw = json.loads(metadata.get("lazytrace.raw", "{}"))
    arrays = load(data)
    for name, (dtype, shape) in raw.items():
        arrays[name] = arrays[name].view(dtype_of(dtype)).reshape(shape)
    return arrays


def _calls(func, args, kwargs): return func(*args, **kwargs)     # (one line: see call_as_caller)


#: (id of the caller's code, instruction, id of its globals) -> (that code, _calls placed at its line); by
#: ids, the entry holding the code and globals (a code object's hash walks its constants: ~0.6 us)
_CALLERS: dict = {}
_CALLERS_SIZE = 1024
_INTERNAL: dict = {}        # internal prefixes -> {id(code): code} of the codes of those modules seen


def call_as_caller(func, args, kwargs, internal: tuple, frame=None):
    """func(*args, **kwargs) made from a frame that warnings take for the code calling the
    framework (the first frame outside the `internal` module prefixes): a warning the call
    issues (NumPy's divide by zero, a deprecation with its stacklevel) is attributed to that
    code's module, file and line, as in eager code, so a filter naming its module
    (`error::RuntimeWarning:mymodule`) applies to it as it does eagerly. `frame`: where the walk
    outwards starts (default: the frame calling this), when the frames below it are `internal`."""
    codes = _INTERNAL.get(internal)
    if frame is None:
        frame = sys._getframe(1)
    if codes is not None:       # (the frames of codes known to be internal, then the caller's placed call)
        code = frame.f_code
        while codes.get(id(code)) is code:
            frame = frame.f_back
            if frame is None:
                return func(*args, **kwargs)
            code = frame.f_code
        entry = _CALLERS.get((id(code), frame.f_lasti, id(frame.f_globals)))
        if entry is not None and entry[0] is code:
            return entry[1](func, args, kwargs)
    return _place_caller(frame, internal)(func, args, kwargs)


def _place_caller(frame, internal: tuple):
    """_calls placed at the line of the first frame from `frame` outwards outside the `internal`
    modules (noting the internal codes met), or a plain call where there is none."""
    codes = _INTERNAL.get(internal)
    if codes is None or len(codes) >= _CALLERS_SIZE:
        codes = _INTERNAL[internal] = {}
    while frame is not None and str(frame.f_globals.get("__name__", "")).startswith(internal):
        codes[id(frame.f_code)] = frame.f_code
        frame = frame.f_back
    if frame is None:
        return _calls
    code = frame.f_code
    if len(_CALLERS) >= _CALLERS_SIZE:
        _CALLERS.clear()
    placed = _calls.__code__.replace(co_filename=code.co_filename, co_firstlineno=frame.f_lineno or 1)
    caller = types.FunctionType(placed, frame.f_globals, code.co_name)
    _CALLERS[id(code), frame.f_lasti, id(frame.f_globals)] = (code, caller)
    return caller

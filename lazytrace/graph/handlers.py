"""Which framework calls of a trace an except clause of the traced code could catch, read
from the code's exception table (Python 3.11+): a graph that replays such a call after visible
effects could neither undo them nor take the except path, so the tracer makes it eager."""
from __future__ import annotations

import dis

from .reads import UNWATCHED


def inside_except(frame, root, stop) -> bool:
    """Whether `frame` (the code making a framework call) or a frame below it down to the traced
    function's is inside a try block with an except clause: if that call raised, the function
    would go on. `root`: the traced function's code; `stop`: the trace's own frame."""
    known = _EXCEPT_RANGES
    while frame is not None and frame is not stop:
        code = frame.f_code
        ranges = known.get(code)
        if ranges is None:
            ranges = _except_ranges(code, frame.f_globals)
        if ranges:
            lasti = frame.f_lasti
            for start, end in ranges:
                if start <= lasti < end:
                    return True
        if code is root:
            return False
        frame = frame.f_back
    return False


#: code -> the (start, end) offsets its except clauses cover (none for code lazytrace does not watch)
_EXCEPT_RANGES: dict = {}


def _except_ranges(code, namespace) -> tuple:
    """The instruction ranges of `code` whose exceptions an except clause may catch where a
    graph's call could raise at a replay and not at the trace (a bare except, `except
    Exception`, `RuntimeError`, a warning made an error ...; not `except TypeError`, which calls
    raise for what the key fixes), also through later clauses of one try and through the `with`
    blocks and finally clauses inside the try (they raise again), nor code of the frameworks,
    the standard library or lazytrace."""
    ranges = ()
    if code.co_exceptiontable and str(namespace.get("__name__", "")).partition(".")[0] not in UNWATCHED:
        ops = list(dis.get_instructions(code))
        entries = list(dis.Bytecode(code).exception_entries)
        catches = _HandlerWalk(ops, entries).catches
        ranges = tuple((e.start, e.end) for e in entries if catches(e.target))
    if len(_EXCEPT_RANGES) >= 4096:
        _EXCEPT_RANGES.clear()
    _EXCEPT_RANGES[code] = ranges
    return ranges


class _HandlerWalk:
    """Whether an exception reaching a handler of one code object may be caught there, or where
    that handler raises it again (the end of a finally clause, of a with block, of except
    clauses that did not match), by the handler around it."""

    def __init__(self, ops, entries):
        self.ops, self.entries = ops, entries
        self.at = {ins.offset: index for index, ins in enumerate(ops)}
        self.known: dict = {}

    def catches(self, target) -> bool:
        known = self.known.get(target)
        if known is None:
            self.known[target] = False          # (a cycle raises out)
            known = self.known[target] = self._walk(target)
        return known

    def _raised_at(self, offset) -> bool:
        entry = next((e for e in self.entries if e.start <= offset < e.end), None)
        return entry is not None and self.catches(entry.target)

    def _walk(self, target) -> bool:
        ops, index = self.ops, self.at.get(target)
        if index is None:
            return True                         # (not understood: counted)
        if ops[index].opname != "PUSH_EXC_INFO":
            return self._raised_at(target)      # an except clause's cleanup: raises again
        index += 1
        names: set = set()
        while index < len(ops):
            ins = ops[index]
            if ins.opname == "POP_TOP" and not names:
                return True                     # a bare `except:`
            if ins.opname == "CHECK_EG_MATCH":
                return True
            if ins.opname == "CHECK_EXC_MATCH":
                body = ops[index + 2:index + 4]
                if [b.opname for b in body] == ["POP_TOP", "RAISE_VARARGS"] and body[1].arg == 0:
                    if self._raised_at(body[1].offset):         # `except E: raise` lets it go on
                        return True
                elif not names <= _KEYED_ERRORS:
                    return True
                names = set()                   # the next clause starts where this one jumps
                index = self.at.get(ops[index + 1].argval, len(ops)) if index + 1 < len(ops) else len(ops)
                continue
            if ins.opname == "RERAISE":
                return self._raised_at(ins.offset)
            if ins.opname in ("RETURN_VALUE", "RETURN_CONST"):
                return True                     # a return in a finally clause drops the exception
            if ins.opname.startswith("LOAD_") and isinstance(ins.argval, str):
                names.add(ins.argval)
            index += 1
        return True


#: exceptions framework calls raise for what a signature's key fixes (types, not values): an
#: except clause naming only these cannot take an exception a replay raised where the trace did not
_KEYED_ERRORS = frozenset({"TypeError", "AttributeError", "KeyError", "NameError", "ImportError",
                           "ModuleNotFoundError", "NotImplementedError", "StopIteration", "builtins"})

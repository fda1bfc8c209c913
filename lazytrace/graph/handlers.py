"""Which framework calls of a trace an except clause of the traced code could catch, or a `with`
block whose context manager could swallow the error (or code on the error path acts: a finally
clause making calls), read from the code's exception table (Python 3.11+): a graph that replays
such a call after visible effects could neither undo them nor go on as the function does, so the
tracer makes it eager. Which manager a with block holds, and whether it may swallow: managers.py."""
from __future__ import annotations

import collections
import dis

from .managers import (DECORATED_CODE, DECORATING, KEYED_ERRORS, Manager, expression, may_act,
                       swallows_safely)
from .reads import UNWATCHED


def inside_except(frame, root, stop) -> bool:
    """Whether `frame` (the code making a framework call) or a frame below it down to the traced
    function's is inside a try block with an except clause, or a with block whose manager may
    swallow the error: if that call raised, the function would go on. `root`: the traced
    function's code; `stop`: the trace's own frame, where the walk ends (at `root`'s frame where
    there is none: a recursive call, or another function wrapped by contextlib's decorator, has
    that code too, and the frames of the traced function above it may catch). The tracer asks
    only where the walk of graph.reads (PythonReads.on_call) found a frame in a try or with block."""
    known = _TABLES
    while frame is not None and frame is not stop:
        code = frame.f_code
        table = known.get(id(code))
        if table is None:
            table = frame_table(code, frame.f_globals)
        if table is not False:
            for caught in table[frame.f_lasti]:
                if caught is True:
                    return True
                for manager in caught:
                    if swallows_safely(manager, frame):
                        return True
        if code is root and stop is None:
            return False
        frame = frame.f_back
    return False


class _Tables(dict):
    """id(code) -> its _Handlers, False for code lazytrace does not watch or without a try or with
    block. By id (a code object's hash walks its constants: ~0.7 us for a large function, at each
    frame of each call), each code held in `codes` while the dict lasts (no other code takes its
    id); replaced when full, never cleared (a walk in another thread may hold it)."""

    __slots__ = ("codes",)

    def __init__(self):
        super().__init__()
        self.codes: list = []


_TABLES = _Tables()


def frame_table(code, namespace):
    """The _Handlers of a frame's code, False for code of the frameworks, the standard library or
    lazytrace (they catch their own errors), but for the with block of contextlib's
    `ContextDecorator` (a manager used as a decorator: `@suppress_errors()`), whose manager is
    the user's."""
    global _TABLES
    if code is DECORATED_CODE:
        table = collections.defaultdict(lambda: ((DECORATING,),))
    else:
        watched = str(namespace.get("__name__", "")).partition(".")[0] not in UNWATCHED
        table = _Handlers(code) if code.co_exceptiontable and watched else False
    tables = _TABLES
    if len(tables) >= 4096:
        tables = _TABLES = _Tables()
    tables.codes.append(code)
    tables[id(code)] = table
    return table


class _Handlers(dict):
    """The try and with blocks of one code object, by instruction offset: what may take an
    exception raised there (the `caught` of handler_table of each block around it, none empty),
    filled at lookup. The exception table is read at once; what its handlers do is worked out from
    the bytecode (_HandlerWalk, with blocks' managers: ~250-550 us for a kornia function, most of
    it dis.get_instructions) only when a framework call is made inside one of its blocks: most are
    made outside (gaussian_blur2d's own `with` switching autocast off, on a path not taken)."""

    __slots__ = ("code", "entries", "walk", "caught")

    def __init__(self, code):
        super().__init__()
        self.code = code
        self.entries = list(dis.Bytecode(code).exception_entries)
        self.walk = None
        self.caught: dict = {}      # handler target -> _caught of it

    def __missing__(self, lasti) -> tuple:
        found = []
        for entry in self.entries:
            if entry.start <= lasti < entry.end:
                caught = self.caught.get(entry.target)
                if caught is None:
                    if self.walk is None:
                        self.walk = _HandlerWalk(list(dis.get_instructions(self.code)), self.entries, True)
                    caught = self.caught[entry.target] = _caught(self.walk, entry.target)
                if caught:
                    found.append(caught)
        found = self[lasti] = tuple(found)
        return found


def _caught(walk, target) -> bool | tuple:
    """True where an except clause may take what reaches the handler at `target`, else the
    managers of the with blocks it passes through (none: it is raised out)."""
    caught = walk.catches(target)
    return True if caught is True else tuple(walk.manager(t) for t in caught)


def handler_table(code, users: bool) -> tuple:
    """(start, end, caught) for the instruction ranges of `code` whose exceptions may not reach
    its caller where a graph's call could raise at a replay and not at the trace: `caught` is True
    where an except clause may take them (a bare except, `except Exception`, `RuntimeError`, a
    warning made an error ...; not `except TypeError`, which calls raise for what the key fixes),
    also through later clauses of one try and through the with blocks and finally clauses inside
    the try; else the managers (`Manager`, None if unreadable) of the with blocks they pass
    through, any of which may swallow them. `users`: the code is the user's (a library's), whose
    finally clauses making calls count as except clauses (their effects on the error path)."""
    ops = list(dis.get_instructions(code))
    entries = list(dis.Bytecode(code).exception_entries)
    walk = _HandlerWalk(ops, entries, users)
    table = []
    for entry in entries:
        caught = _caught(walk, entry.target)
        if caught:
            table.append((entry.start, entry.end, caught))
    return tuple(table)


class _HandlerWalk:
    """Whether an exception reaching a handler of one code object may be caught there, or where
    that handler raises it again (the end of a finally clause, of except clauses that did not
    match, of a with block whose manager let it go), by the handler around it: True, or the
    handler offsets of the with blocks it passes through (an empty tuple: it is raised out)."""

    def __init__(self, ops, entries, users: bool):
        self.ops, self.entries, self.users = ops, entries, users
        self.at = {ins.offset: index for index, ins in enumerate(ops)}
        self.known: dict = {}

    def catches(self, target) -> bool | tuple:
        known = self.known.get(target)
        if known is None:
            self.known[target] = ()             # (a cycle raises out)
            known = self.known[target] = self._walk(target)
        return known

    def manager(self, target) -> Manager | None:
        """What the with block whose handler is at `target` holds: its body's first range starts
        right after the BEFORE_WITH taking the manager. None where the block (its `as` target
        included) stores into the name or an attribute the manager was read from (it is looked
        up when a call is made, in the block)."""
        ranges = [(e.start, e.end) for e in self.entries if e.target == target]
        index = self.at.get(min(ranges)[0], 0) - 1
        if index < 0 or self.ops[index].opname != "BEFORE_WITH":
            return None
        manager = expression(self.ops, index)
        if manager is None:
            return None
        block = self.ops[index:self.at.get(target, len(self.ops))]
        block += [ins for ins in self.ops if any(start <= ins.offset < end for start, end in ranges)]
        for ins in block:
            if ins.opname.startswith(("STORE_", "DELETE_")) and (
                    ins.argval in manager.attrs if ins.opname.endswith("_ATTR") else ins.argval == manager.name):
                return None
        return manager

    def _raised_at(self, offset) -> bool | tuple:
        entry = next((e for e in self.entries if e.start <= offset < e.end), None)
        return () if entry is None else self.catches(entry.target)

    def _walk(self, target) -> bool | tuple:
        ops, index = self.ops, self.at.get(target)
        if index is None:
            return True                         # (not understood: counted)
        if ops[index].opname != "PUSH_EXC_INFO":
            return self._raised_at(target)      # an except clause's cleanup: raises again
        index += 1
        names: set = set()
        passed: tuple = ()                      # with blocks an `except E: raise` passes it to
        while index < len(ops):
            ins = ops[index]
            if ins.opname == "WITH_EXCEPT_START":
                again = next((i for i in ops[index:] if i.opname == "RERAISE"), None)
                outer = True if again is None else self._raised_at(again.offset)
                return True if outer is True else passed + (target,) + outer
            if ins.opname == "POP_TOP" and not names:
                return True                     # a bare `except:`
            if ins.opname == "CHECK_EG_MATCH":
                return True
            if ins.opname == "CHECK_EXC_MATCH":
                body = ops[index + 2:index + 4]
                if [b.opname for b in body] == ["POP_TOP", "RAISE_VARARGS"] and body[1].arg == 0:
                    outer = self._raised_at(body[1].offset)     # `except E: raise` lets it go on
                    if outer is True:
                        return True
                    passed += outer
                elif not names <= KEYED_ERRORS:
                    return True
                names = set()                   # the next clause starts where this one jumps
                index = self.at.get(ops[index + 1].argval, len(ops)) if index + 1 < len(ops) else len(ops)
                continue
            if ins.opname == "RERAISE":
                outer = self._raised_at(ins.offset)
                return True if outer is True else passed + outer
            if ins.opname in ("RETURN_VALUE", "RETURN_CONST"):
                return True                     # a return in a finally clause drops the exception
            if ins.opname == "RAISE_VARARGS" and ins.arg:
                return True                     # a finally clause raising another exception: as an
                                                # except clause doing so, it changes what the caller gets
            if self.users and may_act(ins):
                return True                     # a finally clause making calls: a replay that raised
                                                # would skip what it does on the error path (a write)
            if ins.opname.startswith("LOAD_") and isinstance(ins.argval, str):
                names.add(ins.argval)
            index += 1
        return True

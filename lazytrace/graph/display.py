"""Whether the text of an array (`str(x)`, `repr(x)`, `f"{x}"`) only goes to the screen or a log.

A graph drops what a function prints (print is no framework call), but text made from an array's
values can also feed the computation (`float(str(x.sum()))`, `str(x)[:4]` returned, a dict key):
baked, it would be the trace's text at every call. Text asked for by `print` itself or by the
logging module is for display; any other use is checked like a number read back (the tracer
guards it). The caller's bytecode tells who asks: the instruction its frame is running is the
`CALL` of the builtin `print` when print converts its arguments.
"""
from __future__ import annotations

import builtins
import dis
import functools

_SINKS = ("logging",)          # modules whose formatting of a message is only shown
_NOT_STACK = {"PRECALL", "KW_NAMES", "CACHE"}     # parts of the call itself (3.11)


def shown_only(frame, internal: tuple) -> bool:
    """Whether the code asking for the text (the first frame outside `internal` module prefixes,
    from `frame` outwards) is `print` or the logging module."""
    while frame is not None and str(frame.f_globals.get("__name__", "")).startswith(internal):
        frame = frame.f_back
    if frame is None:
        return False
    module = str(frame.f_globals.get("__name__", ""))
    if module.partition(".")[0] in _SINKS:
        return True
    return _calling_print(frame)


def _calling_print(frame) -> bool:
    """Whether `frame` is running a call of the builtin print, or an f-string whose text goes
    straight to one (`print(f"loss {x}")`)."""
    instructions, index = _instructions(frame.f_code)
    i = index.get(frame.f_lasti)
    if i is None:
        return False
    if instructions[i].opname == "FORMAT_VALUE":
        i = _consumer(instructions, i)
    return i is not None and instructions[i].opname == "CALL" and _callee_is_print(frame, instructions, i)


def _consumer(instructions, i):
    """The index of the CALL that takes the text an f-string part (FORMAT_VALUE at `i`) makes,
    following it through the string being built; None if anything else may use it."""
    depth = 0           # where the text is, from the top of the stack
    for j in range(i + 1, len(instructions)):
        ins = instructions[j]
        op = ins.opname
        if ins.is_jump_target:
            return None
        if op in _NOT_STACK:
            continue
        if op == "BUILD_STRING":            # joined into the f-string's text
            depth = 0 if depth < ins.arg else depth - ins.arg + 1
        elif op == "CALL":
            if depth < ins.arg:             # an argument of this call
                return j
            depth -= ins.arg + 1
        elif op == "FORMAT_VALUE":          # another part of the same f-string
            popped = 2 if (ins.arg or 0) & 4 else 1
            if depth < popped:
                return None
            depth -= popped - 1
        elif op.startswith("LOAD_") and op not in ("LOAD_ATTR", "LOAD_METHOD") or op == "PUSH_NULL":
            depth += dis.stack_effect(ins.opcode, ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None)
        else:
            return None
    return None


def _callee_is_print(frame, instructions, i) -> bool:
    """Whether the CALL at index `i` calls the builtin print (looked up by name): its callable is
    found by undoing the stack effects of the instructions before it (a jump in between: not
    known, so not print)."""
    above = instructions[i].arg or 0        # the arguments above the callable
    depth, j = 0, i
    while j > 0 and instructions[j - 1].opname in _NOT_STACK:      # this call's own PRECALL, KW_NAMES
        j -= 1
    for ins in reversed(instructions[:j]):
        if ins.is_jump_target or "JUMP" in ins.opname:
            return False
        depth += dis.stack_effect(ins.opcode, ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None)
        if depth > above:       # this instruction pushed the callable
            if ins.opname not in ("LOAD_GLOBAL", "LOAD_NAME") or ins.argval != "print":
                return False
            found = frame.f_globals.get("print", builtins.print)
            if ins.opname == "LOAD_NAME":          # module level, class bodies
                found = frame.f_locals.get("print", found)
            return found is builtins.print
    return False


@functools.lru_cache(maxsize=512)
def _instructions(code) -> tuple:
    """(instructions of `code`, offset -> index)."""
    instructions = list(dis.get_instructions(code))
    return instructions, {ins.offset: i for i, ins in enumerate(instructions)}


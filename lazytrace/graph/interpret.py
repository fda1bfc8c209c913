"""Run a plan once by walking its nodes, without generating code.

For a graph's first call where generating and compiling its source would cost more than the call
(a graph loaded from the persistent cache): the result is the one the generated function gives,
since both make the same calls with the same arguments; code is generated on the next call.
"""
from __future__ import annotations

from .codegen import GuardFailed, same_float, special_float
from .ir import Kind, Value
from .passes import Plan


def run(plan: Plan, leaves: list, backend):
    env = {id(v): leaf for v, leaf in zip(plan.inputs, leaves)}
    for v in plan.constants:
        env[id(v)] = v.obj

    def sub(obj):
        if isinstance(obj, Value):
            return env[id(obj)]
        tp = type(obj)
        if tp is tuple or tp is list:
            return tp([sub(x) for x in obj])
        if tp is dict:
            return {k: sub(v) for k, v in obj.items()}
        if tp is slice:
            return slice(sub(obj.start), sub(obj.stop), sub(obj.step))
        return obj

    for i, node in enumerate(plan.nodes):
        result = node.target(*sub(node.args), **sub(node.kwargs))
        if node.kind is Kind.GUARD:
            expected = node.expected
            if special_float(expected):
                failed = not same_float(expected, result)
            else:
                failed = (not result) if expected is True else bool(result) if expected is False else expected != result
            if failed:
                raise GuardFailed(i)
        elif node.result_structure == "single":
            if node.outputs:
                env[id(node.outputs[0])] = result
        else:
            for v in node.outputs:
                env[id(v)] = result[v.index]

    copies = {}

    def out(obj):
        if isinstance(obj, Value):
            value = env[id(obj)]
            if obj not in plan.cloned_outputs:
                return value
            if id(obj) not in copies:       # one copy per constant, however often it is returned
                copies[id(obj)] = backend.clone(value)
            return copies[id(obj)]
        tp = type(obj)
        if tp is tuple or tp is list:
            return tp([out(x) for x in obj])
        if isinstance(obj, tuple) and any(isinstance(x, Value) for x in obj):
            items = [out(x) for x in obj]
            return tp(*items) if hasattr(tp, "_fields") else tp(items)
        if isinstance(obj, dict):
            return tp((k, out(v)) for k, v in obj.items())
        return obj
    return out(plan.output_structure)

"""Prewarm: run a preloaded graph once on a rebuilt call of its signature, at import.

A framework's ops pay first-run costs in every new process (kernel selection, lazy
initialisation, allocator growth); a graph run once ahead of the user's first call pays them
there instead. Only graphs that provably change nothing the user can see are run: no random
draws (the global RNG streams must not move), no writes into their inputs or attributes, no
change of framework global state. Warnings they raise on those inputs (a division by zero, a
deprecation) are silenced: the user sees them at the call that earns them, not at import. Failures (a guard that does not hold for the constant-filled
inputs, an error) are logged and never surfaced: the user's own call decides.
"""
from __future__ import annotations

import logging
import warnings

from ..envflags import env_flag
from ..graph.codegen import GuardFailed
from ..graph.ir import Kind

log = logging.getLogger("lazytrace")

ENV_PREWARM = "LAZYTRACE_PREWARM"      # 1/true: prewarm= defaults to True


def wanted(setting) -> bool:
    """prewarm=True/False, or None: $LAZYTRACE_PREWARM."""
    if setting is None:
        return env_flag(ENV_PREWARM)
    if type(setting) is not bool:
        raise TypeError(f"prewarm= takes True, False or None, got {type(setting).__name__}")
    return setting


def refusal(plan) -> str | None:
    """Why running this plan on made-up inputs could change what the user sees (None: it cannot)."""
    kinds = {node.kind for node in plan.nodes}
    if Kind.GENERATOR in kinds:
        return "draws random numbers (the global RNG streams would move)"
    if Kind.STATE in kinds:
        return "changes framework global state (grad mode, autocast)"
    if Kind.SETATTR in kinds or Kind.GETATTR in kinds:
        return "reads or writes attributes of stateful objects"
    if plan.visible_effects:
        return "writes into its inputs or other arrays the caller can see"
    if plan.reads_environment:
        return "reads the process environment or facts of the machine"
    return None


#: runs of each graph: the second also warms the interpreter's specialisation of the code it runs
RUNS = 2


def run(graph, call, miss=None) -> str | None:
    """Run `call()` (the graph on a rebuilt call of its signature) RUNS times if the graph may be;
    None if it ran, else why it did not (logged). `miss`: what call() returns when its checks
    refuse the rebuilt call."""
    reason = refusal(graph._plan)
    if reason is None:
        try:
            with warnings.catch_warnings(), graph.backend.quiet():
                warnings.simplefilter("ignore")
                for _ in range(RUNS):
                    if call() is miss is not None:
                        reason = "its checks refuse the rebuilt call"
                        break
        except GuardFailed:
            reason = "a guard does not hold for constant-filled inputs"
        except Exception as exc:        # noqa: BLE001 - never surfaced: the user's call decides
            reason = f"raised {type(exc).__name__} on constant-filled inputs"
            log.debug("lazytrace: prewarm of %s raised", graph.__name__, exc_info=True)
    if reason is not None:
        log.info("lazytrace: %s not prewarmed: %s", graph.__name__, reason)
    return reason

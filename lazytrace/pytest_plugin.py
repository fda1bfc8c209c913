"""pytest plugin: run any test suite with libraries traced by lazytrace.enable().

    pytest --lazytrace=kornia               # several: --lazytrace=kornia,einops or repeat it
    [pytest]
    lazytrace = kornia                      # the same from an ini file

The import hook is installed before conftest files are imported and removed when pytest
ends; the terminal summary reports, per library, graph hits, traces and the calls that ran
eagerly with their reasons: a quick way to check that tracing a library keeps its tests green.
"""
from __future__ import annotations

import pytest

import lazytrace

_ENABLED = pytest.StashKey["lazytrace.importhook.Enabled"]()
_REASONS_SHOWN = 8


def pytest_addoption(parser):
    group = parser.getgroup("lazytrace", "lazily trace libraries (lazytrace.enable)")
    group.addoption("--lazytrace", action="append", default=[], metavar="PACKAGE[,PACKAGE...]",
                    help="trace these top-level packages for the whole run (lazytrace.enable)")
    parser.addini("lazytrace", type="args", default=[],
                  help="packages to trace for the whole run, as with --lazytrace")


def _packages(config) -> list[str]:
    names = [n for value in config.known_args_namespace.lazytrace for n in value.split(",")]
    names += config.getini("lazytrace")
    return list(dict.fromkeys(n.strip() for n in names if n.strip()))


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    packages = _packages(early_config)
    if packages:
        early_config.stash[_ENABLED] = lazytrace.enable(*packages)


def pytest_unconfigure(config):
    enabled = config.stash.get(_ENABLED, None)
    if enabled is not None:
        enabled.__exit__(None, None, None)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    enabled = config.stash.get(_ENABLED, None)
    if enabled is None:
        return
    write = terminalreporter.write_line
    terminalreporter.write_sep("=", "lazytrace summary")
    if not enabled.libraries:
        write("LAZYTRACE_DISABLE is set: nothing was traced, everything ran eagerly")
    for package, s in enabled.summary().items():
        write(f"{package}: {s['functions']} traced functions called {s['calls']} times: "
              f"{s['hits']} graph hits, {s['traces']} traces, {s['eager']} eager calls, "
              f"{s['guard_failures']} guard failures")
        reasons = sorted(s["reasons"].items(), key=lambda item: -sum(item[1].values()))
        for reason, per_function in reasons[:_REASONS_SHOWN]:
            names = sorted(per_function, key=per_function.get, reverse=True)
            more = f" and {len(names) - 3} more" if len(names) > 3 else ""
            write(f"  eager x{sum(per_function.values())}: {reason}  [{', '.join(names[:3])}{more}]")
        if len(reasons) > _REASONS_SHOWN:
            write(f"  ... {len(reasons) - _REASONS_SHOWN} more reasons")
        if s["skipped"]:
            write(f"  {len(s['skipped'])} functions left untraced (generators, include=/exclude=): "
                  f"{', '.join(sorted(s['skipped'])[:5])}{' ...' if len(s['skipped']) > 5 else ''}")

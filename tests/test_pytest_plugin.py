"""The pytest plugin: --lazytrace / ini option, hook before conftest, summary at the end."""
import os

import pytest

import lazytrace.backends.torch  # noqa: F401  imported before the in-process runs snapshot sys.modules

TESTS = os.path.dirname(__file__)

CONFTEST = """
import fakelib
import pytest
from lazytrace.importhook import ModuleProxy


@pytest.fixture
def imported_as_proxy():
    return isinstance(fakelib, ModuleProxy)
"""

TEST_FILE = """
import torch
from fakelib import double, make_ones

def test_traced(imported_as_proxy):
    assert imported_as_proxy
    for _ in range(3):
        assert torch.equal(double(torch.ones(2)), torch.full((2,), 2.0))
    make_ones(2)
"""


@pytest.fixture
def suite(pytester, monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_user=TEST_FILE)
    return pytester


def test_command_line_option_traces_from_conftest_on_and_reports(suite):
    result = suite.runpytest("--lazytrace=fakelib", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*= lazytrace summary =*",
                                 "fakelib: 2 traced functions called 4 times: 2 graph hits, 1 traces, 1 eager calls*",
                                 "  eager x1: no array arguments*[[]fakelib.ops.make_ones[]]"])


def test_ini_option(suite):
    suite.makeini("[pytest]\nlazytrace = fakelib\n")
    result = suite.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*= lazytrace summary =*", "fakelib: *2 graph hits*"])


def test_without_the_option_nothing_is_traced(suite):
    result = suite.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)          # conftest saw the real module
    assert "lazytrace summary" not in result.stdout.str()


def test_environment_variable_reported(suite, monkeypatch):
    monkeypatch.setenv("LAZYTRACE_DISABLE", "1")
    result = suite.runpytest("--lazytrace=fakelib", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)          # nothing installed: conftest saw the real module
    result.stdout.fnmatch_lines(["*= lazytrace summary =*", "LAZYTRACE_DISABLE is set: nothing was traced*"])

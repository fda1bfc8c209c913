"""The lazytrace command line."""
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from lazytrace import cli
from lazytrace.backends import get_backend


def test_argument_syntax():
    torch_backend = get_backend("torch")
    a = cli.parse_value("1x3x8x8", torch_backend, seed=0)
    assert a.shape == (1, 3, 8, 8) and a.dtype == torch.float32
    assert torch.equal(a, cli.parse_value("1x3x8x8", torch_backend, seed=0))          # seeded
    assert cli.parse_value("5:int64", torch_backend, 0).dtype == torch.int64
    assert cli.parse_value("scalar:float64", torch_backend, 0).shape == ()
    assert cli.parse_value("2x2:bool", torch_backend, 0).dtype == torch.bool
    assert cli.parse_value("2x3:float32", get_backend("numpy"), 0).dtype == np.float32
    assert cli.parse_value("(5, 5)", torch_backend, 0) == (5, 5)
    assert cli.parse_value("5", torch_backend, 0) == 5 and cli.parse_value("1.5", torch_backend, 0) == 1.5
    assert cli.parse_value("reflect", torch_backend, 0) == "reflect"
    assert cli.parse_value("None", torch_backend, 0) is None
    with pytest.raises(cli.UsageError, match="unknown torch dtype 'floot'"):
        cli.parse_value("1x3:floot", torch_backend, 0)
    with pytest.raises(cli.UsageError, match="cannot read '1x'"):
        cli.parse_value("1x", torch_backend, 0)


def test_resolve_names_what_is_missing():
    import kornia.filters
    assert cli.resolve("kornia.filters.gaussian_blur2d") is kornia.filters.gaussian_blur2d
    assert cli.resolve("kornia.filters:gaussian_blur2d") is kornia.filters.gaussian_blur2d
    with pytest.raises(cli.UsageError, match="has no attribute 'nope'"):
        cli.resolve("kornia.filters.nope")
    with pytest.raises(cli.UsageError, match="cannot import"):
        cli.resolve("no_such_package_xyz.f")


def test_show_prints_source_dropped_calls_and_timings(tmp_path, capsys):
    import kornia
    import lazytrace
    html = tmp_path / "blur.html"
    argv = ["show", "kornia.filters.gaussian_blur2d", "--args", "1x3x16x16", "(5, 5)", "(1.5, 1.5)",
            "--kwargs", "border_type=reflect", "--time-budget", "0.05"]
    if shutil.which("dot"):
        argv += ["--html", str(html)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    expected = lazytrace.trace_graph(kornia.filters.gaussian_blur2d, args=(torch.rand(1, 3, 16, 16), (5, 5), (1.5, 1.5)),
                                     kwargs={"border_type": "reflect"})
    assert out.startswith("kornia.filters.gaussian_blur2d(<1x3x16x16 float32>, (5, 5), (1.5, 1.5), "
                          "border_type='reflect')")
    assert expected.source in out
    assert f"folded:  {expected.dropped['folded']} calls" in out
    assert f"pruned:  {len(expected.dropped['pruned'])} calls" in out
    assert "timing:  eager " in out and "first call (trace)" in out
    if shutil.which("dot"):
        assert html.read_text().count("torch.conv2d") >= 2


def test_show_reports_errors_clearly(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["show", "kornia.filters.gaussian_blur2d", "--args", "1x3x8x8:floot"])
    assert exc.value.code == 2 and "unknown torch dtype 'floot'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["show", "kornia.filters.gaussian_blur2d", "--kwargs", "no-equals-sign"])
    assert "expected NAME=VALUE" in capsys.readouterr().err
    assert cli.main(["show", "kornia.filters.gaussian_blur2d", "--args", "1x3x8x8", "--no-timing"]) == 1
    assert "raised TypeError" in capsys.readouterr().out


def test_python_dash_m_runs_the_cli():
    done = subprocess.run([sys.executable, "-m", "lazytrace", "show", "numpy.multiply", "--framework", "numpy",
                           "--args", "3:float32", "2.0", "--no-timing"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # the graph is renamed so it does not shadow the numpy.multiply it calls
    assert "def multiply_graph(a0):" in done.stdout and "v0 = multiply(a0, 2.0)" in done.stdout
    assert "kept:    1 calls" in done.stdout

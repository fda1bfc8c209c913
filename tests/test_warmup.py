"""Warm-up scripts and the `lazytrace warmup` / `lazytrace cache` commands."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import lazytrace
from lazytrace import cli
from lazytrace.persist import store_for
from lazytrace.warmups import WarmupError, find_script

LIBRARY = '''
import torch

def brighten(x, amount):
    return (x + amount).clamp(0, 1)

def blur_rows(x):
    k = torch.tensor([0.25, 0.5, 0.25]).reshape(1, 1, 1, 3).repeat(x.shape[1], 1, 1, 1)
    return torch.conv2d(torch.nn.functional.pad(x, (1, 1, 0, 0), mode="replicate"), k, groups=x.shape[1])

GAIN = torch.tensor(2.0)

def gain(x):
    return x * GAIN

def to_numpy_sum(x):
    return torch.from_numpy(x.numpy() * 2)
'''

SCRIPT = '''
import torch
import {name} as lib

for size in [(1, 3, 8, 8), (2, 3, 16, 16)]:
    x = torch.rand(size)
    lib.brighten(x, 0.1)
    lib.blur_rows(x)
    lib.gain(x)
    lib.to_numpy_sum(x)
'''


@pytest.fixture
def lib(temp_library, tmp_path):
    name, folder = temp_library(LIBRARY)
    (tmp_path / "warm.py").write_text(SCRIPT.format(name=name))
    return name, folder, tmp_path / "warm.py"


def python(folder, *args, code=None):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-c", textwrap.dedent(code)] if code else [sys.executable, "-m", "lazytrace", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr
    return done


def test_warmup_command_then_a_fresh_process_replays_without_tracing(lib, tmp_path):
    name, folder, script = lib
    cache = tmp_path / "cache"
    done = python(folder, "warmup", name, "--script", str(script), "--cache-dir", str(cache))
    report = done.stdout
    assert f"warm-up of {name}" in report and "4 functions, 8 graphs traced" in report
    assert "4 stored" in report                              # brighten and blur_rows, two sizes each
    assert "reached by itself" in report and "[gain]" in report        # not stored, with the reason
    assert "to_numpy_sum" in report and "ran eagerly" in report        # a fallback, with the reason
    assert "warming" in done.stderr                          # the progress bar

    result = python(folder, code=f"""
        import json, sys, torch, lazytrace
        with lazytrace.enable({name!r}, cache={str(cache)!r}) as enabled:
            import {name} as lib
            real = sys.modules[{name!r}]
            same = []
            for size in [(1, 3, 8, 8), (2, 3, 16, 16)]:
                x = torch.rand(size)                       # new inputs
                same.append(torch.equal(lib.brighten(x, 0.1), real.brighten(x, 0.1)))
                same.append(torch.equal(lib.blur_rows(x), real.blur_rows(x)))
            print(json.dumps({{"same": same, **enabled.summary()[{name!r}]}}))
    """)
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert all(summary["same"])
    assert summary["traces"] == 0 and summary["loaded"] == 4 and summary["hits"] == 4


def test_python_api_reports_and_second_warmup_loads(lib, tmp_path):
    name, folder, script = lib
    cache = tmp_path / "cache"
    first = lazytrace.warmup(name, script=script, cache=cache, progress=False)
    assert (first.functions, first.traces, first.stored, first.loaded) == (4, 8, 4, 0)
    assert first.seconds > 0 and first.cache_dir == cache
    assert any("reached by itself" in reason for reason in first.not_stored)
    assert any("hands array memory" in reason for reason in first.eager)
    sys.modules.pop(name, None)
    second = lazytrace.warmup(name, script=script, cache=cache, progress=False)
    assert second.loaded == 4 and second.stored == 0 and second.traces == 4    # gain twice, numpy twice


def test_entry_point_warmups_are_found(lib, tmp_path):
    name, folder, script = lib
    (folder / f"{name}_warm.py").write_text(script.read_text())
    dist = folder / f"{name}_warmups-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}-warmups\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[lazytrace.warmups]\n{name} = {name}_warm\n")
    where, (kind, target) = find_script(name)
    assert kind == "module" and target == f"{name}_warm" and "entry point" in where
    report = lazytrace.warmup(name, cache=tmp_path / "cache", progress=False)
    assert report.stored == 4


def test_missing_scripts_are_clear_errors(tmp_path, capsys):
    with pytest.raises(WarmupError, match="no warm-up script for 'no_such_module_xyz'"):
        lazytrace.warmup("no_such_module_xyz", cache=tmp_path)
    with pytest.raises(WarmupError, match="does not exist"):
        lazytrace.warmup("kornia", script=tmp_path / "missing.py", cache=tmp_path)
    with pytest.raises(SystemExit) as exc:
        cli.main(["warmup", "no_such_module_xyz", "--cache-dir", str(tmp_path)])
    assert exc.value.code == 2 and "no warm-up script" in capsys.readouterr().err


@pytest.mark.parametrize("size", ["abc", "-5", "0", "inf", "1e400", "1e-9"])
def test_a_bad_size_bound_in_the_environment_is_a_clear_error(tmp_path, capsys, monkeypatch, size):
    """LAZYTRACE_CACHE_MAX_MB that is not a positive size: an error naming the variable (a usage
    error from the commands, not a traceback; 'inf' raised OverflowError, '-5' a message without it)."""
    monkeypatch.setenv("LAZYTRACE_CACHE_MAX_MB", size)
    with pytest.raises(ValueError, match=f"LAZYTRACE_CACHE_MAX_MB='{size}'"):
        store_for(tmp_path)
    for argv in (["cache", "info", "--cache-dir", str(tmp_path)], ["warmup", "kornia", "--cache-dir", str(tmp_path)]):
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code == 2 and f"error: LAZYTRACE_CACHE_MAX_MB='{size}'" in capsys.readouterr().err


def test_cache_ls_info_clear(lib, tmp_path, capsys):
    name, folder, script = lib
    cache = tmp_path / "cache"
    lazytrace.warmup(name, script=script, cache=cache, progress=False)
    other = cache / "otherlib"
    other.mkdir()
    (other / "f-0000.lzt").write_bytes(b"x")
    assert cli.main(["cache", "ls", "--cache-dir", str(cache)]) == 0
    listing = capsys.readouterr().out
    assert listing.count(f"  {name}  brighten  ") == 2 and "5 files" in listing
    assert cli.main(["cache", "--cache-dir", str(cache), "info"]) == 0
    info = capsys.readouterr().out
    assert f"directory: {cache}" in info and "in 5 files" in info
    assert cli.main(["cache", "clear", name, "--cache-dir", str(cache)]) == 0
    assert "removed 4 files" in capsys.readouterr().out
    assert [p.name for p in cache.glob("*/*.lzt")] == ["f-0000.lzt"]
    assert cli.main(["cache", "clear", "--cache-dir", str(cache)]) == 0
    assert list(cache.glob("*/*.lzt")) == []


def test_shipped_kornia_warmup_stores_graphs(tmp_path):
    pytest.importorskip("kornia")
    report = lazytrace.warmup("kornia", cache=tmp_path, progress=False)
    assert report.script.endswith("warmup_kornia.py")
    assert report.functions >= 30 and report.stored >= 100
    assert set(report.not_stored) <= {"a module's method: its graphs take the module's parameters live"}

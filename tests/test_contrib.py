"""Every script in contrib/ runs as its documentation shows (issue 17).

The systemd unit has its test in test_homes.py; the upgrade script's real
run (--run) in test_maint.py.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HERE, Env, harness

CONTRIB = HERE.parent / "contrib"


def shim(directory: Path, name: str, trace: Path) -> None:
    """A command `name` first on PATH that only records that it was called."""
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text(f'#!/bin/sh\necho "{name} $*" >>{trace}\n')
    path.chmod(0o755)


def test_maint_upgrade_as_documented_is_a_dry_run(env: Env, tmp_path: Path) -> None:
    for n in ("api", "web"):
        assert env.run("new", n, "--", harness("sleeper.sh")).returncode == 0
        assert env.run("wake", n, "go", "--window", "1").returncode == 0
    trace = tmp_path / "called"
    shim(tmp_path / "bin", "npm", trace)
    home_before = sorted(p.name for p in Path(env.vars["HOME"]).rglob("*"))
    # The command line of the script's header, word for word.
    r = env.run(
        "maint",
        "--stop",
        "api",
        "--stop",
        "web",
        "--resume",
        "api",
        "--resume",
        "web",
        "--",
        str(CONTRIB / "maint-upgrade.sh"),
        "api",
        "web",
        extra={"PATH": f"{tmp_path / 'bin'}:{env.vars['PATH']}"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "would run: spex maint-op stop api",
        "would run: spex maint-op stop web",
        "would run: bash -c npm install -g @anthropic-ai/claude-code@latest",
        "would run: spex maint-op resume api",
        "would run: spex maint-op resume web",
        "dry run: nothing was changed (pass --run or set UPGRADE_RUN=1 to do it)",
    ]
    assert not trace.exists()
    for n in ("api", "web"):
        shown = json.loads(env.run("show", n, "--json").stdout)
        assert shown["state"] == "running" and shown["turn"]["state"] == "running"
    assert sorted(p.name for p in Path(env.vars["HOME"]).rglob("*")) == home_before


def test_maint_upgrade_outside_a_lease_refuses(env: Env) -> None:
    r = subprocess.run(
        [str(CONTRIB / "maint-upgrade.sh"), "api"],
        capture_output=True,
        text=True,
        env=env.vars,
        check=False,
    )
    assert r.returncode == 2 and "run me under spex maint" in r.stderr


def test_demo_script(env: Env) -> None:
    r = subprocess.run(
        [sys.executable, str(CONTRIB / "demo.py")],
        capture_output=True,
        text=True,
        env=env.vars,
        timeout=240,
        check=False,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "$ spex fanout" in r.stdout
    # Every command it shows can be pasted into a shell as printed.
    shown = [line[2:] for line in r.stdout.splitlines() if line.startswith("$ spex ")]
    assert "spex wake demo-1 'refactor the parser'" in shown, shown
    assert all(shlex.split(line)[0] == "spex" for line in shown)
    names = {s["name"] for s in json.loads(env.run("ls", "--json").stdout)}
    assert {"demo-1", "demo-2", "demo-3"} <= names


# Builds a wheel and a venv and installs into it: minutes on a loaded machine.
@pytest.mark.timeout(900)
def test_wheel_check_script(env: Env, tmp_path: Path) -> None:
    root = HERE.parent
    wheels = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(root)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("spexsup-*.whl")
    r = subprocess.run(
        ["bash", str(CONTRIB / "wheel-check.sh"), str(wheel)],
        capture_output=True,
        text=True,
        env={**env.vars, "PATH": os.environ["PATH"]},
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stdout.rstrip().endswith("wheel check: ok")

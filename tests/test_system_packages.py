"""contrib/system-packages.sh, which `make test` and its kin run first: a
user who may not install is told the one apt-get line to run, and nothing
starts (exit 2)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "contrib" / "system-packages.sh"
# The system's own tools (not this venv's python, which `nobody` cannot reach).
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
# What the script needs to run, and what it looks for (zsh left out below).
TOOLS = [
    "bash",
    "python3",
    "id",
    "apt-get",
    "tmux",
    "git",
    "chattr",
    "ssh",
    "systemd-analyze",
    "chromium",
    "bwrap",
    "socat",
]


def path_without(root: Path, missing: set[str]) -> str:
    """A PATH of symlinks to the tools the machine has, less `missing`."""
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool, path=SYSTEM_PATH)
        assert found is not None, f"{tool} is not installed (make test installs it)"
        if tool not in missing:
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_a_user_who_cannot_install_is_told_the_line_and_nothing_runs() -> None:
    if os.geteuid() != 0:
        pytest.fail("runs the script as another user: needs root (CI and make test run as root)")
    # Where `nobody` may read (pytest's tmp_path is root's alone).
    with tempfile.TemporaryDirectory(prefix="spx-pkgs") as where:
        root = Path(where)
        root.chmod(0o755)
        script = root / "system-packages.sh"
        shutil.copy(SCRIPT, script)
        path = path_without(root, {"chromium"})  # zsh is not among TOOLS at all
        r = subprocess.run(
            ["/usr/sbin/runuser", "-u", "nobody", "--", "/bin/bash", str(script), "test"],
            capture_output=True,
            text=True,
            env={"PATH": path, "HOME": where},
            check=False,
        )
    assert (r.returncode, r.stdout) == (2, ""), r
    assert r.stderr == (
        "spexsup: missing system packages; run: sudo apt-get install -y zsh chromium\n"
    )


def test_nothing_is_missing_after_make_test_set_up() -> None:
    r = subprocess.run(["bash", str(SCRIPT), "test"], capture_output=True, text=True, check=False)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")

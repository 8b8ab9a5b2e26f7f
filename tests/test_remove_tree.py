"""`paths.remove_tree`, which `spex rm` removes a session's turns with, when
another process removes the same files at the same time (a wake undoing its
admission while `rm --force` runs: `make stress` met it): what the other one
removed is gone, as asked, never a path that "could not be removed"."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# Each of two processes, released together through a pipe, removes the tree.
REMOVER = """
import json, os, sys
from pathlib import Path
from spexsup.paths import remove_tree
os.read(0, 1)
print(json.dumps(remove_tree(Path(sys.argv[1]))))
"""


def tree(root: Path, dirs: int = 40, files: int = 250) -> Path:
    top = root / "turns"
    for d in range(dirs):
        (top / f"t{d:03d}").mkdir(parents=True)
        for f in range(files):
            (top / f"t{d:03d}" / f"f{f:03d}").write_bytes(b"x")
    return top


def test_two_removers_of_one_tree_each_find_it_removed(tmp_path: Path) -> None:
    top = tree(tmp_path)
    removers = [
        subprocess.Popen(
            [sys.executable, "-c", REMOVER, str(top)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for remover in removers:
        assert remover.stdin is not None
        remover.stdin.write("g")
        remover.stdin.close()  # both start on the same event
    said = []
    for remover in removers:
        assert remover.stdout is not None
        said.append(json.loads(remover.stdout.read()))
        assert remover.wait(120) == 0
    assert said == [[], []]
    assert not top.exists()

"""The outcome marker's grammar (DESIGN §2) and the turn directory's readers,
as pure functions: what every reader of a turn's end relies on."""

from __future__ import annotations

from pathlib import Path

import pytest

from spexsup.pane import marker, turndir
from spexsup.pane.marker import Marker, Stage


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (b"running:123\n", Marker(Stage.RUNNING, pid=123, text="running:123\n")),
        (b"limited:9:1765000000", Marker(Stage.LIMITED, pid=9, reset=1765000000,
                                         text="limited:9:1765000000")),
        (b"reporting:77:1\n", Marker(Stage.REPORTING, pid=77, rc=1, text="reporting:77:1\n")),
        (b"exit:0:cas:0\n", Marker(Stage.EXIT, rc=0, cas=0, text="exit:0:cas:0\n")),
        (b"exit:255:cas:4", Marker(Stage.EXIT, rc=255, cas=4, text="exit:255:cas:4")),
        # The final markers may say the wrapper's run time (ms) and the output lost.
        (b"reporting:77:1:ran:4012", Marker(Stage.REPORTING, pid=77, rc=1, ran=4.012,
                                             text="reporting:77:1:ran:4012")),
        (b"exit:0:cas:1:ran:5:lost:1300000\n",
         Marker(Stage.EXIT, rc=0, cas=1, ran=0.005, lost=1300000,
                text="exit:0:cas:1:ran:5:lost:1300000\n")),
        (b"exit:0:cas:0:lost:?", Marker(Stage.EXIT, rc=0, cas=0, lost=marker.UNKNOWN_AMOUNT,
                                        text="exit:0:cas:0:lost:?")),
    ],
)  # fmt: skip
def test_every_stage_of_the_grammar_parses(raw: bytes, want: Marker) -> None:
    assert marker.parse(raw) == want


@pytest.mark.parametrize(
    "raw",
    [b"\n", b"running:", b"running:-1", b"running:12a", b"exit:0", b"exit:0:cas:",
     b"exit:1000:cas:0", b"running:1\n\n", b" running:1", b"RUNNING:1", b"reporting:1",
     b"running:12345678901", b"limited:1", "running:\u0661".encode(),
     b"running:1:ran:5", b"verifying:1:lost:3", b"limited:1:2:ran:3", b"exit:0:cas:0:ran:",
     b"exit:0:cas:0:lost:3:ran:5", b"exit:0:cas:0:ran:1234567890123", b"exit:0:cas:0:lost:-1",
     b"reporting:1:0:ran:5:lost:??"],
)  # fmt: skip
def test_anything_else_is_invalid_never_a_guess(raw: bytes) -> None:
    assert marker.parse(raw).stage is Stage.INVALID


def test_read_tells_no_marker_from_a_torn_or_oversized_one(tmp_path: Path) -> None:
    assert marker.read(tmp_path).stage is Stage.NONE
    # The wrapper's first marker, created before its one write lands: none yet.
    (tmp_path / turndir.OUTCOME).write_bytes(b"")
    assert marker.read(tmp_path) == Marker(Stage.NONE)
    (tmp_path / turndir.OUTCOME).write_bytes(b"exit:0:c")  # a write cut short
    assert marker.read(tmp_path).stage is Stage.INVALID
    (tmp_path / turndir.OUTCOME).write_bytes(b"running:1" + b" " * 100)
    assert marker.read(tmp_path).stage is Stage.INVALID
    (tmp_path / turndir.OUTCOME).write_bytes(b"exit:3:cas:0\n")
    assert marker.read(tmp_path) == Marker(Stage.EXIT, rc=3, cas=0, text="exit:3:cas:0\n")


def test_turndir_reads_what_is_there_and_nothing_when_it_is_not(tmp_path: Path) -> None:
    assert turndir.meta(tmp_path) == {}
    assert turndir.last_line(tmp_path) is None and turndir.output_end(tmp_path) == ""
    (tmp_path / turndir.META).write_text("[1, 2]")  # valid JSON, not an object
    assert turndir.meta(tmp_path) == {}
    (tmp_path / turndir.META).write_text('{"harness": "demo"}')
    assert turndir.meta(tmp_path) == {"harness": "demo"}
    (tmp_path / turndir.OUTPUT).write_bytes(b"first\n\n  second  \n")
    assert turndir.last_line(tmp_path) == "second"
    assert turndir.output_tail(tmp_path) == "first | second"
    assert turndir.output_end(tmp_path, size=9) == "second  \n"
    assert turndir.path(tmp_path, "s", "t") == tmp_path / "turns" / "s" / "t"
    assert turndir.first_line(tmp_path / turndir.OUTPUT) == "first"


def test_the_lost_output_flag_says_how_much_or_that_some_was() -> None:
    assert marker.lost_flag(None) is None
    assert marker.lost_flag(marker.parse(b"exit:0:cas:0:ran:9")) is None
    assert marker.lost_flag(marker.parse(b"exit:0:cas:0:lost:12")) == "output-lost:12"
    assert marker.lost_flag(marker.parse(b"exit:0:cas:0:lost:?")) == "output-lost"

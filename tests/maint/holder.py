#!/usr/bin/env python3
"""A maintenance command that stages an outsider's attempts. In $DIR:
writes `pid`; once the broker's token is waiting unread, creates `unread`
and blocks on the fifo `go1`; then takes the token, creates `held`, blocks on
`go2`; gives the token back and asks for `stop $SESSION` itself, writing the
outcome to `outcome`."""

import os
import select
from pathlib import Path

from spexsup.adapters.maint_client import request

d = Path(os.environ["DIR"])
(d / "pid").write_text(str(os.getpid()))
select.select([5], [], [])  # the token is there, and stays unread
(d / "unread").touch()
(d / "go1").read_text()
token = os.read(5, 1)
(d / "held").touch()
(d / "go2").read_text()
os.write(5, token)
(d / "outcome").write_text(request("stop", os.environ["SESSION"]).outcome)

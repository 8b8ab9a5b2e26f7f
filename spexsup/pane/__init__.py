"""What runs inside the pane: the short-lived processes `shell/turn.sh` starts.

`turndir` owns the turn directory (its path, its file names, `meta.json`, the
output's tail, the wrapper's liveness); `marker` reads the outcome marker;
`report` records a turn's end; `limit` waits out a usage limit; `deadline`
ends a turn past its time limit; `pretty` renders a CLI's JSON events;
`snapshot` records the work tree a turn starts from. Nothing here imports
the CLI, typer, rich, libtmux or watchdog: these run on every turn, and
their start-up time is part of every verdict (tests/test_layers.py).
"""

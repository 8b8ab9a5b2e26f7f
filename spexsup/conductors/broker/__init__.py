"""`spex maint -- CMD`: run CMD under a maintenance lease, brokering its requests
(DESIGN §5).

- `protocol`: the frames on the inherited fds 3, 4, 5 and the turn token;
- `holder`: the lease holder's side, taking, heartbeating and releasing it;
- `command`: the command's processes, spawned, signalled and killed;
- `serve`: the broker itself, `run` from acquire to exit code.

Each imports only those listed before it. The client's side, for scripts the
command runs, is `spexsup.adapters.maint_client`.
"""

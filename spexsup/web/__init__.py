"""`spex serve`: the web door onto the same core as `cli/` (DESIGN §18).

`app` holds the routes and the guard every request passes, `views` reads
through the functions the CLI's commands call, `actions` runs the `spex`
commands for the buttons, `live` turns the event log into SSE, `auth` keeps
the token, its cookie and the CSRF tokens. Imported by `spex serve` only.
"""

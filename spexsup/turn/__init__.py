"""The turn wing: one turn's life, one module per stage.

`admit` (may it start; its directory prepared) → `launch` (the wrapper in the
pane) → `confirm` (is it really running) — conducted by `wake`; `reconcile`
settles turns whose wrapper is gone; `stop` ends one and holds the session,
`remove` deletes a session; `read` is the public view, the log and `wait`.
Every state change goes through `spexsup.state.ledger`; what runs inside the pane
lives in `spexsup.pane`.
"""

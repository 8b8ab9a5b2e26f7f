"""Doors onto the core other than the command line: each a thin layer, like `cli/`.

Nothing here has logic of its own; a door says what the CLI says, the way
its clients read it. The CLI never imports a door at start-up: each is
imported inside the one command that opens it.
"""

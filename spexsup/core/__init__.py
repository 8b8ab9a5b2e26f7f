"""The session core: the handle (`spex.Spex`), a session's record, its
worktree, a wave's document, and what follows a commit (hooks, retention)."""

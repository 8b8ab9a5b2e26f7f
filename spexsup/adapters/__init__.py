"""Adapters: the outside world as spex meets it (processes, inotify, tmux, the
agent CLIs and what they print, git, cron, bubblewrap, other hosts)."""

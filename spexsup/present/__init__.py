"""What both doors render, below `cli/` and `web/`: tables and lines
(`render`), a wave's progress and counts (`progress`), spend (`spend`), and
lines that fit a terminal (`fit`). Neither door imports the other."""

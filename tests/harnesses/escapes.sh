#!/bin/bash
# A hostile agent's output: an OSC 52 clipboard write, a window title, a
# screen clear, a terminal reset, the 8-bit CSI (U+009B, and a raw 0x9b
# byte), BEL and other C0 controls; it fails with them in its last line.
printf 'hello \033]52;c;cHduZWQ=\007 \033]0;pwned-title\033\\ \033[2J\033[H \302\2332J \233H \007\033c\001\n'
printf 'error: \033]52;c;cHduZWQ=\007boom\302\233H \033]0;pwned-title\007 \033[31mred\033[0m\007 done\n'
exit 3

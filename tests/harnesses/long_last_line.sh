#!/bin/bash
# Fails (exit 3) after a last line of LAST_BYTES (300 000) bytes of `z` with
# no newline: the failure's message is that line, cut.
echo "starting"
head -c "${LAST_BYTES:-300000}" /dev/zero | tr '\0' z
exit 3

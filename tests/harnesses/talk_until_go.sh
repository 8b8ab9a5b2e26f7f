#!/usr/bin/env bash
# Says it started, works until the file $GO exists, says so and exits 0.
echo "started on: $*"
while [ ! -e "$GO" ]; do sleep 0.05; done
echo "finished <b>bold</b> & done"

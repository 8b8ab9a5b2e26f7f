#!/usr/bin/env bash
# Fails like a harness whose database is busy, twice, then works.
count_file="$COUNT_FILE"
n=$(cat "$count_file" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" >"$count_file"
if [ "$n" -le 2 ]; then
    echo "Error: database is locked"
    exit 1
fi
echo "attempt $n ran"
exit 0

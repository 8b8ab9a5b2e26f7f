#!/usr/bin/env bash
# Writes a marker outside the grammar.
printf 'started-ish' >"$1/outcome"
exec sleep 300

#!/usr/bin/env bash
# Outlives any confirmation window, like an agent at work.
echo "working on: $*"
exec sleep 300

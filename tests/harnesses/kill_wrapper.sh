#!/usr/bin/env bash
# The wrapper (our parent) is SIGKILLed at startup.
kill -9 "$PPID"
sleep 300

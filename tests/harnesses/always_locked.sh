#!/usr/bin/env bash
echo "Error: SQLITE_BUSY: database is locked"
exit 1

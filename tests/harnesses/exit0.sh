#!/usr/bin/env bash
echo "all good"
exit 0

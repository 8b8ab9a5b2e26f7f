#!/usr/bin/env bash
echo "step one"
echo "boom: something broke" >&2
exit 7

#!/bin/bash
# A claude-style stream with lines no reader may hold whole: after its init
# event, one line of FLOOD_BYTES (50 MB) of `x`, then an assistant event of
# 3 MB (its text one long line), then a short answer and the result.
bytes=${FLOOD_BYTES:-50000000}
id=6f1e2d3c-0000-4000-8000-0000000000f1
printf '%s\n' "{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"$id\"}"
head -c "$bytes" /dev/zero | tr '\0' x
printf '\n{"type":"assistant","message":{"content":[{"type":"text","text":"'
head -c 3000000 /dev/zero | tr '\0' y
printf '"}]}}\n'
printf '%s\n' '{"type":"assistant","message":{"content":[{"type":"text","text":"after the flood"}]}}'
printf '%s\n' "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"after the flood\",\"num_turns\":1,\"session_id\":\"$id\"}"

#!/bin/bash
# A claude-style stream whose failure message (the `result` of an error)
# carries an OSC 52 clipboard write, a title, a screen clear and the 8-bit
# CSI as JSON escapes: the message spex shows is the agent's own text.
printf '%s\n' '{"type":"system","subtype":"init","session_id":"6f1e2d3c-0000-4000-8000-000000000001"}'
printf '%s\n' '{"type":"result","subtype":"success","is_error":true,"result":"API Error: \u001b]52;c;cHduZWQ=\u0007boom\u009b2J \u001b]0;pwned-title\u0007\u001b[2J\u001bc\u0007 json-done","session_id":"6f1e2d3c-0000-4000-8000-000000000001"}'
exit 1

"""A fake model server on 127.0.0.1 that the real agent CLIs can talk to.

Standard library only. It speaks just enough of three wire protocols:

- Anthropic Messages (`POST /v1/messages`, SSE or JSON; `count_tokens`): claude
- OpenAI Responses (`POST /v1/responses`, SSE): codex
- OpenAI Chat Completions (`POST /v1/chat/completions`, SSE; `GET /v1/models`):
  opencode, pi

A test scripts the replies: a list consumed in order by the *main* requests
(those that offer the model tools: the agent loop's own calls), with a
default once the list is empty. Side requests (claude's title or quota
probes, opencode's title generation: no tools) get a short text answer and
never consume the script. Each reply is one of `text`, `tool`/`shell`
(a tool call, answered by the next main request, which carries its result),
`error` (an HTTP error in the provider's own form, see `ERRORS`) or `stall`
(headers and the first event, then nothing until the server is closed).

Every request is logged in memory and, with `log`, to a JSONL file (path,
headers minus credentials, parsed body). As a context manager:

    with ModelServer([Reply.text("hi")]) as server:
        ... server.url ...
        server.user_texts()   # the user message texts of the last main request

From a shell: `python tests/modelserver.py --port 8765 --script replies.json`
where the script is a JSON list like `[{"text": "hi"}, {"shell": "ls"},
{"error": "rate_limit", "retry_after": 1}, {"stall": true}]`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SECRET_HEADERS = {"authorization", "x-api-key", "cookie", "proxy-authorization"}

ANTHROPIC = "anthropic"
RESPONSES = "responses"
CHAT = "chat"


@dataclass
class Reply:
    """One scripted answer to a main request."""

    kind: str  # text | tool | shell | error | stall
    text: str = ""
    tool: str = ""  # a tool name; for "shell", chosen from the request's tools
    args: dict[str, Any] = field(default_factory=dict)
    command: str = ""
    error: str = ""  # a name in ERRORS, or "" with status/body given
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    retry_after: float | None = None
    resets_in: int = 3600

    @staticmethod
    def answer(text: str) -> Reply:
        return Reply("text", text=text)

    @staticmethod
    def call(tool: str, args: dict[str, Any]) -> Reply:
        return Reply("tool", tool=tool, args=args)

    @staticmethod
    def shell(command: str) -> Reply:
        """A call of the CLI's own shell tool (Bash, bash, shell, exec_command…)."""
        return Reply("shell", command=command)

    @staticmethod
    def fail(
        error: str = "",
        status: int = 0,
        headers: dict[str, str] | None = None,
        body: Any = None,
        retry_after: float | None = None,
        resets_in: int = 3600,
    ) -> Reply:
        return Reply(
            "error",
            error=error,
            status=status,
            headers=headers or {},
            body=body,
            retry_after=retry_after,
            resets_in=resets_in,
        )

    @staticmethod
    def stall() -> Reply:
        return Reply("stall")

    @staticmethod
    def from_json(spec: dict[str, Any]) -> Reply:
        if "text" in spec:
            return Reply.answer(str(spec["text"]))
        if "shell" in spec:
            return Reply.shell(str(spec["shell"]))
        if "tool" in spec:
            return Reply.call(str(spec["tool"]), dict(spec.get("args") or {}))
        if "error" in spec or "status" in spec:
            return Reply.fail(
                str(spec.get("error") or ""),
                int(spec.get("status") or 0),
                dict(spec.get("headers") or {}),
                spec.get("body"),
                spec.get("retry_after"),
                int(spec.get("resets_in") or 3600),
            )
        if spec.get("stall"):
            return Reply.stall()
        raise ValueError(f"unknown reply {spec!r}")


# --- errors, in each provider's own form --------------------------------------


def _anthropic_error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_fake"}


def _openai_error(message: str, kind: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def error_response(reply: Reply, api: str, model: str) -> tuple[int, dict[str, str], Any]:
    """(status, headers, body) of a scripted error, shaped for the request's API."""
    now = int(time.time())
    retry = reply.retry_after
    headers: dict[str, str] = {}
    name = reply.error
    status = reply.status
    body: Any
    if name == "rate_limit":  # a plain 429 rate limit
        status = status or 429
        retry = 1 if retry is None else retry
        if api == ANTHROPIC:
            reset = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + int(retry)))
            headers = {
                "anthropic-ratelimit-requests-limit": "50",
                "anthropic-ratelimit-requests-remaining": "0",
                "anthropic-ratelimit-requests-reset": reset,
                "anthropic-ratelimit-tokens-limit": "40000",
                "anthropic-ratelimit-tokens-remaining": "0",
                "anthropic-ratelimit-tokens-reset": reset,
            }
            body = _anthropic_error(
                "rate_limit_error",
                "This request would exceed your account's rate limit. Please try again later.",
            )
        else:
            headers = {
                "x-ratelimit-limit-requests": "500",
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": f"{retry}s",
            }
            body = _openai_error(
                f"Rate limit reached for {model} in organization org-fake on requests per min"
                f" (RPM): Limit 500, Used 500, Requested 1. Please try again in {retry}s.",
                "requests",
                "rate_limit_exceeded",
            )
    elif name == "insufficient_quota":  # OpenAI's out-of-credit 429
        status = status or 429
        body = _openai_error(
            "You exceeded your current quota, please check your plan and billing details.",
            "insufficient_quota",
            "insufficient_quota",
        )
    elif name == "usage_limit":  # ChatGPT plan / Claude subscription usage limit
        status = status or 429
        resets = now + reply.resets_in
        if api == ANTHROPIC:
            # What the Claude subscription backend sends: the unified rate-limit
            # headers say rejected and when the window resets.
            headers = {
                "anthropic-ratelimit-unified-status": "rejected",
                "anthropic-ratelimit-unified-reset": str(resets),
                "anthropic-ratelimit-unified-5h-status": "rejected",
                "anthropic-ratelimit-unified-5h-reset": str(resets),
                "anthropic-ratelimit-unified-representative-claim": "five_hour",
                "anthropic-ratelimit-unified-fallback-percentage": "0.5",
                "anthropic-ratelimit-unified-overage-status": "rejected",
                "anthropic-ratelimit-unified-overage-disabled-reason": "org_level_disabled",
            }
            body = _anthropic_error("rate_limit_error", "Error")
        else:
            body = {
                "error": {
                    "type": "usage_limit_reached",
                    "message": "The usage limit has been reached",
                    "plan_type": "plus",
                    "resets_at": resets,
                    "resets_in_seconds": reply.resets_in,
                }
            }
    elif name == "server_error":
        status = status or 500
        if api == ANTHROPIC:
            body = _anthropic_error("api_error", "Internal server error")
        else:
            body = _openai_error(
                "The server had an error while processing your request. Sorry about that!",
                "server_error",
                None,
            )
    elif name == "overloaded":
        status = status or (529 if api == ANTHROPIC else 503)
        if api == ANTHROPIC:
            body = _anthropic_error("overloaded_error", "Overloaded")
        else:
            body = _openai_error(
                "The engine is currently overloaded, please try again later",
                "server_error",
                None,
            )
    elif name == "model_not_found":
        status = status or 404
        if api == ANTHROPIC:
            body = _anthropic_error("not_found_error", f"model: {model}")
        else:
            body = _openai_error(
                f"The model `{model}` does not exist or you do not have access to it.",
                "invalid_request_error",
                "model_not_found",
            )
    else:
        status = status or 500
        body = reply.body
    if reply.body is not None:
        body = reply.body
    if retry is not None:
        headers["retry-after"] = str(int(retry)) if float(retry).is_integer() else str(retry)
    headers.update(reply.headers)
    return status, headers, body


ERRORS = (
    "rate_limit",
    "insufficient_quota",
    "usage_limit",
    "server_error",
    "overloaded",
    "model_not_found",
)


# --- the log ------------------------------------------------------------------


@dataclass
class Request:
    index: int
    time: float
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    main: bool
    reply: str = ""

    @property
    def api(self) -> str | None:
        return api_of(self.path)

    def json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "time": self.time,
            "method": self.method,
            "path": self.path,
            "headers": self.headers,
            "body": self.body,
            "main": self.main,
            "reply": self.reply,
        }

    def tool_names(self) -> list[str]:
        return tool_names(self.body)

    def user_texts(self) -> list[str]:
        """Every text the user role carries, in order (tool results left out)."""
        return user_texts(self.path, self.body)

    def messages(self) -> list[Any]:
        body = self.body if isinstance(self.body, dict) else {}
        items = body.get("messages") if "messages" in body else body.get("input")
        return list(items) if isinstance(items, list) else []


def api_of(path: str) -> str | None:
    p = path.split("?", 1)[0].rstrip("/")
    if p.endswith("/messages"):
        return ANTHROPIC
    if p.endswith("/responses"):
        return RESPONSES
    if p.endswith("/chat/completions"):
        return CHAT
    return None


def tool_names(body: Any) -> list[str]:
    if not isinstance(body, dict):
        return []
    names = []
    for tool in body.get("tools") or ():
        if not isinstance(tool, dict):
            continue
        fn = tool.get("function")
        name = fn.get("name") if isinstance(fn, dict) else tool.get("name") or tool.get("type")
        if isinstance(name, str):
            names.append(name)
    return names


def _texts(content: Any, kinds: tuple[str, ...]) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [
        part["text"]
        for part in content or ()
        if isinstance(part, dict)
        and part.get("type") in kinds
        and isinstance(part.get("text"), str)
    ]


def user_texts(path: str, body: Any) -> list[str]:
    if not isinstance(body, dict):
        return []
    api = api_of(path)
    out: list[str] = []
    if api == RESPONSES:
        items = body.get("input")
        if isinstance(items, str):
            return [items]
        for item in items or ():
            if isinstance(item, dict) and item.get("role") == "user":
                out += _texts(item.get("content"), ("input_text", "text"))
        return out
    for message in body.get("messages") or ():
        if isinstance(message, dict) and message.get("role") == "user":
            out += _texts(message.get("content"), ("text", "input_text"))
    return out


# --- the server -----------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: ModelServer
    conns: set[socket.socket]

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, addr = super().get_request()
        self.conns.add(conn)
        return conn, addr

    def shutdown_request(self, request: Any) -> None:
        self.conns.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up (a CLI killed mid-stream) is not news

    def drop_all(self) -> None:
        for conn in list(self.conns):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


def _sse(handler: BaseHTTPRequestHandler, event: str | None, data: Any) -> None:
    text = data if isinstance(data, str) else json.dumps(data)
    chunk = (f"event: {event}\n" if event else "") + f"data: {text}\n\n"
    _chunk(handler, chunk.encode())


def _chunk(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    handler.wfile.flush()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- plumbing

    def _body(self) -> Any:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            raw = self._read_chunked()
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")

    def _read_chunked(self) -> bytes:
        out = b""
        while True:
            size = int(self.rfile.readline().strip().split(b";")[0] or b"0", 16)
            if size == 0:
                self.rfile.readline()
                return out
            out += self.rfile.read(size)
            self.rfile.readline()

    def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", "req_fake")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _start_sse(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def _end_sse(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _stall(self) -> None:
        """Block until the server closes, then drop the connection."""
        owner = self.server.owner
        owner.closing.wait()
        self.close_connection = True

    # -- verbs

    def do_HEAD(self) -> None:
        self._json(200, {})

    def do_GET(self) -> None:
        owner = self.server.owner
        owner.record(self, None, main=False, reply="get")
        path = self.path.split("?", 1)[0].rstrip("/")
        if path.endswith("/models"):
            ids = [owner.model, *owner.extra_models]
            self._json(
                200,
                {
                    "object": "list",
                    "data": [
                        {"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in ids
                    ],
                    "models": [],
                },
            )
        else:
            self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    def do_POST(self) -> None:
        owner = self.server.owner
        body = self._body()
        path = self.path.split("?", 1)[0]
        api = api_of(path)
        if path.rstrip("/").endswith("/count_tokens"):
            owner.record(self, body, main=False, reply="count_tokens")
            self._json(200, {"input_tokens": owner.count(body)})
            return
        if api is None:
            owner.record(self, body, main=False, reply="404")
            self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
            return
        streamed = bool(isinstance(body, dict) and body.get("stream"))
        main = owner.is_main(api, body)
        reply = owner.next_reply() if main else Reply.answer(owner.side_text)
        request = owner.record(self, body, main=main, reply=reply.kind)
        model = str(body.get("model") if isinstance(body, dict) else "") or owner.model
        if reply.kind == "error":
            status, headers, err = error_response(reply, api, model)
            if owner.retry_after_ms is not None and "retry-after-ms" not in headers:
                headers["retry-after-ms"] = str(owner.retry_after_ms)
            request.reply = f"error {status} {reply.error}"
            self._json(status, err, headers)
            return
        if reply.kind in ("tool", "shell"):
            name, args = owner.tool_call(reply, request)
            request.reply = f"tool {name} {json.dumps(args)}"
            calls = [(name, args)]
            text = ""
        else:
            calls = []
            text = reply.text
        stall = reply.kind == "stall"
        if api == ANTHROPIC:
            self._anthropic(model, text, calls, streamed, stall, owner.count(body))
        elif api == RESPONSES:
            self._responses(model, text, calls, stall, owner.count(body))
        else:
            self._chat(model, text, calls, streamed, stall, owner.count(body))

    # -- Anthropic Messages

    def _anthropic(
        self,
        model: str,
        text: str,
        calls: list[tuple[str, dict[str, Any]]],
        streamed: bool,
        stall: bool,
        tokens: int,
    ) -> None:
        mid = "msg_" + uuid.uuid4().hex[:24]
        usage = {
            "input_tokens": tokens,
            "output_tokens": 1,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        blocks: list[dict[str, Any]] = []
        if text or not calls:
            blocks.append({"type": "text", "text": text})
        for name, args in calls:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": "toolu_" + uuid.uuid4().hex[:24],
                    "name": name,
                    "input": args,
                }
            )
        stop = "tool_use" if calls else "end_turn"
        if not streamed and not stall:
            message = {
                "id": mid,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": blocks,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {**usage, "output_tokens": max(1, len(text) // 4)},
            }
            self._json(200, message)
            return
        self._start_sse()
        start: dict[str, Any] = {
            "id": mid,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        _sse(self, "message_start", {"type": "message_start", "message": start})
        if stall:
            self._stall()
            return
        for i, block in enumerate(blocks):
            empty = (
                {"type": "text", "text": ""} if block["type"] == "text" else {**block, "input": {}}
            )
            _sse(
                self,
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": empty},
            )
            if block["type"] == "text":
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            _sse(
                self,
                "content_block_delta",
                {"type": "content_block_delta", "index": i, "delta": delta},
            )
            _sse(self, "content_block_stop", {"type": "content_block_stop", "index": i})
        _sse(
            self,
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": max(1, len(text) // 4)},
            },
        )
        _sse(self, "message_stop", {"type": "message_stop"})
        self._end_sse()

    # -- OpenAI Responses

    def _responses(
        self,
        model: str,
        text: str,
        calls: list[tuple[str, dict[str, Any]]],
        stall: bool,
        tokens: int,
    ) -> None:
        rid = "resp_" + uuid.uuid4().hex[:24]
        self._start_sse()
        response: dict[str, Any] = {
            "id": rid,
            "object": "response",
            "created_at": int(time.time()),
            "status": "in_progress",
            "model": model,
            "output": [],
        }
        _sse(self, "response.created", {"type": "response.created", "response": response})
        if stall:
            self._stall()
            return
        items: list[dict[str, Any]] = []
        if text or not calls:
            mid = "msg_" + uuid.uuid4().hex[:24]
            item = {
                "type": "message",
                "id": mid,
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            _sse(
                self,
                "response.output_item.added",
                {"type": "response.output_item.added", "output_index": 0, "item": item},
            )
            _sse(
                self,
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "item_id": mid,
                    "output_index": 0,
                    "content_index": 0,
                    "delta": text,
                },
            )
            done = {
                **item,
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
            _sse(
                self,
                "response.output_item.done",
                {"type": "response.output_item.done", "output_index": 0, "item": done},
            )
            items.append(done)
        for name, args in calls:
            index = len(items)
            item = {
                "type": "function_call",
                "id": "fc_" + uuid.uuid4().hex[:24],
                "call_id": "call_" + uuid.uuid4().hex[:24],
                "name": name,
                "arguments": json.dumps(args),
                "status": "completed",
            }
            _sse(
                self,
                "response.output_item.added",
                {"type": "response.output_item.added", "output_index": index, "item": item},
            )
            _sse(
                self,
                "response.output_item.done",
                {"type": "response.output_item.done", "output_index": index, "item": item},
            )
            items.append(item)
        out = max(1, len(text) // 4)
        completed = {
            **response,
            "status": "completed",
            "output": items,
            "usage": {
                "input_tokens": tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": out,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": tokens + out,
            },
        }
        _sse(self, "response.completed", {"type": "response.completed", "response": completed})
        self._end_sse()

    # -- OpenAI Chat Completions

    def _chat(
        self,
        model: str,
        text: str,
        calls: list[tuple[str, dict[str, Any]]],
        streamed: bool,
        stall: bool,
        tokens: int,
    ) -> None:
        cid = "chatcmpl-" + uuid.uuid4().hex[:24]
        out = max(1, len(text) // 4)
        usage = {"prompt_tokens": tokens, "completion_tokens": out, "total_tokens": tokens + out}
        tool_calls = [
            {
                "index": i,
                "id": "call_" + uuid.uuid4().hex[:24],
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(calls)
        ]
        finish = "tool_calls" if calls else "stop"
        base = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }
        if not streamed and not stall:
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if tool_calls:
                message["tool_calls"] = [
                    {k: v for k, v in c.items() if k != "index"} for c in tool_calls
                ]
            self._json(
                200,
                {
                    **base,
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                },
            )
            return
        self._start_sse()

        def chunk(delta: dict[str, Any], reason: str | None = None) -> None:
            _sse(
                self,
                None,
                {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]},
            )

        chunk({"role": "assistant", "content": ""})
        if stall:
            self._stall()
            return
        if text:
            chunk({"content": text})
        if tool_calls:
            chunk({"tool_calls": tool_calls})
        chunk({}, finish)
        _sse(self, None, {**base, "choices": [], "usage": usage})
        _sse(self, None, "[DONE]")
        self._end_sse()


# Shell tools as each CLI names them, and how each wants its command.
def _shell_args(name: str, command: str) -> dict[str, Any]:
    if name == "shell":  # codex's classic shell tool: an argv
        return {"command": ["bash", "-lc", command]}
    if name == "exec_command":  # codex's unified exec
        return {"cmd": command}
    if name in ("Bash", "bash"):
        return {"command": command, "description": "Run a command"}
    return {"command": command}


SHELL_TOOLS = ("Bash", "bash", "shell_command", "shell", "exec_command", "local_shell")


class ModelServer:
    """The fake model server; a context manager that serves on a thread."""

    def __init__(
        self,
        script: list[Reply] | None = None,
        default: Reply | None = None,
        log: Path | None = None,
        port: int = 0,
        model: str = "fake-model",
        side_text: str = "Fake title",
        retry_after_ms: int | None = None,
    ) -> None:
        self.script = list(script or [])
        self.default = default or Reply.answer("ok")
        self.log_path = log
        self.model = model
        self.extra_models: list[str] = []
        self.side_text = side_text
        # Sent with every error when set: the CLIs' HTTP clients (Anthropic's and
        # OpenAI's SDKs, opencode's retry loop) then retry after that many ms.
        self.retry_after_ms = retry_after_ms
        self.closing = threading.Event()
        self._lock = threading.Lock()
        self._requests: list[Request] = []
        self._httpd = _Server(("127.0.0.1", port), _Handler)
        self._httpd.owner = self
        self._httpd.conns = set()
        self._thread: threading.Thread | None = None

    # -- lifecycle

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ModelServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; stalled streams end (their connections are dropped)."""
        self.closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd.drop_all()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def serve_forever(self) -> None:
        try:
            self._httpd.serve_forever()
        finally:
            self.closing.set()
            self._httpd.server_close()
            self._httpd.drop_all()

    # -- the script

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self.script.extend(replies)

    def next_reply(self) -> Reply:
        with self._lock:
            return self.script.pop(0) if self.script else self.default

    def is_main(self, api: str, body: Any) -> bool:
        """A request of the agent loop itself: it offers the model tools.
        Title, topic and quota probes offer none."""
        return isinstance(body, dict) and bool(body.get("tools"))

    @staticmethod
    def count(body: Any) -> int:
        return max(1, len(json.dumps(body)) // 4) if body is not None else 1

    def tool_call(self, reply: Reply, request: Request) -> tuple[str, dict[str, Any]]:
        if reply.kind == "tool":
            return reply.tool, reply.args
        offered = request.tool_names()
        for name in SHELL_TOOLS:
            if name in offered:
                return name, _shell_args(name, reply.command)
        return "bash", {"command": reply.command}

    # -- the log

    def record(self, handler: BaseHTTPRequestHandler, body: Any, main: bool, reply: str) -> Request:
        headers = {
            k.lower(): v for k, v in handler.headers.items() if k.lower() not in SECRET_HEADERS
        }
        with self._lock:
            request = Request(
                len(self._requests),
                time.time(),
                handler.command,
                handler.path,
                headers,
                body,
                main,
                reply,
            )
            self._requests.append(request)
            if self.log_path is not None:
                with self.log_path.open("a") as f:
                    f.write(json.dumps(request.json()) + "\n")
        return request

    def requests(self, path: str | None = None, main: bool | None = None) -> list[Request]:
        with self._lock:
            found = list(self._requests)
        return [
            r
            for r in found
            if (path is None or r.path.split("?", 1)[0].rstrip("/").endswith(path.rstrip("/")))
            and (main is None or r.main == main)
        ]

    def main_requests(self) -> list[Request]:
        return self.requests(main=True)

    def last_main(self) -> Request | None:
        found = self.main_requests()
        return found[-1] if found else None

    def user_texts(self) -> list[str]:
        """The user message texts of the last main request."""
        last = self.last_main()
        return last.user_texts() if last is not None else []

    def saw_prompt(self, prompt: str, request: Request | None = None) -> bool:
        """The prompt arrived byte-exact: one user text is exactly it."""
        target = request or self.last_main()
        return target is not None and prompt in target.user_texts()

    def wait_for(self, count: int, timeout: float = 60, main: bool = True) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.requests(main=main if main else None)) >= count:
                return True
            time.sleep(0.05)
        return False


def requests_in(log: Path) -> Iterator[dict[str, Any]]:
    """The requests a server logged to a JSONL file."""
    with log.open() as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--script", type=Path, help="a JSON list of replies")
    parser.add_argument(
        "--default", default='{"text": "ok"}', help="the reply once the script is empty"
    )
    parser.add_argument("--log", type=Path, help="a JSONL file to log requests to")
    parser.add_argument("--model", default="fake-model")
    args = parser.parse_args()
    script = (
        [Reply.from_json(s) for s in json.loads(args.script.read_text())] if args.script else []
    )
    server = ModelServer(
        script, Reply.from_json(json.loads(args.default)), args.log, args.port, args.model
    )
    print(f"serving on {server.url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()

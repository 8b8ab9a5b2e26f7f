"""A sandboxed turn's network gate (DESIGN §19), run by the wrapper outside
the sandbox for the length of the turn:

    python -m spexsup.pane.netgate TURN_DIR WRAPPER_PID

The sandbox has a network namespace of its own, with nothing but loopback;
its only way out is what this gate serves on Unix sockets in `TURN_DIR/net/`,
which the wrapper binds into the sandbox and bridges to loopback ports there
(socat, as Anthropic's srt does):

- `proxy.sock`: an HTTP proxy (CONNECT, and plain `GET http://…`) that
  connects only to the allowed hosts; any other is answered 403 and its
  name appended to `TURN_DIR/denied-net`;
- `port-N.sock`: a plain pipe to 127.0.0.1:N, for each allowed loopback
  host (a local model server named by a `*_BASE_URL`).

It also listens on a loopback port of the host nobody is allowed to reach
(the canary): the probe must fail to connect to it.

The allowed hosts (`sandbox-gate`, JSON, by the launcher) are extended by
the `*_BASE_URL`s of the environment the wrapper passes (the login shell's
and the session's). On start it prints one line, `ready CANARY PORT…`,
and it ends when its wrapper is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path

from spexsup.sandbox import base_url_hosts

LOOPBACK = ("127.0.0.1", "localhost", "::1")
# A request head larger than this is no proxy request.
MAX_HEAD = 64 * 1024


def split_host(entry: str) -> tuple[str, int | None]:
    """`host[:port]` (`[v6]:port` too), the port None when absent."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    host, sep, port = entry.rpartition(":")
    if sep and port.isdigit() and ":" not in host:
        return host, int(port)
    return entry, None


class Allowed:
    """The hosts a turn may reach: `host`, `host:port`, `*.domain`."""

    def __init__(self, entries: list[str]) -> None:
        self.rules = [split_host(e.lower()) for e in entries if e]

    def __contains__(self, target: tuple[str, int]) -> bool:
        host, port = target[0].lower().rstrip("."), target[1]
        for rule_host, rule_port in self.rules:
            if rule_port is not None and rule_port != port:
                continue
            if rule_host == host:
                return True
            if rule_host.startswith("*.") and host.endswith(rule_host[1:]):
                return True
        return False

    def loopback_ports(self) -> list[int]:
        return sorted({p for h, p in self.rules if h in LOOPBACK and p is not None})


class Gate:
    def __init__(self, turn_dir: Path, allowed: Allowed) -> None:
        self.turn_dir = turn_dir
        self.allowed = allowed
        self.denied: set[str] = set()

    def deny(self, host: str) -> None:
        if host in self.denied:
            return
        self.denied.add(host)
        with contextlib.suppress(OSError), (self.turn_dir / "denied-net").open("a") as f:
            f.write(host + "\n")

    async def proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        line, _, rest = head.partition(b"\r\n")
        try:
            method, target, version = line.decode("latin-1").split(" ", 2)
        except ValueError:
            await self.answer(writer, 400, "Bad Request")
            return
        if method.upper() == "CONNECT":
            host, port = split_host(target)
            forward = b""
        else:
            if not target.startswith("http://"):
                await self.answer(writer, 400, "Bad Request")
                return
            authority, _, path = target[len("http://") :].partition("/")
            host, port = split_host(authority)
            port = port or 80
            forward = f"{method} /{path} {version}\r\n".encode("latin-1") + rest
        if port is None or (host.lower(), port) not in self.allowed:
            self.deny(host if port is None else f"{host}:{port}")
            await self.answer(writer, 403, "Connection blocked by network allowlist")
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            await self.answer(writer, 502, "Bad Gateway")
            return
        if forward:
            up_writer.write(forward)
        else:
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        await pipe_both(reader, writer, up_reader, up_writer)

    async def answer(self, writer: asyncio.StreamWriter, code: int, reason: str) -> None:
        body = f"{reason}\n".encode()
        writer.write(
            f"HTTP/1.1 {code} {reason}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()


async def pipe_both(
    a_reader: asyncio.StreamReader,
    a_writer: asyncio.StreamWriter,
    b_reader: asyncio.StreamReader,
    b_writer: asyncio.StreamWriter,
) -> None:
    await asyncio.gather(pipe(a_reader, b_writer), pipe(b_reader, a_writer))
    a_writer.close()
    b_writer.close()


def port_pipe(
    port: int,
) -> asyncio.Future[None] | object:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return
        await pipe_both(reader, writer, up_reader, up_writer)

    return serve


async def watch_wrapper(pid: int) -> None:
    """Return once the wrapper is gone (the gate must not outlive its turn)."""
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            pass
        await asyncio.sleep(0.5)


async def run(turn_dir: Path, wrapper: int) -> None:
    spec = json.loads((turn_dir / "sandbox-gate").read_text())
    allowed = Allowed([*spec.get("hosts", []), *base_url_hosts(os.environ)])
    gate = Gate(turn_dir, allowed)
    net = turn_dir / "net"
    net.mkdir(mode=0o700, exist_ok=True)
    servers = [await asyncio.start_unix_server(gate.proxy, path=str(net / "proxy.sock"))]
    ports = allowed.loopback_ports()
    for port in ports:
        serve = port_pipe(port)
        servers.append(await asyncio.start_unix_server(serve, path=str(net / f"port-{port}.sock")))  # type: ignore[arg-type]

    async def canary(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            (turn_dir / "sandbox-breach").write_text("connected to the canary port\n")
        writer.close()

    canary_server = await asyncio.start_server(canary, "127.0.0.1", 0)
    servers.append(canary_server)
    canary_port = canary_server.sockets[0].getsockname()[1]
    print("ready", canary_port, *ports, flush=True)
    sys.stdout.close()
    await watch_wrapper(wrapper)
    for server in servers:
        server.close()


def main(argv: list[str]) -> int:
    turn_dir, wrapper = Path(argv[0]), int(argv[1])
    try:
        asyncio.run(run(turn_dir, wrapper))
    except (OSError, ValueError) as e:
        print(f"error {e}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

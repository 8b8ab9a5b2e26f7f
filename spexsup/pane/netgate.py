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

The allowed hosts (`sandbox-gate`, one a line, by the launcher) are extended by
the `*_BASE_URL`s of the environment the wrapper passes (the login shell's
and the session's). Once it serves, it writes `net/ready` (`CANARY PORT…`,
atomically), which the sandbox waits for; it ends when its wrapper is gone
(or is ended with the harness).
"""

# Plain os.path and try/except: pathlib and contextlib would cost every
# sandboxed turn's start 5 ms more (see the imports below).
# ruff: noqa: PTH100, PTH103, PTH104, PTH118, PTH123, SIM105
from __future__ import annotations

import os
import socket
import sys
import threading
import time

from spexsup import lazyre

TYPE_CHECKING = False  # not typing's: importing typing costs 8 ms
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

# Imports only these: every sandboxed turn's harness waits for the gate
# (asyncio alone would add 70 ms, pathlib and json 7 ms).
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# A request head larger than this is no proxy request.
MAX_HEAD = 64 * 1024


def base_url_hosts(env: Mapping[str, str]) -> list[str]:
    """`host:port` of every `*_BASE_URL` in `env` (a local model server)."""
    found = []
    for key, value in sorted(env.items()):
        scheme, sep, rest = value.partition("://")
        if not key.endswith("_BASE_URL") or not sep:
            continue
        authority = rest.split("/", 1)[0].rsplit("@", 1)[-1]
        host, port = split_host(authority)
        if host and (port or scheme in ("http", "https")):
            found.append(f"{host}:{port or (443 if scheme == 'https' else 80)}")
    return found


# A DNS name or an IPv4 or IPv6 address: what a request may name as its host.
HOST_NAME = lazyre.compile(r"[A-Za-z0-9._-]{1,253}|[0-9A-Fa-f:.]{2,45}")


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
    """The gate's servers, each an accept loop in a thread; a thread per
    connection, blocking: a turn opens a handful (asyncio alone would add
    70 ms to every sandboxed turn's start)."""

    def __init__(self, turn_dir: str, allowed: Allowed) -> None:
        self.turn_dir = turn_dir
        self.allowed = allowed
        self.denied: set[str] = set()
        self.lock = threading.Lock()

    def deny(self, host: str) -> None:
        with self.lock:
            if host in self.denied:
                return
            self.denied.add(host)
            try:
                with open(os.path.join(self.turn_dir, "denied-net"), "a") as f:
                    f.write(host + "\n")
            except OSError:
                pass

    def serve(self, server: socket.socket, handle: Callable[[socket.socket], None]) -> None:
        def accept_loop() -> None:
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                threading.Thread(target=self.guarded, args=(handle, conn), daemon=True).start()

        threading.Thread(target=accept_loop, daemon=True).start()

    @staticmethod
    def guarded(handle: Callable[[socket.socket], None], conn: socket.socket) -> None:
        try:
            handle(conn)
        except OSError:
            pass
        finally:
            conn.close()

    def proxy(self, conn: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            data = conn.recv(65536)
            if not data or len(head) > MAX_HEAD:
                return
            head += data
        head, _, early = head.partition(b"\r\n\r\n")
        line, _, headers = head.partition(b"\r\n")
        try:
            method, target, version = line.decode("latin-1").split(" ", 2)
        except ValueError:
            answer(conn, 400, "Bad Request")
            return
        if method.upper() == "CONNECT":
            host, port = split_host(target)
            forward = early
        elif target.startswith("http://"):
            authority, _, path = target[len("http://") :].partition("/")
            host, port = split_host(authority)
            port = port or 80
            start = f"{method} /{path} {version}\r\n".encode("latin-1")
            forward = start + headers + b"\r\n\r\n" + early
        else:
            answer(conn, 400, "Bad Request")
            return
        if not HOST_NAME.fullmatch(host) or not 0 < (port or 1) < 65536:
            # No host at all: nothing is recorded of it, for what the gate
            # records becomes a flag of the turn (a line, an escape).
            answer(conn, 400, "Bad Request")
            return
        if port is None or (host.lower(), port) not in self.allowed:
            self.deny(host if port is None else f"{host}:{port}")
            answer(conn, 403, "Connection blocked by network allowlist")
            return
        try:
            upstream = socket.create_connection((host, port), timeout=30)
        except OSError:
            answer(conn, 502, "Bad Gateway")
            return
        upstream.settimeout(None)
        if method.upper() == "CONNECT":
            conn.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        if forward:
            upstream.sendall(forward)
        splice(conn, upstream)


def answer(conn: socket.socket, code: int, reason: str) -> None:
    body = f"{reason}\n".encode()
    conn.sendall(
        f"HTTP/1.1 {code} {reason}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n".encode()
        + body
    )


def splice(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until both sides are done; then close `b`."""

    def copy(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    back = threading.Thread(target=copy, args=(b, a), daemon=True)
    back.start()
    copy(a, b)
    back.join()
    b.close()


def port_pipe(port: int) -> Callable[[socket.socket], None]:
    def handle(conn: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", port), timeout=30)
        upstream.settimeout(None)
        splice(conn, upstream)

    return handle


def unix_server(path: str) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    return server


def wrapper_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def run(turn_dir: str, wrapper: int) -> None:
    with open(os.path.join(turn_dir, "sandbox-gate")) as f:
        hosts = f.read().split()
    allowed = Allowed([*hosts, *base_url_hosts(os.environ)])
    gate = Gate(turn_dir, allowed)
    net = os.path.join(turn_dir, "net")
    os.makedirs(net, mode=0o700, exist_ok=True)
    # Bound by names relative to it: a socket's path may be 107 bytes at
    # most, and a turn's dir in a deep state home (a long session name) is
    # longer. Inside the sandbox the dir is the short /tmp/.spex-net.
    os.chdir(net)
    gate.serve(unix_server("proxy.sock"), gate.proxy)
    ports = allowed.loopback_ports()
    for port in ports:
        gate.serve(unix_server(f"port-{port}.sock"), port_pipe(port))
    canary = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    canary.bind(("127.0.0.1", 0))
    canary.listen(8)

    def breached(conn: socket.socket) -> None:
        with open(os.path.join(turn_dir, "sandbox-breach"), "w") as f:
            f.write("connected to the canary port\n")

    gate.serve(canary, breached)
    with open(os.path.join(net, "ready.tmp"), "w") as f:
        f.write(" ".join(map(str, [canary.getsockname()[1], *ports])) + "\n")
    os.rename(os.path.join(net, "ready.tmp"), os.path.join(net, "ready"))
    while wrapper_alive(wrapper):
        time.sleep(0.5)


def main(argv: list[str]) -> int:
    turn_dir, wrapper = os.path.abspath(argv[0]), int(argv[1])
    try:
        run(turn_dir, wrapper)
    except (OSError, ValueError) as e:
        print(f"spex netgate: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""The sandbox's network gate (spexsup.pane.netgate) on its own: a real gate
process, real Unix sockets, a real HTTP server on loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import retry_until


class Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from the model server\n"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_gate_in_a_deep_turn_dir_serves_its_sockets(tmp_path: Path, server: int) -> None:
    """A socket's path may be 107 bytes at most; a turn's dir under a deep
    state home with a long session name makes `net/port-N.sock` longer.
    The gate used to fail there (`AF_UNIX path too long`: every turn of such
    a session failed `sandbox`); it binds its sockets by relative names."""
    turn = tmp_path / "state" / "turns" / ("a-long-session-name-" * 3) / "20261205T151503Z-036065"
    turn.mkdir(parents=True)
    assert len(str(turn / "net" / f"port-{server}.sock")) > 107
    (turn / "sandbox-gate").write_text(f"127.0.0.1:{server}\n")
    wrapper = subprocess.Popen(["sleep", "300"])
    gate = subprocess.Popen(
        [sys.executable, "-m", "spexsup.pane.netgate", str(turn), str(wrapper.pid)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        net = turn / "net"
        assert retry_until(lambda: (net / "ready").exists() or gate.poll() is not None)
        assert gate.poll() is None, gate.communicate()[1]
        words = (net / "ready").read_text().split()
        assert words[1:] == [str(server)], words

        def ask(name: str, request: bytes) -> str:
            """`request` on the socket `name` in `net` (its own path is
            too long to connect to: the dir by a descriptor), the answer."""
            fd = os.open(net, os.O_RDONLY | os.O_DIRECTORY)
            try:
                with socket.socket(socket.AF_UNIX) as sock:
                    sock.settimeout(20)
                    sock.connect(f"/proc/self/fd/{fd}/{name}")
                    sock.sendall(request)
                    return sock.makefile("rb").read().decode()
            finally:
                os.close(fd)

        # The bridge to the allowed loopback port reaches the server.
        answer = ask(f"port-{server}.sock", b"GET / HTTP/1.0\r\n\r\n")
        assert answer.endswith("\r\n\r\nhello from the model server\n"), answer
        # The proxy refuses a host that is not allowed, and records it.
        answer = ask("proxy.sock", b"GET http://blocked.example/ HTTP/1.0\r\n\r\n")
        assert "blocked by network allowlist" in answer, answer
        assert (turn / "denied-net").read_text() == "blocked.example:80\n"
    finally:
        wrapper.kill()
        wrapper.wait()
        ended = gate.wait(timeout=30)
    # The gate ends once its wrapper is gone.
    assert ended == 0

"""Who may talk to `spex serve`: the token, its cookie, CSRF and the Host check.

The server's authority is one random token in `$SPEXSUP_HOME/serve.token`
(0600, 32 random bytes as `secrets.token_urlsafe(32)`), made once and kept,
so a printed URL stays good across restarts until `spex serve --new-token`.
Everything else is derived from it with HMAC-SHA256, so that nothing but the
file needs keeping:

- the cookie a browser holds after `/login` (its name too, so two homes'
  servers on one machine keep separate cookies);
- each page's CSRF tokens: a fresh nonce and its MAC, checked statelessly on
  every POST a cookie authorises.

Standard library only; no network, no state besides the file.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
import secrets
import stat
from pathlib import Path

from spexsup import lazyre
from spexsup.errors import Failed

TOKEN_FILE = "serve.token"
_TOKEN = lazyre.compile(r"[A-Za-z0-9_-]{43}")
# Host names a DNS-rebinding page can never stand behind: its own name is
# what the browser sends, and an IP literal or localhost is not one.
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def token_path(home: Path) -> Path:
    return home / TOKEN_FILE


def load_token(home: Path, *, renew: bool = False) -> str:
    """The server's token: the one in the state home, else a new one written
    there atomically (0600, never through a symlink; of two servers making it
    at once, both end with the first one's). `renew` replaces it.

    Raises Failed when the file is not ours alone (another user's, readable
    by others, not a regular file) or holds something else than a token.
    """
    path = token_path(home)
    if not renew:
        try:
            # O_NONBLOCK: a FIFO there would block the open until a writer came.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise Failed(f"cannot read {path}: {e.strerror}", hint="spex serve --new-token") from e
        else:
            try:  # checked before reading: a directory or FIFO is not read at all
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
                    raise Failed(f"{path} is not a file of yours", hint="remove it")
                if info.st_mode & 0o077:
                    raise Failed(
                        f"{path} is readable by others (mode {info.st_mode & 0o777:o})",
                        hint=f"chmod 600 {path}, or spex serve --new-token",
                    )
                text = os.read(fd, 200).decode("ascii", "replace").strip()
            finally:
                os.close(fd)
            if not _TOKEN.fullmatch(text):
                raise Failed(f"{path} holds no token", hint="spex serve --new-token")
            return text
    token = secrets.token_urlsafe(32)
    tmp = home / f".{TOKEN_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(token.encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())
        if renew:
            tmp.replace(path)
        else:
            try:
                os.link(tmp, path)  # never replaces a token another server just made
            except FileExistsError:
                return load_token(home)
    finally:
        tmp.unlink(missing_ok=True)
    return token


def _mac(token: str, label: str) -> str:
    return hmac.new(token.encode(), label.encode(), hashlib.sha256).hexdigest()


class Keys:
    """What the token authorises, each compared in constant time."""

    def __init__(self, token: str) -> None:
        self._token = token
        self.cookie_name = "spex_" + _mac(token, "cookie-name")[:12]
        self.cookie_value = _mac(token, "cookie")

    def token_ok(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self._token.encode())

    def cookie_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.cookie_value.encode())

    def bearer_ok(self, header: str | None) -> bool:
        """`Authorization: Bearer TOKEN` (scripts)."""
        if not header or not header.startswith("Bearer "):
            return False
        return self.token_ok(header[len("Bearer ") :].strip())

    def seal(self, text: str) -> str:
        """`text` and its MAC, for a cookie the server reads back (the banner
        a POST's redirect leads to): `base64url(text).mac`."""
        import base64

        data = base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
        return f"{data}.{_mac(self._token, 'seal:' + data)}"

    def unseal(self, given: str | None) -> str | None:
        """What `seal` sealed, or None for anything else."""
        import base64
        import binascii

        if not given or given.count(".") != 1:
            return None
        data, mac = given.split(".")
        if not hmac.compare_digest(mac.encode(), _mac(self._token, "seal:" + data).encode()):
            return None
        try:
            return base64.urlsafe_b64decode(data + "=" * (-len(data) % 4)).decode()
        except (binascii.Error, UnicodeError):
            return None

    def csrf(self) -> str:
        """A fresh CSRF token for one page: `nonce.mac`."""
        nonce = secrets.token_urlsafe(12)
        return f"{nonce}.{_mac(self._token, 'csrf:' + nonce)}"

    def csrf_ok(self, given: str | None) -> bool:
        if not given or given.count(".") != 1:
            return False
        nonce, mac = given.split(".")
        return hmac.compare_digest(mac.encode(), _mac(self._token, "csrf:" + nonce).encode())


def host_name(header: str | None) -> str | None:
    """The name in a Host (or an Origin's authority): without its port,
    lower-case, an IPv6 literal without brackets; None when malformed."""
    if not header:
        return None
    header = header.strip().lower()
    if header.startswith("["):
        end = header.find("]")
        rest = header[end + 1 :] if end >= 0 else None
        if rest is None or (rest and not re.fullmatch(r":\d+", rest)):
            return None
        return header[1:end] or None
    name, _, port = header.partition(":")
    if port and not port.isdigit():
        return None
    return name or None


def is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_allowed(name: str | None, bound: str) -> bool:
    """The DNS-rebinding check: the Host the browser sent names this server
    by an IP literal, `localhost`, or the name `--host` gave. A page of
    evil.example whose name was rebound to 127.0.0.1 sends its own name."""
    if name is None:
        return False
    return name in LOOPBACK_NAMES or is_ip_literal(name) or name == bound.lower().strip("[]")

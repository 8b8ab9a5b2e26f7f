"""Point each real agent CLI at the fake model server (tests/modelserver.py).

One function per CLI writes its configuration into an isolated HOME and
returns the environment variables a process needs so that the CLI talks only
to `url` (127.0.0.1), retries a bounded number of times, and makes no update
check or telemetry call. Each was checked against the CLI's own code (names
found in the installed binaries / packages, versions in HARNESSES.md):

- claude 2.1.x: `ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY` (or
  `CLAUDE_CODE_OAUTH_TOKEN`), `CLAUDE_CODE_MAX_RETRIES`,
  `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`, `DISABLE_AUTOUPDATER`, …
- codex 0.17x: `$CODEX_HOME/config.toml` with `[model_providers.fake]`
  (`base_url`, `wire_api = "responses"`, `env_key`, `request_max_retries`,
  `stream_max_retries`), `check_for_update_on_startup = false`.
- opencode 1.18: `~/.config/opencode/opencode.json`, a provider with
  `npm = "@ai-sdk/openai-compatible"` (bundled in the binary: nothing is
  downloaded) and `options.baseURL`; its retries (5, session/retry.ts) are
  not configurable, but it honours `retry-after-ms`, which the server sends.
- pi 0.73: `$PI_CODING_AGENT_DIR/models.json` (a provider with
  `api = "openai-completions"`) and `settings.json` (`defaultProvider`,
  `defaultModel`, `retry.maxRetries`, `retry.provider.maxRetries`),
  `PI_OFFLINE=1`.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

CLIS = ("claude", "codex", "opencode", "pi")
MODEL = "fake-model"
API_KEY = "sk-fake-local-key"


def _home(home: Path) -> dict[str, str]:
    """A HOME and XDG dirs of its own: nothing of the user's is read or written."""
    dirs = {
        "HOME": home,
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_DATA_HOME": home / ".local" / "share",
        "XDG_STATE_HOME": home / ".local" / "state",
        "XDG_CACHE_HOME": home / ".cache",
    }
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    return {k: str(v) for k, v in dirs.items()} | {
        # Only the loopback server: no proxy may route a request elsewhere.
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "HTTP_PROXY": "",
        "HTTPS_PROXY": "",
        "http_proxy": "",
        "https_proxy": "",
    }


def claude(home: Path, url: str, retries: int = 1, oauth: bool = False) -> dict[str, str]:
    """claude with an API key (or, `oauth`, a subscription OAuth token)."""
    env = _home(home)
    config = home / ".claude"
    config.mkdir(exist_ok=True)
    # Skip the first-run onboarding and trust dialogs (print mode ignores
    # them, but an attached pane must not stop on them either).
    (home / ".claude.json").write_text(
        json.dumps({"hasCompletedOnboarding": True, "bypassPermissionsModeAccepted": False})
    )
    env |= {
        "ANTHROPIC_BASE_URL": url,
        "CLAUDE_CODE_MAX_RETRIES": str(retries),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_COST_WARNINGS": "1",
        "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
        "ANTHROPIC_MODEL": "claude-sonnet-4-5",
        "ANTHROPIC_SMALL_FAST_MODEL": "claude-haiku-4-5",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": "claude-haiku-4-5",
        "API_TIMEOUT_MS": "60000",
    }
    if oauth:
        env["CLAUDE_CODE_OAUTH_TOKEN"] = "sk-ant-oat01-fake-local-token"
        env["ANTHROPIC_API_KEY"] = ""
    else:
        env["ANTHROPIC_API_KEY"] = API_KEY
    return env


def codex(home: Path, url: str, retries: int = 1) -> dict[str, str]:
    env = _home(home)
    codex_home = home / ".codex"
    codex_home.mkdir(exist_ok=True)
    (codex_home / "config.toml").write_text(
        f"""model = "gpt-5.5"
model_provider = "fake"
check_for_update_on_startup = false
approval_policy = "never"

[model_providers.fake]
name = "fake"
base_url = "{url}/v1"
wire_api = "responses"
env_key = "FAKE_OPENAI_API_KEY"
request_max_retries = {retries}
stream_max_retries = {retries}
stream_idle_timeout_ms = 300000

[analytics]
enabled = false

[feedback]
enabled = false
"""
    )
    env |= {"CODEX_HOME": str(codex_home), "FAKE_OPENAI_API_KEY": API_KEY}
    return env


def opencode(home: Path, url: str, permission: dict[str, str] | None = None) -> dict[str, str]:
    env = _home(home)
    config: dict[str, object] = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": f"fake/{MODEL}",
        "small_model": f"fake/{MODEL}",
        "enabled_providers": ["fake"],
        "provider": {
            "fake": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Fake",
                "options": {"baseURL": f"{url}/v1", "apiKey": API_KEY},
                "models": {MODEL: {"name": "Fake Model"}},
            }
        },
    }
    if permission is not None:
        config["permission"] = permission
    directory = home / ".config" / "opencode"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "opencode.json").write_text(json.dumps(config, indent=2))
    env |= {
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    }
    return env


def _fake_chatgpt_token() -> str:
    """A JWT-shaped token carrying the ChatGPT account id pi's ChatGPT provider
    reads from it (claim `https://api.openai.com/auth`); never verified here."""

    def part(data: dict[str, object]) -> str:
        raw = base64.urlsafe_b64encode(json.dumps(data).encode()).decode()
        return raw.rstrip("=")

    claims = {"https://api.openai.com/auth": {"chatgpt_account_id": "acct-fake"}, "exp": 4102444800}
    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}.c2ln"


def pi(home: Path, url: str, retries: int = 1, chatgpt: bool = False) -> dict[str, str]:
    """pi on a Chat Completions provider, or (`chatgpt`) on its ChatGPT
    provider (`openai-codex-responses`: POST {url}/codex/responses, the
    form whose usage-limit messages are ChatGPT's)."""
    env = _home(home)
    agent = home / ".pi" / "agent"
    agent.mkdir(parents=True, exist_ok=True)
    models = {
        "providers": {
            "fake": {
                "baseUrl": f"{url}/v1",
                "api": "openai-completions",
                "apiKey": API_KEY,
                "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                "models": [{"id": MODEL, "name": "Fake Model"}],
            },
            "chatgpt": {
                "baseUrl": url,
                "api": "openai-codex-responses",
                "apiKey": _fake_chatgpt_token(),
                "models": [{"id": MODEL, "name": "Fake ChatGPT Model"}],
            },
        }
    }
    (agent / "models.json").write_text(json.dumps(models, indent=2))
    settings = {
        "defaultProvider": "chatgpt" if chatgpt else "fake",
        "transport": "sse",
        "defaultModel": MODEL,
        "quietStartup": True,
        "enableInstallTelemetry": False,
        "retry": {
            "enabled": retries > 0,
            "maxRetries": retries,
            "baseDelayMs": 200,
            "provider": {"maxRetries": 0, "timeoutMs": 60000},
        },
    }
    (agent / "settings.json").write_text(json.dumps(settings, indent=2))
    env |= {
        "PI_CODING_AGENT_DIR": str(agent),
        "PI_OFFLINE": "1",
        "PI_SKIP_VERSION_CHECK": "1",
        "PI_TELEMETRY": "0",
    }
    return env


def setup(cli: str, home: Path, url: str, **options: object) -> dict[str, str]:
    """The env for `cli` (one of CLIS) pointed at `url`, config written under `home`."""
    make = {"claude": claude, "codex": codex, "opencode": opencode, "pi": pi}[cli]
    return make(home, url, **options)  # type: ignore[operator, no-any-return]


def bin_dir() -> Path:
    """Where `make test-real` installed the CLIs (node_modules/.bin)."""
    default = Path.home() / ".cache" / "spexsup" / "real-clis" / "node_modules" / ".bin"
    return Path(os.environ.get("SPEXSUP_REAL_CLI_BIN") or default)

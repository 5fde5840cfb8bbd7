"""Settings: every knob of the server, validated once, and the agent presets.

Only `cli` reads the environment and argv; it hands a mapping of raw strings to
`Settings.from_env`, which turns each into a typed value or raises `ConfigError`
naming the variable. Everything below the CLI receives a `Settings`.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from a2a_acp_bridge.adapters import is_unsupervised_mode
from a2a_acp_bridge.errors import ConfigError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 41241
DEFAULT_IDLE_TIMEOUT_MS = 300_000
# Spawn, initialize, session/new and the mode switch together (claude's session/new has
# been seen to take ~46 s on a cold machine).
DEFAULT_START_TIMEOUT_S = 60.0
# A turn fails only after this long without any session/update; every update resets it.
DEFAULT_SILENCE_S = 600.0
# After session/cancel, how long an agent gets to end its turn before it is stopped.
DEFAULT_CANCEL_GRACE_S = 5.0
DEFAULT_POOL_SIZE = 1
SANDBOX_DIR_NAME = ".acp-sandboxes"
# The bridge's own state (the conversations' adapter homes; later its database).
STATE_DIR_NAME = ".a2a-acp-bridge"
# Live adapter processes (conversations and warm ones together). An adapter such as
# claude-agent-acp holds a few hundred MB of Node and its CLI; eight fit a small machine.
DEFAULT_MAX_SESSIONS = 8
# Tasks waiting behind the running one in a single conversation.
DEFAULT_MAX_QUEUED = 8
# The largest request body: the biggest message the input budgets admit (16 MiB of inline
# files, base64 in JSON, plus 1 Mi characters of text) with room for the envelope.
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
# A bearer token shorter than this is guessable; 16 characters of a random token is
# already far beyond online guessing.
MIN_TOKEN_CHARS = 16
# RFC 6750 b64token: what may stand after "Bearer " in an Authorization header.
_TOKEN_RE = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
# Host names every loopback-bound server answers to.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
# How long a task may wait in INPUT_REQUIRED for the answer to the agent's question before
# the bridge declines it for the caller (the adapter is held for the whole wait).
DEFAULT_QUESTION_TIMEOUT_S = 3600.0
# Finished tasks kept in memory for GetTask/ListTasks; the oldest go first beyond this.
DEFAULT_TASK_RETENTION = 10_000

# The adapters' npm packages, pinned here and only here (adapters/package.json must agree;
# a test checks it). A preset runs the copy installed under adapters/ when there is one,
# else the same version through npx.
ADAPTER_PACKAGES: Mapping[str, tuple[str, str, str]] = {
    # preset: (npm package, version, executable it installs)
    "claude": ("@agentclientprotocol/claude-agent-acp", "0.101.0", "claude-agent-acp"),
    "codex": ("@agentclientprotocol/codex-acp", "2.6.0", "codex-acp"),
    "gemini": ("@google/gemini-cli", "0.61.0", "gemini"),
}
PRESET_ARGS: Mapping[str, tuple[str, ...]] = {"gemini": ("--acp",)}
PRESETS = ("demo", *ADAPTER_PACKAGES)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True)
class AgentSpec:
    """How to start the coding agent: its command line and a label for humans."""

    label: str
    command: tuple[str, ...]
    preset: str | None = None

    @property
    def is_demo(self) -> bool:
        return self.preset == "demo"


def adapters_dir() -> Path:
    """Where `scripts/test` installs the pinned adapters (the repository's adapters/)."""
    return Path(__file__).resolve().parents[2] / "adapters"


def agent_spec(value: str) -> AgentSpec:
    """Turn ACP_AGENT / --agent into an AgentSpec: a preset name or any command line."""
    text = value.strip()
    if not text or text == "demo":
        return AgentSpec(
            label="demo", command=(sys.executable, "-m", "a2a_acp_bridge.demo_agent"), preset="demo"
        )
    if text in ADAPTER_PACKAGES:
        package, version, executable = ADAPTER_PACKAGES[text]
        extra = PRESET_ARGS.get(text, ())
        local = adapters_dir() / "node_modules" / ".bin" / executable
        if local.exists():
            return AgentSpec(label=text, command=(str(local), *extra), preset=text)
        npx = shutil.which("npx") or "npx"
        return AgentSpec(
            label=text,
            command=(npx, "--yes", f"{package}@{version}", *extra),
            preset=text,
        )
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ConfigError("ACP_AGENT", f"cannot split the command line {text!r}: {exc}") from None
    if len(words) == 1 and "/" not in words[0] and shutil.which(words[0]) is None:
        known = ", ".join(PRESETS)
        raise ConfigError(
            "ACP_AGENT",
            f"{words[0]!r} is neither a preset ({known}) nor a command found on PATH",
        )
    return AgentSpec(label=Path(words[0]).name, command=tuple(words))


def parse_bool(variable: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(variable, f"{value!r} is not a boolean (use true or false)")


def parse_int(variable: str, value: str, *, minimum: int, maximum: int | None = None) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise ConfigError(variable, f"{value!r} is not a whole number") from None
    if number < minimum or (maximum is not None and number > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise ConfigError(variable, f"{number} is out of range (must be {bound})")
    return number


def parse_port(variable: str, value: str) -> int:
    try:
        return parse_int(variable, value, minimum=0, maximum=65535)
    except ConfigError:
        raise ConfigError(variable, f"{value!r} is not a port number (0-65535)") from None


def parse_directory(variable: str, value: str, *, base: Path) -> Path:
    """An existing directory, resolved once (symlinks included) against `base`."""
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = base / path
    if not path.exists():
        raise ConfigError(variable, f"{value!r} does not exist")
    if not path.is_dir():
        raise ConfigError(variable, f"{value!r} is not a directory")
    return path.resolve(strict=True)


def is_loopback(host: str) -> bool:
    """True when HOST binds only to this machine (a name other than localhost counts as not)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def parse_tokens(env: Mapping[str, str], *, base: Path) -> tuple[str, ...]:
    """The accepted bearer tokens: A2A_TOKEN, or A2A_TOKEN_FILE with one token a line."""
    token = env.get("A2A_TOKEN", "").strip()
    file_text = env.get("A2A_TOKEN_FILE", "").strip()
    if token and file_text:
        raise ConfigError("A2A_TOKEN_FILE", "set either A2A_TOKEN or A2A_TOKEN_FILE, not both")
    if token:
        return (_check_token("A2A_TOKEN", token),)
    if not file_text:
        return ()
    path = Path(file_text).expanduser()
    if not path.is_absolute():
        path = base / path
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ConfigError("A2A_TOKEN_FILE", f"{file_text!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        problem = exc.strerror if isinstance(exc, OSError) else "is not UTF-8 text"
        raise ConfigError("A2A_TOKEN_FILE", f"{file_text!r} cannot be read: {problem}") from None
    tokens = []
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if line and not line.startswith("#"):
            tokens.append(_check_token(f"A2A_TOKEN_FILE line {number}", line))
    if not tokens:
        raise ConfigError("A2A_TOKEN_FILE", f"{file_text!r} holds no token (one a line)")
    return tuple(tokens)


def _check_token(where: str, token: str) -> str:
    # Never echo the token itself: the message goes to logs and terminals.
    if not _TOKEN_RE.fullmatch(token):
        raise ConfigError(
            where, "a token may hold only letters, digits and - . _ ~ + / (then = padding)"
        )
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            where,
            f"the token is {len(token)} characters; use at least {MIN_TOKEN_CHARS} "
            "random ones (for example: openssl rand -hex 32)",
        )
    return token


def parse_hosts(variable: str, value: str) -> tuple[str, ...]:
    """Comma-separated host names (no scheme, no port), lowercased."""
    hosts = []
    for item in value.split(","):
        name = item.strip().lower()
        if not name:
            continue
        if any(c in name for c in "/ @") or name.count(":") == 1:
            raise ConfigError(variable, f"{item.strip()!r} is not a host name (no scheme or port)")
        hosts.append(name.strip("[]"))
    return tuple(hosts)


@dataclass(frozen=True)
class Settings:
    """Everything the server needs, validated."""

    agent: AgentSpec
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    public_url: str | None = None
    name: str | None = None
    acp_cwd: Path | None = None
    allow_execute: bool = False
    idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS
    sandbox_parent: Path = field(default_factory=lambda: Path.cwd() / SANDBOX_DIR_NAME)
    supervised_mode: str | None = None
    agent_env_names: tuple[str, ...] = ()
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S
    silence_s: float = DEFAULT_SILENCE_S
    turn_cap_s: float | None = None
    cancel_grace_s: float = DEFAULT_CANCEL_GRACE_S
    pool_size: int = DEFAULT_POOL_SIZE
    tokens: tuple[str, ...] = ()
    insecure: bool = False
    allowed_hosts: tuple[str, ...] = ()
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_sessions: int = DEFAULT_MAX_SESSIONS
    max_queued: int = DEFAULT_MAX_QUEUED
    card_v03: bool = False
    push_allow_private: bool = False
    question_timeout_s: float = DEFAULT_QUESTION_TIMEOUT_S
    task_retention: int = DEFAULT_TASK_RETENTION
    # The directory .env and relative paths are read from (the CLI's working directory).
    workdir: Path = field(default_factory=Path.cwd)
    token_file: Path | None = None
    state_dir: Path = field(default_factory=lambda: Path.cwd() / STATE_DIR_NAME)
    # Adapter isolation (isolation.py) and what it adds to every adapter's grants.
    isolation: bool = True
    isolation_read: tuple[Path, ...] = ()
    isolation_write: tuple[Path, ...] = ()
    # Files and directories under the operator's HOME copied into each conversation's HOME
    # (homes.py); None: the preset's own list.
    home_seed: tuple[str, ...] | None = None

    def host_allowlist(self) -> frozenset[str] | None:
        """Host names the server answers to, or None when any is accepted.

        Bound to loopback, a browser page on any site could reach the bridge by pointing
        its own name at 127.0.0.1 (DNS rebinding); the Host header still carries that
        name, so only loopback names, PUBLIC_URL's host and A2A_ALLOWED_HOSTS pass. Bound
        beyond loopback a token is required anyway; A2A_ALLOWED_HOSTS still applies."""
        if not is_loopback(self.host) and not self.allowed_hosts:
            return None
        names = set(self.allowed_hosts)
        if is_loopback(self.host):
            names.update(LOOPBACK_NAMES)
            names.add(self.host.strip("[]").lower())
        if self.public_url:
            public = urlsplit(self.public_url).hostname
            if public:
                names.add(public.lower())
        return frozenset(names)

    def advertised_url(self, bound_port: int | None = None) -> str:
        """The base URL clients dial: PUBLIC_URL, else http://HOST:PORT (port as bound)."""
        if self.public_url:
            return self.public_url.rstrip("/")
        host = self.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{bound_port if bound_port is not None else self.port}"

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], *, cwd: Path | None = None, insecure: bool = False
    ) -> Settings:
        """Build Settings from raw strings (environment merged with command-line flags).

        `insecure` is the `--insecure` flag: it alone allows serving beyond loopback
        without a token."""
        base = cwd or Path.cwd()

        def text(name: str) -> str | None:
            value = env.get(name)
            return value if value is not None and value.strip() != "" else None

        agent = agent_spec(env.get("ACP_AGENT", "demo"))
        host = text("HOST") or DEFAULT_HOST
        port_text = text("PORT")
        port = parse_port("PORT", port_text) if port_text is not None else DEFAULT_PORT
        public_url = text("PUBLIC_URL")
        if public_url is not None and not public_url.startswith(("http://", "https://")):
            raise ConfigError("PUBLIC_URL", f"{public_url!r} is not an http:// or https:// URL")
        cwd_text = text("ACP_CWD")
        acp_cwd = parse_directory("ACP_CWD", cwd_text, base=base) if cwd_text else None
        allow_execute = parse_bool("ACP_ALLOW_EXECUTE", env.get("ACP_ALLOW_EXECUTE", ""))
        idle_text = text("ACP_IDLE_TIMEOUT_MS")
        idle = (
            parse_int("ACP_IDLE_TIMEOUT_MS", idle_text, minimum=1)
            if idle_text is not None
            else DEFAULT_IDLE_TIMEOUT_MS
        )
        sandbox_text = text("ACP_SANDBOX_DIR")
        sandbox_parent = (
            Path(sandbox_text).expanduser() if sandbox_text else base / SANDBOX_DIR_NAME
        )
        if not sandbox_parent.is_absolute():
            sandbox_parent = base / sandbox_parent
        supervised_mode = text("ACP_SUPERVISED_MODE")
        if supervised_mode is not None and is_unsupervised_mode(supervised_mode):
            raise ConfigError(
                "ACP_SUPERVISED_MODE",
                f"{supervised_mode!r} lets the agent act without asking; the bridge refuses to "
                "run an agent unsupervised",
            )
        env_names = tuple(
            name.strip() for name in env.get("ACP_AGENT_ENV", "").split(",") if name.strip()
        )
        for name in env_names:
            if not name.replace("_", "").isalnum():
                raise ConfigError("ACP_AGENT_ENV", f"{name!r} is not an environment variable name")
        start_timeout = _seconds(env, "ACP_START_TIMEOUT_MS", DEFAULT_START_TIMEOUT_S)
        silence = _seconds(env, "ACP_SILENCE_TIMEOUT_MS", DEFAULT_SILENCE_S)
        cancel_grace = _seconds(env, "ACP_CANCEL_GRACE_MS", DEFAULT_CANCEL_GRACE_S)
        cap_text = text("ACP_TURN_TIMEOUT_MS")
        turn_cap = (
            parse_int("ACP_TURN_TIMEOUT_MS", cap_text, minimum=1) / 1000 if cap_text else None
        )
        pool_text = text("ACP_POOL_SIZE")
        pool_size = (
            parse_int("ACP_POOL_SIZE", pool_text, minimum=0, maximum=16)
            if pool_text is not None
            else DEFAULT_POOL_SIZE
        )
        tokens = parse_tokens(env, base=base)
        file_text = text("A2A_TOKEN_FILE")
        token_file = _path(file_text.strip(), base) if file_text and tokens else None
        state_text = text("ACP_STATE_DIR")
        state_dir = _path(state_text, base) if state_text else base / STATE_DIR_NAME
        isolation = parse_bool("ACP_ISOLATION", env.get("ACP_ISOLATION", "on") or "on")
        isolation_read = parse_paths("ACP_ISOLATION_READ", env.get("ACP_ISOLATION_READ", ""), base)
        isolation_write = parse_paths(
            "ACP_ISOLATION_WRITE", env.get("ACP_ISOLATION_WRITE", ""), base
        )
        seed_text = env.get("ACP_HOME_SEED")
        home_seed = parse_seed("ACP_HOME_SEED", seed_text) if seed_text is not None else None
        if not tokens and not insecure and not is_loopback(host):
            raise ConfigError(
                "HOST",
                f"{host!r} is reachable from other machines and no token is set: set A2A_TOKEN "
                "or A2A_TOKEN_FILE, or pass --insecure to serve without authentication",
            )
        allowed_hosts = parse_hosts("A2A_ALLOWED_HOSTS", env.get("A2A_ALLOWED_HOSTS", ""))
        max_body = _int(env, "A2A_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES, minimum=1024)
        max_sessions = _int(env, "ACP_MAX_SESSIONS", DEFAULT_MAX_SESSIONS, minimum=1)
        max_queued = _int(env, "ACP_MAX_QUEUED_TASKS", DEFAULT_MAX_QUEUED, minimum=0)
        if pool_size > max_sessions:
            raise ConfigError(
                "ACP_POOL_SIZE",
                f"{pool_size} warm adapters exceed ACP_MAX_SESSIONS ({max_sessions})",
            )
        return cls(
            agent=agent,
            host=host,
            port=port,
            public_url=public_url,
            name=text("AGENT_NAME"),
            acp_cwd=acp_cwd,
            allow_execute=allow_execute,
            idle_timeout_ms=idle,
            sandbox_parent=sandbox_parent,
            supervised_mode=supervised_mode,
            agent_env_names=env_names,
            start_timeout_s=start_timeout,
            silence_s=silence,
            turn_cap_s=turn_cap,
            cancel_grace_s=cancel_grace,
            pool_size=pool_size,
            tokens=tokens,
            insecure=insecure,
            allowed_hosts=allowed_hosts,
            max_body_bytes=max_body,
            max_sessions=max_sessions,
            max_queued=max_queued,
            card_v03=parse_bool("A2A_CARD_V03", env.get("A2A_CARD_V03", "")),
            push_allow_private=parse_bool(
                "A2A_PUSH_ALLOW_PRIVATE", env.get("A2A_PUSH_ALLOW_PRIVATE", "")
            ),
            question_timeout_s=_seconds(env, "A2A_QUESTION_TIMEOUT_MS", DEFAULT_QUESTION_TIMEOUT_S),
            task_retention=_count(env, "A2A_TASK_RETENTION", DEFAULT_TASK_RETENTION, minimum=1),
            workdir=base,
            token_file=token_file,
            state_dir=state_dir,
            isolation=isolation,
            isolation_read=isolation_read,
            isolation_write=isolation_write,
            home_seed=home_seed,
        )


def _path(value: str, base: Path) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def parse_paths(variable: str, value: str, base: Path) -> tuple[Path, ...]:
    """Existing directories or files, separated by `:` like PATH, each resolved once."""
    paths = []
    for item in value.split(":"):
        if not item.strip():
            continue
        path = _path(item.strip(), base)
        try:
            paths.append(path.resolve(strict=True))
        except (OSError, RuntimeError):
            raise ConfigError(variable, f"{item.strip()!r} does not exist") from None
    return tuple(paths)


def parse_seed(variable: str, value: str) -> tuple[str, ...]:
    """Paths relative to the operator's HOME, comma-separated; none may leave it."""
    seeds = []
    for item in value.split(","):
        name = item.strip()
        if not name:
            continue
        parts = Path(name).parts
        if Path(name).is_absolute() or ".." in parts or name.startswith("~"):
            raise ConfigError(
                variable,
                f"{name!r} is not a path inside HOME (write it relative, e.g. .codex/auth.json)",
            )
        seeds.append(str(Path(*parts)))
    return tuple(seeds)


def _int(env: Mapping[str, str], variable: str, default: int, *, minimum: int) -> int:
    value = env.get(variable, "").strip()
    return parse_int(variable, value, minimum=minimum) if value else default


def _seconds(env: Mapping[str, str], variable: str, default_s: float) -> float:
    value = env.get(variable, "").strip()
    if not value:
        return default_s
    return parse_int(variable, value, minimum=1) / 1000


def _count(env: Mapping[str, str], variable: str, default: int, *, minimum: int) -> int:
    value = env.get(variable, "").strip()
    return parse_int(variable, value, minimum=minimum) if value else default

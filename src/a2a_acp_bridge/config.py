"""Settings: every knob of the server, validated once, and the agent presets.

Only `cli` reads the environment and argv; it hands a mapping of raw strings to
`Settings.from_env`, which turns each into a typed value or raises `ConfigError`
naming the variable. Everything below the CLI receives a `Settings`. The fields of
`Settings` are the configuration table (see `setting`): parsing, the error messages,
the serve flags and the tables in README.md and docs/operations.md all come from it.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from a2a_acp_bridge.adapters import is_unsupervised_mode
from a2a_acp_bridge.errors import ConfigError
from a2a_acp_bridge.jwt_bearer import JwtPolicy, read_jwks_file
from a2a_acp_bridge.principals import (
    TokenEntry,
    check_name,
    check_token,
    digest,
    parse_token_lines,
)
from a2a_acp_bridge.protection import Protection, bridge_protection, parse_writable
from a2a_acp_bridge.schema import DEFAULT_PRINCIPAL
from a2a_acp_bridge.setting import (
    Boolean,
    Choice,
    Directory,
    Duration,
    HostNames,
    Integer,
    Kind,
    Location,
    OrUnset,
    Port,
    Setting,
    Text,
    Url,
    VariableNames,
    parse_settings,
    setting,
    settings_table,
)

if TYPE_CHECKING:
    from a2a_acp_bridge.policy import Policy

# The defaults other modules need too (the CLI's client, the task store, the limits' test).
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 41241
# The largest request body: the biggest message the input budgets admit (16 MiB of inline
# files, base64 in JSON, plus 1 Mi characters of text) with room for the envelope.
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
DEFAULT_TASK_RETENTION = 10_000
# Finished tasks older than this are deleted (A2A_TASK_TTL; 0: kept up to the retention).
DEFAULT_TASK_TTL = "30d"
# Conversations unused this long lose their sandbox and record (ACP_SANDBOX_TTL; 0: never).
DEFAULT_SANDBOX_TTL = "7d"
_SPAN_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?")
_SPAN_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
# The longest line read from an adapter (acp/transport.py): far above a real message (a
# big diff, an image), far below what exhausts a small machine.
DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
MIN_MAX_LINE_BYTES = 64 * 1024
# Parts in one A2A message: a real one has a few; 200,000 tiny ones held the event loop
# for 17 s.
DEFAULT_MAX_PARTS = 1000
SANDBOX_DIR_NAME = ".acp-sandboxes"
# The bridge's own state (the conversations' adapter homes; later its database).
STATE_DIR_NAME = ".a2a-acp-bridge"
# An ACP authentication method id as adapters spell them (`api-key`, `gemini-api-key`).
_METHOD_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")
# Host names every loopback-bound server answers to.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
LOG_FORMATS = ("auto", "text", "json")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

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


def is_loopback(host: str) -> bool:
    """True when HOST binds only to this machine (a name other than localhost counts as not)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def read_token_file(variable: str, text: str, *, base: Path) -> tuple[TokenEntry, ...]:
    """The entries of A2A_TOKEN_FILE (principals.py: `NAME TOKEN`, hashed, or bare)."""
    path = Path(text).expanduser()
    if not path.is_absolute():
        path = base / path
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ConfigError(variable, f"{text!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        problem = exc.strerror if isinstance(exc, OSError) else "is not UTF-8 text"
        raise ConfigError(variable, f"{text!r} cannot be read: {problem}") from None
    entries = parse_token_lines(variable, lines)
    if not entries:
        raise ConfigError(variable, f"{text!r} holds no token (one a line)")
    return entries


def parse_tokens(env: Mapping[str, str], *, base: Path) -> tuple[str, ...]:
    """The bearer tokens in clear (what `send` and `card` present), from raw strings: a
    hashed entry of the file cannot be presented."""
    rows = {row.name: row for row in SETTINGS}
    token = rows["token"].value(env, {}, base)
    if token:
        return (token,)
    entries: tuple[TokenEntry, ...] = rows["file_tokens"].value(env, {}, base)
    return tuple(entry.plain for entry in entries if entry.plain)


# --- the kinds only the bridge has ----------------------------------------------------------


@dataclass(frozen=True)
class Agent(Kind[AgentSpec]):
    """A preset name or an ACP agent's command line."""

    def parse(self, variable: str, text: str, base: Path) -> AgentSpec:
        return agent_spec(text)


@dataclass(frozen=True)
class SessionMode(Kind[str]):
    """An ACP session mode id the agent must run in; one that approves everything is refused."""

    def parse(self, variable: str, text: str, base: Path) -> str:
        if is_unsupervised_mode(text):
            raise ConfigError(
                variable,
                f"{text!r} lets the agent act without asking; the bridge refuses to run an "
                "agent unsupervised",
            )
        return text


@dataclass(frozen=True)
class MethodId(Kind[str]):
    """An ACP authentication method id the adapter offers at initialize."""

    def parse(self, variable: str, text: str, base: Path) -> str:
        if not _METHOD_ID_RE.fullmatch(text):
            raise ConfigError(variable, f"{text!r} is not an authentication method id")
        return text


@dataclass(frozen=True)
class ProtectedNames(Kind[tuple[str, ...]]):
    """Names of the protected-paths table (protection.py), comma-separated."""

    def parse(self, variable: str, text: str, base: Path) -> tuple[str, ...]:
        try:
            return parse_writable(text)
        except ValueError as exc:
            raise ConfigError(variable, str(exc)) from None


@dataclass(frozen=True)
class AutoBoolean(Kind[bool | None]):
    """`auto` (None), or a boolean."""

    def parse(self, variable: str, text: str, base: Path) -> bool | None:
        if text.strip().lower() == "auto":
            return None
        try:
            return Boolean().parse(variable, text, base)
        except ConfigError:
            raise ConfigError(variable, f"{text!r} is not auto, true or false") from None


@dataclass(frozen=True)
class Paths(Kind[tuple[Path, ...]]):
    """Existing directories or files, separated by `:` like PATH, each resolved once."""

    def parse(self, variable: str, text: str, base: Path) -> tuple[Path, ...]:
        paths = []
        for item in text.split(":"):
            if not item.strip():
                continue
            path = Path(item.strip()).expanduser()
            if not path.is_absolute():
                path = base / path
            try:
                paths.append(path.resolve(strict=True))
            except (OSError, RuntimeError):
                raise ConfigError(variable, f"{item.strip()!r} does not exist") from None
        return tuple(paths)


@dataclass(frozen=True)
class HomeSeed(Kind[tuple[str, ...]]):
    """Paths relative to the operator's HOME, comma-separated (none may leave it);
    `none`: nothing is copied."""

    def parse(self, variable: str, text: str, base: Path) -> tuple[str, ...]:
        if text.strip().lower() == "none":
            return ()
        seeds = []
        for item in text.split(","):
            name = item.strip()
            if not name:
                continue
            parts = Path(name).parts
            if Path(name).is_absolute() or ".." in parts or name.startswith("~"):
                raise ConfigError(
                    variable,
                    f"{name!r} is not a path inside HOME "
                    "(write it relative, e.g. .codex/auth.json)",
                )
            seeds.append(str(Path(*parts)))
        return tuple(seeds)


@dataclass(frozen=True)
class DatabaseUrl(Kind[str]):
    """A PostgreSQL URL for SQLAlchemy's asyncpg driver (`postgresql://` is taken as
    `postgresql+asyncpg://`). Never echoed: it may hold a password."""

    secret = True

    def parse(self, variable: str, text: str, base: Path) -> str:
        for prefix in ("postgresql+asyncpg://", "postgresql://", "postgres://"):
            if text.startswith(prefix):
                rest = text[len(prefix) :]
                if not rest or rest.startswith("?"):
                    break
                return "postgresql+asyncpg://" + rest
        raise ConfigError(
            variable,
            "not a PostgreSQL URL (postgresql+asyncpg://user:password@host:5432/database); "
            "unset, the state is the SQLite file in ACP_STATE_DIR",
        )


@dataclass(frozen=True)
class Span(Kind[float | None]):
    """A long duration written with its unit (`45s`, `30m`, `12h`, `7d`; a bare number is
    seconds), in seconds; `0` is None: no limit."""

    def parse(self, variable: str, text: str, base: Path) -> float | None:
        match = _SPAN_RE.fullmatch(text.strip().lower())
        if match is None:
            raise ConfigError(
                variable, f"{text!r} is not a duration (for example 90s, 30m, 12h, 7d)"
            )
        seconds = float(match.group(1)) * _SPAN_UNITS[match.group(2)]
        return seconds if seconds > 0 else None


@dataclass(frozen=True)
class PolicyFile(Kind["Policy"]):
    """A policy file (policy.py), read and validated at start: an error names its line."""

    def parse(self, variable: str, text: str, base: Path) -> Policy:
        from a2a_acp_bridge.policy import PolicyError, load_policy

        path = Path(text).expanduser()
        try:
            return load_policy(path if path.is_absolute() else base / path)
        except PolicyError as exc:
            raise ConfigError(variable, str(exc)) from None


@dataclass(frozen=True)
class PushKeys(Kind[tuple[str, ...]]):
    """Comma-separated Fernet keys (32 bytes, URL-safe base64): the first encrypts, every
    one decrypts (to rotate, put the new key first). Never echoed."""

    secret = True

    def parse(self, variable: str, text: str, base: Path) -> tuple[str, ...]:
        keys = []
        for item in text.split(","):
            key = item.strip()
            if not key:
                continue
            try:
                raw = base64.urlsafe_b64decode(key.encode("ascii"))
            except (binascii.Error, UnicodeEncodeError, ValueError):
                raw = b""
            if len(raw) != 32:
                raise ConfigError(
                    variable,
                    "a key is 32 random bytes in URL-safe base64, 44 characters (for example: "
                    "openssl rand -base64 32 | tr '+/' '-_')",
                )
            keys.append(key)
        return tuple(keys)


@dataclass(frozen=True)
class Token(Kind[str]):
    """A bearer token (never echoed in a message)."""

    secret = True

    def parse(self, variable: str, text: str, base: Path) -> str:
        return check_token(variable, text)


@dataclass(frozen=True)
class TokenFile(Kind[tuple[TokenEntry, ...]]):
    """A file of bearer tokens and their principals, one a line, read once at start."""

    blank = "unset"
    secret = True

    def parse(self, variable: str, text: str, base: Path) -> tuple[TokenEntry, ...]:
        return read_token_file(variable, text, base=base) if text else ()


# --- the supervisors' kinds (issue 20: supervisors.py) -----------------------------------------

# ACP_SUPERVISOR: who decides what the policy says `ask` about (supervisors.py).
SUPERVISOR_CHOICES = ("webhook", "console", "webhook,console")
SUPERVISOR_FORMATS = ("bridge", "authzen")
# An HMAC key shorter than this is guessable offline from one signed request.
MIN_SECRET_CHARS = 32


@dataclass(frozen=True)
class SupervisorNames(Kind[tuple[str, ...]]):
    """`webhook`, `console` or `webhook,console` (the webhook first, then the console);
    blank: none."""

    blank = "unset"

    def parse(self, variable: str, text: str, base: Path) -> tuple[str, ...]:
        if not text:
            return ()
        word = ",".join(part.strip() for part in text.lower().split(",") if part.strip())
        if word not in SUPERVISOR_CHOICES:
            raise ConfigError(variable, f"{text!r} is not one of {' | '.join(SUPERVISOR_CHOICES)}")
        return tuple(word.split(","))


@dataclass(frozen=True)
class Secret(Kind[str]):
    """A shared secret (an HMAC key), never echoed in a message."""

    secret = True

    def parse(self, variable: str, text: str, base: Path) -> str:
        if len(text) < MIN_SECRET_CHARS:
            raise ConfigError(
                variable,
                f"the secret is {len(text)} characters; use at least {MIN_SECRET_CHARS} random "
                "ones (for example: openssl rand -hex 32)",
            )
        return text


def check_supervisors(settings: Settings) -> None:
    """The supervisor settings that only make sense together (raises ConfigError)."""
    names = settings.supervisor
    if settings.supervisor_url and "webhook" not in names:
        raise ConfigError(
            "ACP_SUPERVISOR_URL", "is set but ACP_SUPERVISOR does not name `webhook`: set both"
        )
    if "webhook" in names and not settings.supervisor_url:
        raise ConfigError("ACP_SUPERVISOR", "`webhook` needs ACP_SUPERVISOR_URL")
    if "webhook" in names and not settings.supervisor_secret:
        raise ConfigError(
            "ACP_SUPERVISOR",
            "`webhook` needs ACP_SUPERVISOR_SECRET (requests and answers are signed)",
        )
    if names == ("webhook", "console") and (
        settings.supervisor_timeout_s >= settings.decision_timeout_s
    ):
        # The webhook would use up the whole deadline: the operator would never be asked.
        raise ConfigError(
            "ACP_SUPERVISOR_TIMEOUT_MS",
            "must be below ACP_DECISION_TIMEOUT_MS with `webhook,console`, so the console "
            "has time when the webhook gives no verdict",
        )
    if "console" in names and not settings.console_token:
        # The A2A caller holds the A2A tokens: with them it could approve its own requests.
        raise ConfigError("ACP_SUPERVISOR", "`console` needs ACP_CONSOLE_TOKEN")
    if settings.console_token and any(
        entry.accepts(settings.console_token) for entry in settings.tokens
    ):
        raise ConfigError(
            "ACP_CONSOLE_TOKEN",
            "must differ from every A2A token: whoever holds an A2A token is the caller, "
            "and the caller never decides",
        )


@dataclass(frozen=True)
class PrincipalNames(Kind[tuple[str, ...]]):
    """Comma-separated principal names."""

    def parse(self, variable: str, text: str, base: Path) -> tuple[str, ...]:
        names = tuple(name.strip() for name in text.split(",") if name.strip())
        for name in names:
            check_name(variable, name)
        return names


@dataclass(frozen=True)
class JwksFile(Kind[Path]):
    """A JWKS file, checked at start (it must hold an asymmetric signing key)."""

    def parse(self, variable: str, text: str, base: Path) -> Path:
        path = Path(text).expanduser()
        path = path if path.is_absolute() else base / path
        read_jwks_file(variable, path)
        return path


@dataclass(frozen=True)
class ClaimName(Kind[str]):
    """A JWT claim's name."""

    def parse(self, variable: str, text: str, base: Path) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.:/-]{1,64}", text):
            raise ConfigError(variable, f"{text[:40]!r} is not a claim name")
        return text


# --- the table --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """Everything the server needs, validated. Each field is one row of the table.

    To add a setting, add one field:
        name: type = setting("VARIABLE", Kind(...), "default", "what it does", flag="--x")
    The default is written as in the environment, in the kind's unit ("" for unset; then
    wrap the kind in OrUnset for None, or give `shown=` words for the docs). A duration is
    `Duration()`: milliseconds in a variable ending in _MS, seconds in a field ending in _s.
    A value that depends on another setting is checked in `__post_init__`. Then run
    scripts/settings_table to rewrite the tables in README.md and docs/operations.md (a
    test keeps them equal to this one) and say why in CHANGELOG.md.
    """

    agent: AgentSpec = setting(
        "ACP_AGENT",
        Agent(),
        "demo",
        "the coding agent: "
        + ", ".join(f"`{preset}`" for preset in PRESETS)
        + ", or any ACP command line",
        flag="--agent",
    )
    host: str = setting(
        "HOST",
        Text(),
        DEFAULT_HOST,
        "address to listen on; anything but loopback needs a token or `--insecure`",
        flag="--host",
    )
    port: int = setting(
        "PORT",
        Port(),
        str(DEFAULT_PORT),
        "port to listen on (`0`: any free port, logged in the `listening` line)",
        flag="--port",
    )
    public_url: str | None = setting(
        "PUBLIC_URL",
        OrUnset(Url()),
        "",
        "base URL written in the agent card; its host is also allowed in the Host header",
        flag="--public-url",
        shown="`http://HOST:PORT`",
    )
    name: str | None = setting(
        "AGENT_NAME",
        OrUnset(Text()),
        "",
        "the card's name",
        flag="--name",
        shown='the adapter\'s own name + " (via ACP)"',
    )
    insecure: bool = setting(
        None,
        Boolean(),
        "false",
        "serve beyond loopback **without** a token: anyone who reaches the port can run the agent",
        flag="--insecure",
        shown="off",
    )
    token: str | None = setting(
        "A2A_TOKEN",
        OrUnset(Token()),
        "",
        "a bearer token every request must carry (except the card and the probes); 16 or "
        "more characters of `A-Z a-z 0-9 - . _ ~ + /`",
    )
    file_tokens: tuple[TokenEntry, ...] = setting(
        "A2A_TOKEN_FILE",
        TokenFile(),
        "",
        "a file of `NAME TOKEN` lines, one principal each (the token may be stored as "
        "`sha256:HEX` or `scrypt:...`: `a2a-acp-bridge token hash`); blank lines and `#` "
        "comments skipped; read at start (docs/operations.md, Principals)",
        excludes="A2A_TOKEN",
    )
    jwt_issuer: str | None = setting(
        "A2A_JWT_ISSUER",
        OrUnset(Url()),
        "",
        "accept JWT bearer tokens from this issuer (`iss`); needs `A2A_JWT_AUDIENCE` and "
        "`A2A_JWT_JWKS_URL` or `A2A_JWT_JWKS_FILE`",
    )
    jwt_audience: str | None = setting(
        "A2A_JWT_AUDIENCE",
        OrUnset(Text()),
        "",
        "the audience (`aud`) a JWT must be issued for",
    )
    jwt_jwks_url: str | None = setting(
        "A2A_JWT_JWKS_URL",
        OrUnset(Url()),
        "",
        "the issuer's JWKS (https, or http on loopback), fetched and cached, fetched again "
        "for an unknown `kid` (at most once a minute)",
    )
    jwt_jwks_file: Path | None = setting(
        "A2A_JWT_JWKS_FILE",
        OrUnset(JwksFile()),
        "",
        "the issuer's JWKS as a file, read at start (offline)",
        excludes="A2A_JWT_JWKS_URL",
    )
    jwt_principal_claim: str = setting(
        "A2A_JWT_PRINCIPAL_CLAIM",
        ClaimName(),
        "sub",
        "the JWT claim that names the principal",
    )
    jwt_required_scope: str | None = setting(
        "A2A_JWT_REQUIRED_SCOPE",
        OrUnset(Text()),
        "",
        "a scope every JWT must grant (in `scope` or `scp`)",
    )
    admin_principals: tuple[str, ...] = setting(
        "A2A_ADMIN_PRINCIPALS",
        PrincipalNames(),
        "",
        "principals (comma-separated) who see and may cancel every task",
    )
    metrics_public: bool = setting(
        "A2A_METRICS_PUBLIC",
        Boolean(),
        "false",
        "serve `/metrics` without a token even when tokens are required",
    )
    allowed_hosts: tuple[str, ...] = setting(
        "A2A_ALLOWED_HOSTS",
        HostNames(),
        "",
        "more host names (comma-separated, no port) the server answers to; while bound to "
        "loopback only loopback names and PUBLIC_URL's host are answered; beyond loopback, "
        "setting it turns the check on",
    )
    max_body_bytes: int = setting(
        "A2A_MAX_BODY_BYTES",
        Integer(minimum=1024, unit="bytes"),
        str(DEFAULT_MAX_BODY_BYTES),
        "largest request body; bigger ones get 413 before they are read (the default admits "
        "the largest message the input budgets allow)",
    )
    # An adapter such as claude-agent-acp holds a few hundred MB of Node and its CLI; eight
    # fit a small machine.
    max_sessions: int = setting(
        "ACP_MAX_SESSIONS",
        Integer(minimum=1),
        "8",
        "live adapter processes at most (conversations and warm ones together); beyond it a "
        "new conversation waits `ACP_ADMISSION_TIMEOUT_MS`, then is REJECTED "
        "(docs/operations.md, Limits)",
    )
    max_sessions_per_principal: int | None = setting(
        "ACP_MAX_SESSIONS_PER_PRINCIPAL",
        OrUnset(Integer(minimum=1)),
        "",
        "busy adapters one principal may hold at once; a new conversation beyond it is "
        "REJECTED at once",
        shown="`ACP_MAX_SESSIONS`",
    )
    max_queued: int = setting(
        "ACP_MAX_QUEUED_TASKS",
        Integer(minimum=0),
        "8",
        "tasks that may wait behind the running one in one conversation, beyond it REJECTED; "
        "`0`: none may wait",
    )
    acp_cwd: Path | None = setting(
        "ACP_CWD",
        OrUnset(Directory()),
        "",
        "one existing directory shared by every conversation, handed to the bridge (not owned)",
    )
    allow_execute: bool = setting(
        "ACP_ALLOW_EXECUTE",
        Boolean(),
        "false",
        "allow commands, fetches and other unverifiable actions in `ACP_CWD`",
    )
    sandbox_parent: Path = setting(
        "ACP_SANDBOX_DIR",
        Location(),
        f"./{SANDBOX_DIR_NAME}",
        "where per-conversation sandboxes are made (without `ACP_CWD`)",
    )
    state_dir: Path = setting(
        "ACP_STATE_DIR",
        Location(),
        f"./{STATE_DIR_NAME}",
        "the bridge's state: the SQLite database (tasks, push configs, conversations), the "
        "push-config key file and each conversation's adapter HOME (`homes/`)",
    )
    database_url: str | None = setting(
        "A2A_DATABASE_URL",
        OrUnset(DatabaseUrl()),
        "",
        "the state in PostgreSQL (`postgresql+asyncpg://user:password@host/db`), shared by "
        "every replica ([docs/scaling.md](docs/scaling.md)); unset, the SQLite file in "
        "`ACP_STATE_DIR`",
        shown="the SQLite file in `ACP_STATE_DIR`",
    )
    database_wait_s: float = setting(
        "A2A_DATABASE_WAIT_MS",
        Duration(minimum_ms=0),
        "60000",
        "with `A2A_DATABASE_URL`: at start, how long to wait for a database server that cannot "
        "be reached yet (started beside the bridge) before refusing to start",
    )
    lease_ttl_s: float = setting(
        "A2A_LEASE_TTL_MS",
        Duration(minimum_ms=1000),
        "10000",
        "with `A2A_DATABASE_URL`: a replica that has not renewed its heartbeat for this long "
        "is taken for dead, and its running tasks end FAILED",
    )
    isolation: bool = setting(
        "ACP_ISOLATION",
        Boolean(),
        "true",
        "confine every adapter and all it starts with the kernel (Landlock): writable only its "
        "conversation's root and home; `false` runs them unconfined (weaker); on where it is "
        "unavailable, `serve` refuses to start ([docs/isolation.md](docs/isolation.md))",
    )
    home_seed: tuple[str, ...] | None = setting(
        "ACP_HOME_SEED",
        OrUnset(HomeSeed()),
        "",
        "files or directories under the operator's HOME (comma-separated, relative) copied "
        "into each conversation's HOME; `none`: nothing",
        shown="the preset's login files",
    )
    isolation_read: tuple[Path, ...] = setting(
        "ACP_ISOLATION_READ",
        Paths(),
        "",
        "more paths (`:`-separated) every adapter may read",
    )
    isolation_write: tuple[Path, ...] = setting(
        "ACP_ISOLATION_WRITE",
        Paths(),
        "",
        "more paths (`:`-separated) every adapter may write: shared by all conversations",
    )
    idle_timeout_s: float = setting(
        "ACP_IDLE_TIMEOUT_MS",
        Duration(),
        "300000",
        "stop a conversation's adapter after this long unused (the sandbox stays)",
    )
    supervised_mode: str | None = setting(
        "ACP_SUPERVISED_MODE",
        OrUnset(SessionMode()),
        "",
        "the session mode to enforce instead of the adapter's most supervised one; modes "
        "that approve everything are refused",
        shown="the adapter's own",
    )
    auth_method: str | None = setting(
        "ACP_AUTH_METHOD",
        OrUnset(MethodId()),
        "",
        "the ACP authentication method to log the adapter in with (`api-key`, "
        "`gemini-api-key`, `vertex-ai`, `gateway`); unset, the bridge picks one it has the "
        "credentials for when the adapter asks (`a2a-acp-bridge doctor` tells)",
        shown="chosen from the credentials at hand",
    )
    writable_protected: tuple[str, ...] = setting(
        "ACP_WRITABLE_PROTECTED",
        ProtectedNames(),
        "",
        "protected names (comma-separated, e.g. `.vscode,.git`) the agent may edit after all "
        "(docs/permissions.md, Protected paths)",
    )
    agent_env_names: tuple[str, ...] = setting(
        "ACP_AGENT_ENV",
        VariableNames(),
        "",
        "more environment variables (names, comma-separated) handed to the adapter, beyond "
        "its allowlist (`PATH`, `HOME`, ...)",
    )
    # claude's session/new has been seen to take ~46 s on a cold machine.
    start_timeout_s: float = setting(
        "ACP_START_TIMEOUT_MS",
        Duration(),
        "60000",
        "bound on spawn, initialize, session/new and the mode switch",
    )
    # Every update resets it: a long turn that keeps reporting never hits it.
    silence_s: float = setting(
        "ACP_SILENCE_TIMEOUT_MS",
        Duration(),
        "600000",
        "a turn fails after this long without any update from the agent",
    )
    turn_cap_s: float | None = setting(
        "ACP_TURN_TIMEOUT_MS",
        OrUnset(Duration()),
        "",
        "optional hard cap on one turn",
    )
    cancel_grace_s: float = setting(
        "ACP_CANCEL_GRACE_MS",
        Duration(),
        "5000",
        "after `session/cancel` (a cancel, a deadline, shutdown), how long the agent gets to "
        "end its turn before its process tree is stopped",
    )
    pool_size: int = setting(
        "ACP_POOL_SIZE",
        Integer(minimum=0, maximum=16),
        "1",
        "adapters kept started in fresh sandboxes for new conversations (at most "
        "`ACP_MAX_SESSIONS`)",
    )
    # None: by request (the 0.3 fields unless the card request says A2A-Version 1.x).
    card_v03: bool | None = setting(
        "A2A_CARD_V03",
        AutoBoolean(),
        "auto",
        "the card's A2A 0.3 fields: `auto` for card requests without `A2A-Version: 1.x` (0.3 "
        "clients), `true` for all, `false` for none (docs/a2a.md)",
    )
    push_allow_private: bool = setting(
        "A2A_PUSH_ALLOW_PRIVATE",
        Boolean(),
        "false",
        "allow push-notification webhooks on loopback and private addresses; leave it off on "
        "a shared network, or a task's webhook can reach services only the bridge's host can",
    )
    # The adapter is held for the whole wait.
    question_timeout_s: float = setting(
        "A2A_QUESTION_TIMEOUT_MS",
        Duration(),
        "3600000",
        "how long an agent's question waits for the caller's answer before it is declined",
    )

    # --- the supervisors (issue 20: supervisors.py, supervisor_webhook.py, console.py) ---
    supervisor: tuple[str, ...] = setting(
        "ACP_SUPERVISOR",
        SupervisorNames(),
        "",
        "who decides what the policy says `ask` about: `webhook`, `console`, or "
        "`webhook,console` (the webhook, and the console when the webhook fails or abstains); "
        "unset, an `ask` is a deny ([docs/decisions.md](docs/decisions.md))",
        shown="unset: nobody, an `ask` is a deny",
    )
    supervisor_url: str | None = setting(
        "ACP_SUPERVISOR_URL",
        OrUnset(Url()),
        "",
        "where the supervisor webhook is POSTed (http or https)",
    )
    supervisor_secret: str | None = setting(
        "ACP_SUPERVISOR_SECRET",
        OrUnset(Secret()),
        "",
        "the HMAC-SHA256 key that signs each webhook request and must sign each answer; "
        f"{MIN_SECRET_CHARS} characters or more",
    )
    supervisor_format: str = setting(
        "ACP_SUPERVISOR_FORMAT",
        Choice(SUPERVISOR_FORMATS),
        "bridge",
        "the webhook's request and answer shape: `bridge`, or `authzen` (an OpenID AuthZEN 1.0 "
        "access evaluation)",
    )
    # A supervisor that does not answer in this is down: a deny (or the console's turn).
    supervisor_timeout_s: float = setting(
        "ACP_SUPERVISOR_TIMEOUT_MS",
        Duration(),
        "10000",
        "how long the webhook gets to answer (never past the decision's own deadline)",
    )
    console_token: str | None = setting(
        "ACP_CONSOLE_TOKEN",
        OrUnset(Token()),
        "",
        "the operator's token for `/console`, the human console; required by "
        "`ACP_SUPERVISOR=console`, and distinct from every A2A token",
    )
    # --- end of the supervisors ---
    max_line_bytes: int = setting(
        "ACP_MAX_LINE_BYTES",
        Integer(minimum=MIN_MAX_LINE_BYTES, unit="bytes"),
        str(DEFAULT_MAX_LINE_BYTES),
        "longest line read from the adapter; a longer one fails the turn and stops the adapter",
    )
    max_parts: int = setting(
        "A2A_MAX_PARTS",
        Integer(minimum=1),
        str(DEFAULT_MAX_PARTS),
        "parts in one message at most; more is an invalid-params error",
    )
    # A new conversation that finds every adapter busy waits, first come first served.
    admission_timeout_s: float = setting(
        "ACP_ADMISSION_TIMEOUT_MS",
        Duration(minimum_ms=0),
        "60000",
        "a new conversation that finds every adapter busy waits this long, first come first "
        "served, before it is REJECTED (`0`: refused at once)",
    )
    # A stalled client would otherwise hold its connection and a file descriptor forever.
    header_timeout_s: float = setting(
        "A2A_HEADER_TIMEOUT_MS",
        Duration(),
        "10000",
        "a request's headers must arrive within this, else 408 and the connection is closed",
    )
    body_timeout_s: float = setting(
        "A2A_BODY_TIMEOUT_MS",
        Duration(),
        "30000",
        "a request's body must arrive within this after its headers, else the connection is closed",
    )
    # Well below a default file-descriptor limit of 1024, leaving room for adapters' pipes.
    max_connections: int = setting(
        "A2A_MAX_CONNECTIONS",
        Integer(minimum=1),
        "512",
        "open connections at most (streams included); a new one beyond is answered 503 "
        "before anything is read",
    )
    task_ttl_s: float | None = setting(
        "A2A_TASK_TTL",
        Span(),
        DEFAULT_TASK_TTL,
        "finished tasks older than this are deleted (`45s`, `30m`, `12h`, `7d`; `0`: kept up "
        "to `A2A_TASK_RETENTION`)",
    )
    sandbox_ttl_s: float | None = setting(
        "ACP_SANDBOX_TTL",
        Span(),
        DEFAULT_SANDBOX_TTL,
        "a conversation unused this long loses its sandbox, adapter home and record (never a "
        "handed `ACP_CWD`); `0`: never",
    )
    push_keys: tuple[str, ...] = setting(
        "A2A_PUSH_KEY",
        PushKeys(),
        "",
        "keys that encrypt push configs' secrets at rest (comma-separated, the first encrypts); "
        "unset, a key file made in the state directory (mode 0600)",
        shown="a key file in `ACP_STATE_DIR`",
    )
    policy: Policy | None = setting(
        "ACP_POLICY",
        OrUnset(PolicyFile()),
        "",
        "a policy file (TOML, docs/decisions.md) deciding permission requests before the "
        "built-in table; checked at start, an error names its line",
        shown="none: the built-in table",
    )
    policy_mode: str = setting(
        "ACP_POLICY_MODE",
        Choice(("enforce", "log-only")),
        "enforce",
        "`enforce`; `log-only`: the floor and the policy run and are recorded in the ledger, "
        "but the built-in table decides (a shadow trial of a policy)",
    )
    decision_timeout_s: float = setting(
        "ACP_DECISION_TIMEOUT_MS",
        Duration(),
        "120000",
        "how long a permission request waits for a supervisor's decision; no answer in time "
        "is a refusal",
    )
    decision_ttl_s: float | None = setting(
        "ACP_DECISION_TTL",
        Span(),
        "90d",
        "decisions older than this leave the ledger (`0`: kept up to `ACP_DECISION_RETENTION`)",
    )
    decision_retention: int = setting(
        "ACP_DECISION_RETENTION",
        Integer(minimum=1),
        "100000",
        "decisions kept in the ledger at most; beyond it the oldest go",
    )
    task_retention: int = setting(
        "A2A_TASK_RETENTION",
        Integer(minimum=1),
        str(DEFAULT_TASK_RETENTION),
        "finished tasks kept in memory for GetTask and ListTasks; beyond it the oldest "
        "finished ones are forgotten",
    )
    log_format: str = setting(
        "LOG_FORMAT",
        Choice(LOG_FORMATS),
        "auto",
        "`text` (one readable line), `json` (JSON lines); `auto`: text on a terminal, JSON "
        "otherwise",
    )
    log_level: str = setting(
        "LOG_LEVEL",
        Choice(LOG_LEVELS, upper=True),
        "INFO",
        "`DEBUG`, `INFO`, `WARNING` or `ERROR`; only `DEBUG` shows prompt text and adapter stderr",
    )
    # Handed to a2a-sdk as written (the CLI sets it before importing the SDK).
    a2a_sdk_tracing: str = setting(
        "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED",
        Text(),
        "false",
        "a2a-sdk's OpenTelemetry spans; set `true` when an OpenTelemetry SDK is configured "
        "(off, the bridge saves a fifth of a short turn's latency)",
    )

    # Not settings: where the bridge runs (its .env and state directory are protected) and
    # the token file's path (protected too); from_env fills them in.
    workdir: Path = field(default_factory=Path.cwd)
    token_file: Path | None = None

    def __post_init__(self) -> None:
        if not self.authenticates and not self.insecure and not is_loopback(self.host):
            raise ConfigError(
                "HOST",
                f"{self.host!r} is reachable from other machines and no token is set: set "
                "A2A_TOKEN, A2A_TOKEN_FILE or A2A_JWT_ISSUER, or pass --insecure to serve "
                "without authentication",
            )
        self._check_jwt()
        if self.pool_size > self.max_sessions:
            raise ConfigError(
                "ACP_POOL_SIZE",
                f"{self.pool_size} warm adapters exceed ACP_MAX_SESSIONS ({self.max_sessions})",
            )
        check_supervisors(self)  # issue 20: the supervisors

    def protection(self) -> Protection:
        """What every root protects beyond the protected names: the bridge's own files
        (its .env, state directory, token file, sandboxes parent), and the names the
        operator opened (ACP_WRITABLE_PROTECTED)."""
        return bridge_protection(
            self.workdir,
            sandbox_parent=self.sandbox_parent,
            token_file=self.token_file,
            writable=self.writable_protected,
        )

    def _check_jwt(self) -> None:
        jwt_rows = {
            "A2A_JWT_AUDIENCE": self.jwt_audience,
            "A2A_JWT_JWKS_URL": self.jwt_jwks_url,
            "A2A_JWT_JWKS_FILE": self.jwt_jwks_file,
            "A2A_JWT_REQUIRED_SCOPE": self.jwt_required_scope,
        }
        if self.jwt_issuer is None:
            for variable, value in jwt_rows.items():
                if value is not None:
                    raise ConfigError(variable, "needs A2A_JWT_ISSUER")
            return
        if self.jwt_audience is None:
            raise ConfigError("A2A_JWT_AUDIENCE", "must be set with A2A_JWT_ISSUER")
        if self.jwt_jwks_url is None and self.jwt_jwks_file is None:
            raise ConfigError(
                "A2A_JWT_ISSUER", "needs the issuer's keys: A2A_JWT_JWKS_URL or A2A_JWT_JWKS_FILE"
            )
        url = self.jwt_jwks_url
        if url is not None and url.startswith("http://"):
            host = urlsplit(url).hostname or ""
            if not is_loopback(host):
                raise ConfigError(
                    "A2A_JWT_JWKS_URL", "the keys must come over https (http only on loopback)"
                )

    @property
    def tokens(self) -> tuple[TokenEntry, ...]:
        """The bearer tokens requests may carry, with their principals (A2A_TOKEN alone is
        the principal `default`)."""
        if self.token:
            return (TokenEntry(DEFAULT_PRINCIPAL, sha256=digest(self.token), plain=self.token),)
        return self.file_tokens

    @property
    def jwt_policy(self) -> JwtPolicy | None:
        """What a JWT bearer token must satisfy, when JWTs are accepted."""
        if self.jwt_issuer is None or self.jwt_audience is None:
            return None
        return JwtPolicy(
            issuer=self.jwt_issuer,
            audience=self.jwt_audience,
            jwks_url=self.jwt_jwks_url,
            jwks_file=self.jwt_jwks_file,
            principal_claim=self.jwt_principal_claim,
            required_scope=self.jwt_required_scope,
        )

    @property
    def authenticates(self) -> bool:
        """Whether every request but the public ones needs a bearer token."""
        return bool(self.tokens) or self.jwt_issuer is not None

    @property
    def per_principal_sessions(self) -> int:
        """ACP_MAX_SESSIONS_PER_PRINCIPAL, unset: the global cap."""
        return self.max_sessions_per_principal or self.max_sessions

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

        A blank value counts as unset. `insecure` is the `--insecure` flag: it alone
        allows serving beyond loopback without a token."""
        base = cwd or Path.cwd()
        values: dict[str, Any] = parse_settings(SETTINGS, env, {"--insecure": insecure}, base)
        token_file = env.get("A2A_TOKEN_FILE", "").strip()
        token_path = Path(token_file).expanduser() if token_file else None
        if token_path is not None and not token_path.is_absolute():
            token_path = base / token_path
        return cls(**values, workdir=base, token_file=token_path)


# The table's rows, in the order the docs list them.
SETTINGS: tuple[Setting, ...] = settings_table(Settings)

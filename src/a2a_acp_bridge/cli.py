"""The command line: `serve`, `doctor`, `send`, `card`, `token hash`, `policy` and `decisions`.

This is the only module that reads the environment, the `.env` file and argv. A bad value
stops the start with one line naming the variable and the problem, and exit status 2.
What each setting is, its flag included, comes from the table in config.py.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from dotenv.parser import parse_stream

from a2a_acp_bridge import __version__
from a2a_acp_bridge.config import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    PRESETS,
    SETTINGS,
    Settings,
    parse_tokens,
)
from a2a_acp_bridge.errors import ConfigError
from a2a_acp_bridge.isolation import Isolation
from a2a_acp_bridge.logs import configure_logging
from a2a_acp_bridge.principals import check_token, hash_scrypt, hash_sha256

PROG = "a2a-acp-bridge"
A2A_TRACING_VARIABLE = "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED"
EXIT_USAGE = 2
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# The serve flags (argparse's attribute for each) and the variable each one stands for.
FLAG_VARIABLES = {
    row.flag.removeprefix("--").replace("-", "_"): row.variable
    for row in SETTINGS
    if row.flag and row.variable
}


def read_dotenv(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a .env file, read as python-dotenv reads them: `export`, comments,
    single quotes (literal) and double quotes (with \\n, \\" and \\\\ escapes), values over
    several lines inside quotes. `${VAR}` is not expanded. A line that is not a setting is
    an error naming its number, never skipped."""
    values: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return values
    except OSError as exc:
        raise ConfigError(".env", f"cannot be read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(".env", "is not UTF-8 text") from None
    for binding in parse_stream(io.StringIO(text)):
        if binding.key is None and not binding.error:
            continue  # a blank line or a comment
        if (
            binding.error
            or binding.key is None
            or binding.value is None
            or not _VARIABLE_NAME.fullmatch(binding.key)
        ):
            # python-dotenv counts from the blank lines before the statement.
            source = binding.original.string
            blank_lines = source[: len(source) - len(source.lstrip())].count("\n")
            number = binding.original.line + blank_lines
            raise ConfigError(".env", f"line {number} is not KEY=VALUE")
        values[binding.key] = binding.value
    return values


def effective_environment(
    environ: Mapping[str, str], flags: Mapping[str, str | None], cwd: Path
) -> dict[str, str]:
    """.env under the real environment under the command-line flags."""
    merged = read_dotenv(cwd / ".env")
    merged.update(environ)
    for flag, variable in FLAG_VARIABLES.items():
        value = flags.get(flag)
        if value is not None:
            merged[variable] = value
    return merged


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="An A2A server that runs each task on an ACP coding agent it supervises.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the A2A server")
    for row in SETTINGS:
        if row.flag is None:
            continue
        help_text = _plain(f"{row.variable}: {row.doc}" if row.variable else row.doc)
        if row.variable is None:
            serve.add_argument(row.flag, action="store_true", help=help_text)
        else:
            serve.add_argument(row.flag, help=help_text)

    doctor = commands.add_parser(
        "doctor",
        help="start the adapter once as serve would and say what is missing (exit 0: ready)",
    )
    doctor.add_argument(
        "--agent",
        help=f"ACP_AGENT: a preset ({', '.join(PRESETS)}) or any ACP agent command line",
    )

    send = commands.add_parser("send", help="send one message and print the task's progress")
    send.add_argument("text", help="the message")
    send.add_argument("--url", default=f"http://{DEFAULT_HOST}:{DEFAULT_PORT}")
    send.add_argument("--context", help="continue this contextId")
    send.add_argument("--task", help="send into this taskId")
    _token_flag(send)

    policy = commands.add_parser("policy", help="check a policy file (ACP_POLICY) or explain it")
    policy_commands = policy.add_subparsers(dest="policy_command", required=True)
    check = policy_commands.add_parser("check", help="validate, run the examples, print the rules")
    check.add_argument("file", type=Path)
    explain = policy_commands.add_parser(
        "explain", help="decide one made-up request with the policy and say who decided"
    )
    explain.add_argument("file", type=Path)
    explain.add_argument("--kind", required=True, help="execute, edit, read, fetch, other, ...")
    explain.add_argument("--command", dest="command_line", help="an execute's command line")
    explain.add_argument("--path", action="append", default=[], help="a path (repeatable)")
    explain.add_argument("--url", help="the URL of a fetch")
    explain.add_argument("--title", help="the tool call's title (other)")
    explain.add_argument("--root", type=Path, help="the working directory (default: here)")
    explain.add_argument("--owned", action="store_true", help="the root is a bridge sandbox")
    explain.add_argument("--allow-execute", action="store_true", help="as ACP_ALLOW_EXECUTE")

    decisions = commands.add_parser(
        "decisions", help="print the decision ledger of ACP_STATE_DIR, newest first"
    )
    decisions.add_argument("--context", help="only this contextId")
    decisions.add_argument("--since", help="only from this time (ISO 8601 UTC or epoch seconds)")
    decisions.add_argument("--limit", type=int, default=100, help="at most this many (100)")
    decisions.add_argument("--json", action="store_true", help="JSON instead of lines")

    token = commands.add_parser("token", help="tokens of A2A_TOKEN_FILE")
    token_commands = token.add_subparsers(dest="token_command", required=True)
    hashing = token_commands.add_parser(
        "hash",
        help="read a token from stdin, print its hashed form for A2A_TOKEN_FILE (NAME HASH)",
    )
    hashing.add_argument(
        "--scrypt", action="store_true", help="scrypt (slow to guess) instead of sha256"
    )

    card = commands.add_parser("card", help="print the agent card")
    card.add_argument("--url", default=f"http://{DEFAULT_HOST}:{DEFAULT_PORT}")
    _token_flag(card)
    return parser


def _plain(markdown: str) -> str:
    """A doc of the table as --help shows it: no Markdown marks, and % escaped."""
    return markdown.replace("`", "").replace("**", "").replace("%", "%%")


def _token_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--token",
        help="bearer token for the bridge (default: A2A_TOKEN, or the first token A2A_TOKEN_FILE "
        "holds in clear)",
    )


def _client_token(flag: str | None) -> str | None:
    """The token `send` and `card` present: --token, else the server's own variables."""
    if flag:
        return flag
    env = effective_environment(os.environ, {}, Path.cwd())
    tokens = parse_tokens(env, base=Path.cwd())
    return tokens[0] if tokens else None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "doctor":
        return _doctor(args)
    if args.command in ("policy", "decisions"):
        return _decision_channel(args)
    if args.command == "token":
        return _hash_token(args)
    from a2a_acp_bridge.a2a.client import print_card, send_and_print

    try:
        token = _client_token(args.token)
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.command == "send":
        return asyncio.run(send_and_print(args.url, args.text, args.context, args.task, token))
    return asyncio.run(print_card(args.url, token))


def _decision_channel(args: argparse.Namespace) -> int:
    from a2a_acp_bridge import decisions_cli

    if args.command == "policy" and args.policy_command == "check":
        return decisions_cli.check_policy(args.file, sys.stdout)
    if args.command == "policy":
        return decisions_cli.explain(
            args.file,
            sys.stdout,
            kind=args.kind,
            command=args.command_line,
            paths=args.path,
            url=args.url,
            title=args.title,
            root=args.root,
            owned=args.owned,
            allow_execute=args.allow_execute,
        )
    cwd = Path.cwd()
    try:
        env = effective_environment(os.environ, {}, cwd)
        settings = Settings.from_env(env, cwd=cwd, insecure=True)
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return decisions_cli.show_decisions(
        settings.state_dir,
        sys.stdout,
        database_url=settings.database_url,
        context_id=args.context,
        since=args.since,
        limit=max(1, args.limit),
        as_json=args.json,
    )


def _hash_token(args: argparse.Namespace) -> int:
    """The token on stdin's first line, hashed (never echoed: not even in an error)."""
    line = sys.stdin.readline().strip()
    try:
        token = check_token("the token on stdin", line)
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(hash_scrypt(token) if args.scrypt else hash_sha256(token))
    return 0


def _doctor(args: argparse.Namespace) -> int:
    cwd = Path.cwd()
    try:
        env = effective_environment(os.environ, {"agent": args.agent}, cwd)
        settings = Settings.from_env(env, cwd=cwd, insecure=True)
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # Doctor's own lines say what the bridge's log would; LOG_LEVEL asks for the log too.
    level = (env.get("LOG_LEVEL") or "CRITICAL").strip().upper()
    configure_logging(env.get("LOG_FORMAT"), level)
    from a2a_acp_bridge.doctor import run_doctor

    return asyncio.run(run_doctor(settings, sys.stdout))


def _serve(args: argparse.Namespace) -> int:
    cwd = Path.cwd()
    flags = {flag: getattr(args, flag) for flag in FLAG_VARIABLES}
    try:
        env = effective_environment(os.environ, flags, cwd)
        settings = Settings.from_env(env, cwd=cwd, insecure=args.insecure)
        # Fail closed before anything listens: isolation requested but unavailable.
        Isolation(settings, os.environ)
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    configure_logging(settings.log_format, settings.log_level)
    # a2a-sdk wraps every step of a request in an OpenTelemetry span. Without an
    # OpenTelemetry SDK configured those spans go nowhere, yet cost about a fifth of a
    # short turn's latency (bench/). Tracing stays available: set the variable to true.
    # It is read when a2a-sdk is imported, so it must be set before the import below.
    os.environ[A2A_TRACING_VARIABLE] = settings.a2a_sdk_tracing
    from a2a_acp_bridge.server import run_server

    return run_server(settings)

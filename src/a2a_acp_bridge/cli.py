"""The command line: `serve`, `send` and `card`.

This is the only module that reads the environment, the `.env` file and argv. A bad value
stops the start with one line naming the variable and the problem, and exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from a2a_acp_bridge import __version__
from a2a_acp_bridge.config import DEFAULT_HOST, DEFAULT_PORT, PRESETS, Settings, parse_tokens
from a2a_acp_bridge.errors import ConfigError
from a2a_acp_bridge.isolation import Isolation
from a2a_acp_bridge.logs import configure_logging

PROG = "a2a-acp-bridge"
A2A_TRACING_VARIABLE = "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED"
EXIT_USAGE = 2
LOG_FORMATS = ("auto", "text", "json")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

# Command-line flags and the environment variable each one stands for.
FLAG_VARIABLES = {
    "agent": "ACP_AGENT",
    "host": "HOST",
    "port": "PORT",
    "public_url": "PUBLIC_URL",
    "name": "AGENT_NAME",
}


def read_dotenv(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a .env file (comments, `export` and quotes allowed)."""
    values: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return values
    except OSError as exc:
        raise ConfigError(".env", f"cannot be read: {exc.strerror}") from None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key.replace("_", "").isalnum():
            raise ConfigError(".env", f"line {number} is not KEY=VALUE")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        values[key] = value
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
    serve.add_argument(
        "--agent",
        help=f"ACP_AGENT: a preset ({', '.join(PRESETS)}) or any ACP agent command line",
    )
    serve.add_argument("--host", help=f"HOST: address to listen on (default {DEFAULT_HOST})")
    serve.add_argument("--port", help=f"PORT: port to listen on (default {DEFAULT_PORT})")
    serve.add_argument("--public-url", help="PUBLIC_URL: base URL written in the agent card")
    serve.add_argument("--name", help="AGENT_NAME: the agent's name in the card")
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="serve beyond loopback without a token (anyone who reaches the port may use it)",
    )

    send = commands.add_parser("send", help="send one message and print the task's progress")
    send.add_argument("text", help="the message")
    send.add_argument("--url", default=f"http://{DEFAULT_HOST}:{DEFAULT_PORT}")
    send.add_argument("--context", help="continue this contextId")
    send.add_argument("--task", help="send into this taskId")
    _token_flag(send)

    card = commands.add_parser("card", help="print the agent card")
    card.add_argument("--url", default=f"http://{DEFAULT_HOST}:{DEFAULT_PORT}")
    _token_flag(card)
    return parser


def _token_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--token",
        help="bearer token for the bridge (default: A2A_TOKEN, or the first of A2A_TOKEN_FILE)",
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
    from a2a_acp_bridge.a2a.client import print_card, send_and_print

    try:
        token = _client_token(args.token)
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.command == "send":
        return asyncio.run(send_and_print(args.url, args.text, args.context, args.task, token))
    return asyncio.run(print_card(args.url, token))


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
    log_format = (env.get("LOG_FORMAT") or "auto").strip().lower()
    log_level = (env.get("LOG_LEVEL") or "INFO").strip().upper()
    problem = None
    if log_format not in LOG_FORMATS:
        problem = f"LOG_FORMAT: {log_format!r} is not one of {', '.join(LOG_FORMATS)}"
    elif log_level not in LOG_LEVELS:
        problem = f"LOG_LEVEL: {log_level!r} is not one of {', '.join(LOG_LEVELS)}"
    if problem:
        print(f"{PROG}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    configure_logging(log_format, log_level)
    # a2a-sdk wraps every step of a request in an OpenTelemetry span. Without an
    # OpenTelemetry SDK configured those spans go nowhere, yet cost about a fifth of a
    # short turn's latency (bench/). Tracing stays available: set the variable to true.
    # It is read when a2a-sdk is imported, so it must be set before the import below.
    os.environ[A2A_TRACING_VARIABLE] = env.get(A2A_TRACING_VARIABLE) or "false"
    from a2a_acp_bridge.server import run_server

    return run_server(settings)

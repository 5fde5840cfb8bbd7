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
from a2a_acp_bridge.config import DEFAULT_HOST, DEFAULT_PORT, PRESETS, Settings
from a2a_acp_bridge.errors import ConfigError
from a2a_acp_bridge.logs import configure_logging

PROG = "a2a-acp-bridge"
EXIT_USAGE = 2

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

    send = commands.add_parser("send", help="send one message and print the task's progress")
    send.add_argument("text", help="the message")
    send.add_argument("--url", default=f"http://{DEFAULT_HOST}:{DEFAULT_PORT}")
    send.add_argument("--context", help="continue this contextId")
    send.add_argument("--task", help="send into this taskId")

    card = commands.add_parser("card", help="print the agent card")
    card.add_argument("--url", default=f"http://{DEFAULT_HOST}:{DEFAULT_PORT}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    from a2a_acp_bridge.a2a.client import print_card, send_and_print

    if args.command == "send":
        return asyncio.run(send_and_print(args.url, args.text, args.context, args.task))
    return asyncio.run(print_card(args.url))


def _serve(args: argparse.Namespace) -> int:
    cwd = Path.cwd()
    flags = {flag: getattr(args, flag) for flag in FLAG_VARIABLES}
    try:
        env = effective_environment(os.environ, flags, cwd)
        settings = Settings.from_env(env, cwd=cwd)
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    configure_logging(env.get("LOG_FORMAT"), env.get("LOG_LEVEL"))
    from a2a_acp_bridge.server import run_server

    return run_server(settings)

"""What reaches a terminal or a log line is shown, never obeyed.

A contextId, a tool call's title, a command and the agent's answer are text a caller or
a prompt-injected model chose: an escape sequence there could retitle the operator's
terminal, clear it, hide text, or rewrite an earlier line. Through the running bridge,
the text log and the `send` command must show such characters as escapes.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from a2a_acp_bridge.a2a.client import send_and_print
from a2a_acp_bridge.logs import make_handler
from a2a_acp_bridge.terminal import json_safe, neutralise
from tests.support.agents import CLAUDE_INFO, CLAUDE_MODES, CLAUDE_OPTIONS, scripted_agent
from tests.support.server import make_settings, serve_bridge
from tests.support.wire import send

pytestmark = pytest.mark.anyio

# A window title change, a screen clear, concealed text, a line rewritten by a carriage
# return, a one-byte CSI (C1), a backspace, a bell, a right-to-left override.
HOSTILE = "ok\x1b]0;pwned\x07\x1b[2J\x1b[8mhidden\x1b[0m\rover\x9b31m\x08\x7f\u202eevil"
RAW = ("\x1b", "\x07", "\r", "\x9b", "\x08", "\x7f", "\u202e")


def assert_inert(text: str) -> None:
    found = [hex(ord(c)) for c in RAW if c in text]
    assert found == [], f"raw control characters reached the output: {found}"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        pytest.param("\x1b[2J", "\\x1b[2J", id="escape"),
        pytest.param("a\x07b", "a\\x07b", id="bell"),
        pytest.param("\x9b2J", "\\x9b2J", id="c1-csi"),
        pytest.param("x\ry", "x\\x0dy", id="carriage-return"),
        pytest.param("\u202etxt.exe", "\\u202etxt.exe", id="bidi-override"),
        pytest.param("zero\u200bwidth", "zero\\u200bwidth", id="zero-width"),
        pytest.param("plain ü text", "plain ü text", id="printable-text-untouched"),
    ],
)
def test_neutralise_shows_every_control_character_as_an_escape(text: str, shown: str) -> None:
    assert neutralise(text) == shown


def test_newlines_and_tabs_survive_only_where_they_are_kept() -> None:
    assert neutralise("a\nb\tc\r\nd", keep="\n\t") == "a\nb\tc\nd"
    assert neutralise("a\nb") == "a\\x0ab"


def test_a_json_line_stays_the_same_json_with_nothing_raw_in_it() -> None:
    entry = {"title": HOSTILE}
    line = json_safe(json.dumps(entry, ensure_ascii=False))
    assert json.loads(line) == entry
    assert_inert(line)


@pytest.fixture
def captured() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """The bridge's log as the operator's terminal (text) and a collector (JSON) get it."""
    text, lines = io.StringIO(), io.StringIO()
    handlers = [make_handler(text, use_json=False), make_handler(lines, use_json=True)]
    root = logging.getLogger()
    level = root.level
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield text, lines
    finally:
        for handler in handlers:
            root.removeHandler(handler)
        root.setLevel(level)


async def test_ids_titles_and_commands_reach_the_log_as_escapes(
    tmp_path: Path, captured: tuple[io.StringIO, io.StringIO]
) -> None:
    text_log, json_log = captured
    command = {
        "op": "permission",
        "tool_call": {
            "toolCallId": "call\x1b[2J",
            "title": f"rm -rf build {HOSTILE}",
            "kind": "execute",
            "rawInput": {"command": f"rm -rf build {HOSTILE}"},
        },
        "options": CLAUDE_OPTIONS,
    }
    script = {
        "agent_info": CLAUDE_INFO,
        "modes": CLAUDE_MODES,
        "config_mode": True,
        "turns": [[command, {"op": "say", "text": HOSTILE}]],
    }
    settings = make_settings(tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script)})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        task = await send(client, bridge.rpc_url, "go", contextId="\x1b]0;ctx\x07\x1b[2J-ctx")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    terminal = text_log.getvalue()
    assert "permission decided" in terminal
    assert_inert(terminal)
    # Shown, so the operator sees the attempt (a quoted value escapes its backslashes too).
    assert "tool_call_id=call\\x1b[2J " in terminal
    assert 'title="rm -rf build ok\\\\x1b]0;pwned\\\\x07' in terminal
    assert "ctx=\\x1b]0;ctx\\x07 " in terminal
    collected = json_log.getvalue()
    assert_inert(collected)
    decided = [
        entry
        for entry in map(json.loads, collected.splitlines())
        if entry["event"] == "permission decided"
    ]
    # The JSON keeps the text itself (the label folds whitespace), readable back exactly.
    assert decided[0]["title"] == " ".join(f"rm -rf build {HOSTILE}".split())


async def test_the_send_command_prints_agent_text_without_terminal_escapes(
    tmp_path: Path,
) -> None:
    script = {
        "agent_info": CLAUDE_INFO,
        "modes": CLAUDE_MODES,
        "config_mode": True,
        "turns": [
            [
                {
                    "op": "tool_call",
                    "call": {"toolCallId": "t1", "title": f"Read {HOSTILE}", "kind": "read"},
                },
                {"op": "think", "text": HOSTILE},
                {"op": "say", "text": f"line one\n{HOSTILE}\n\ttabbed\n"},
            ]
        ],
    }
    settings = make_settings(tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script)})
    out = io.StringIO()
    async with serve_bridge(settings) as bridge:
        status = await send_and_print(bridge.url, "go", None, None, out=out)
    printed = out.getvalue()
    assert status == 0
    assert_inert(printed)
    assert "line one\nok\\x1b]0;pwned\\x07\\x1b[2J\\x1b[8mhidden" in printed
    assert "\n\ttabbed\n" in printed
    assert "Read ok\\x1b]0;pwned" in printed  # the tool call's status line
    assert "[COMPLETED]" in printed

"""The login through a running bridge, on the scripted agent (a real ACP subprocess) that
refuses session/new and session/load (-32000) until `authenticate` succeeds with a variable
set in its own environment; as an honest adapter, and as one whose error text echoes a secret.

The agent reports codex-acp's name, so the bridge applies codex-acp's table (api-key <-
CODEX_API_KEY or OPENAI_API_KEY), or a name the bridge does not know.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.agents import CODEX_INFO, logged_agent
from tests.support.procs import events, read_log, wait_for_event, wait_until_gone
from tests.support.server import make_settings, serve_bridge
from tests.support.wire import answer_text, send, status_text

pytestmark = pytest.mark.anyio

KEY = "sk-S3CR3T-operator-key-0123456789"
CODEX_MODES = {"current": "read-only", "available": ["read-only", "agent", "agent-full-access"]}
CODEX_METHODS = [{"id": "api-key", "name": "API Key"}, {"id": "chat-gpt", "name": "ChatGPT"}]
CODEX_LIKE: dict[str, Any] = {
    "agent_info": CODEX_INFO,
    "modes": CODEX_MODES,
    "auth_methods": CODEX_METHODS,
    "auth": {"api-key": "OPENAI_API_KEY"},
    "turns": [[{"op": "say", "text": "logged in and working"}]],
}


def environ(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8", **extra}


async def run(
    tmp_path: Path,
    script: dict[str, Any],
    env: dict[str, str],
    settings_env: dict[str, str] | None = None,
) -> tuple[dict[str, Any], Path]:
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent, **(settings_env or {})})
    async with (
        serve_bridge(settings, environ=env) as bridge,
        httpx.AsyncClient(timeout=30) as client,
    ):
        task = await send(client, bridge.rpc_url, "go")
    return task, log


def methods_called(log: Path) -> list[str]:
    wanted = {"authenticate", "session/new", "session/load", "session/prompt"}
    return [entry["event"] for entry in read_log(log) if entry["event"] in wanted]


async def test_a_refused_session_new_is_retried_once_after_logging_in_with_the_operators_key(
    tmp_path: Path,
) -> None:
    task, log = await run(tmp_path, CODEX_LIKE, environ(tmp_path, OPENAI_API_KEY=KEY))
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", status_text(task["status"])
    assert "logged in and working" in answer_text(task)
    assert methods_called(log) == ["session/new", "authenticate", "session/new", "session/prompt"]
    # Only the method travels over ACP: the adapter reads the key from its own environment.
    assert [e["params"] for e in events(log, "authenticate")] == [{"methodId": "api-key"}]
    assert KEY not in log.read_text()
    assert await wait_until_gone(log) == []


async def test_without_the_key_the_task_fails_naming_the_variables_and_the_login_command(
    tmp_path: Path,
) -> None:
    task, log = await run(tmp_path, CODEX_LIKE, environ(tmp_path))
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    text = status_text(task["status"])
    assert text.startswith(
        "codex-acp is not authenticated: set CODEX_API_KEY or OPENAI_API_KEY (its 'api-key' "
        "method) in the bridge's environment, or log in once with `"
    )
    assert "which stores it in ~/.codex/auth.json" in text  # the caller sees no layout
    assert events(log, "authenticate") == []  # nothing it could log in with: nothing tried
    assert events(log, "session/prompt") == []


async def test_a_refused_session_load_logs_in_and_reloads_so_the_memory_is_kept(
    tmp_path: Path,
) -> None:
    script = {**CODEX_LIKE, "load_session": True}
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent, "ACP_IDLE_TIMEOUT_MS": "300"})
    async with (
        serve_bridge(settings, environ=environ(tmp_path, OPENAI_API_KEY=KEY)) as bridge,
        httpx.AsyncClient(timeout=30) as client,
    ):
        first = await send(client, bridge.rpc_url, "one")
        assert first["status"]["state"] == "TASK_STATE_COMPLETED", status_text(first["status"])
        await wait_for_event(log, "session/close")
        assert await wait_until_gone(log) == []
        again = await send(client, bridge.rpc_url, "two", context_id=first["contextId"])
    assert again["status"]["state"] == "TASK_STATE_COMPLETED", status_text(again["status"])
    statuses = " ".join(
        part.get("text", "") for message in again["history"] for part in message["parts"]
    )
    assert "memory of earlier messages in this context is lost" not in statuses
    assert methods_called(log) == [
        "session/new",
        "authenticate",
        "session/new",
        "session/prompt",
        "session/load",
        "authenticate",
        "session/load",
        "session/prompt",
    ]


async def test_the_operators_method_is_called_before_session_new(tmp_path: Path) -> None:
    task, log = await run(
        tmp_path,
        CODEX_LIKE,
        environ(tmp_path, OPENAI_API_KEY=KEY),
        {"ACP_AUTH_METHOD": "api-key"},
    )
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", status_text(task["status"])
    assert methods_called(log) == ["authenticate", "session/new", "session/prompt"]


async def test_a_method_the_adapter_does_not_offer_fails_before_any_session(
    tmp_path: Path,
) -> None:
    task, log = await run(
        tmp_path,
        CODEX_LIKE,
        environ(tmp_path, OPENAI_API_KEY=KEY),
        {"ACP_AUTH_METHOD": "gemini-api-key"},
    )
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert status_text(task["status"]) == (
        "codex-acp does not offer the authentication method 'gemini-api-key' named by "
        "ACP_AUTH_METHOD; it offers: 'api-key', 'chat-gpt'"
    )
    assert methods_called(log) == []
    assert await wait_until_gone(log) == []


async def test_an_interactive_method_named_by_the_operator_is_never_called(
    tmp_path: Path,
) -> None:
    task, log = await run(tmp_path, CODEX_LIKE, environ(tmp_path), {"ACP_AUTH_METHOD": "chat-gpt"})
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    text = status_text(task["status"])
    assert "'chat-gpt' (ACP_AUTH_METHOD) is an interactive login, which the bridge never" in text
    assert " cli login` (a ChatGPT login)" in text
    assert methods_called(log) == []


async def test_a_failed_login_names_adapter_and_method_and_never_repeats_the_agents_text(
    tmp_path: Path,
) -> None:
    # A hostile or careless adapter: its error text quotes the secret it was given.
    script = {
        **CODEX_LIKE,
        "agent_info": {"name": "custom-agent", "version": "1"},
        "auth_methods": [{"id": "token", "name": "Token"}],
        "auth": {"token": "NOT_SET_ANYWHERE"},
        "auth_error": f"invalid token {KEY}",
    }
    task, log = await run(
        tmp_path, script, environ(tmp_path, OPENAI_API_KEY=KEY), {"ACP_AUTH_METHOD": "token"}
    )
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    text = status_text(task["status"])
    assert text == (
        "custom-agent refused to log in with its 'token' method (JSON-RPC error -32000), "
        "given ACP_AUTH_METHOD: check that setting"
    )
    assert KEY not in str(task)
    assert methods_called(log) == ["authenticate"]


async def test_an_adapter_that_never_answers_authenticate_fails_within_the_start_deadline(
    tmp_path: Path,
) -> None:
    script = {**CODEX_LIKE, "hang": ["authenticate"]}
    task, log = await run(
        tmp_path,
        script,
        environ(tmp_path, OPENAI_API_KEY=KEY),
        {"ACP_START_TIMEOUT_MS": "1000"},
    )
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert "did not finish starting within 1 s (ACP_START_TIMEOUT_MS)" in status_text(
        task["status"]
    )
    assert methods_called(log) == ["session/new", "authenticate"]
    assert await wait_until_gone(log) == []


@pytest.mark.parametrize(
    ("settings_env", "calls"),
    [
        ({}, ["session/new", "authenticate", "session/new"]),
        ({"ACP_AUTH_METHOD": "api-key"}, ["authenticate", "session/new"]),
    ],
    ids=["chosen", "named"],
)
async def test_an_adapter_that_still_refuses_after_the_login_fails_once_without_a_loop(
    tmp_path: Path, settings_env: dict[str, str], calls: list[str]
) -> None:
    script = {**CODEX_LIKE, "auth_ignored": True}
    task, log = await run(tmp_path, script, environ(tmp_path, OPENAI_API_KEY=KEY), settings_env)
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert status_text(task["status"]).startswith(
        "codex-acp is still not authenticated after logging in with its 'api-key' method "
        "(given OPENAI_API_KEY): "
    )
    assert KEY not in str(task)
    assert methods_called(log) == calls

"""ACP_SUPERVISOR builds the supervisor the operator named, and `webhook,console` hands the
console only what the webhook gave no verdict on; both count in the metrics."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import anyio
import pytest

from a2a_acp_bridge.config import Settings
from a2a_acp_bridge.console import ConsoleSupervisor
from a2a_acp_bridge.decision import Answer
from a2a_acp_bridge.metrics import Metrics
from a2a_acp_bridge.supervisor_webhook import WebhookSupervisor
from a2a_acp_bridge.supervisors import FirstThenSecond, find_console, supervisor_from
from tests.support.scripted_supervisor import SECRET, question, serve_supervisor, signed

pytestmark = pytest.mark.anyio
CONSOLE_TOKEN = "operator-console-" + "c" * 24
# How long a test waits for the console to be asked.
ASKED_WITHIN_S = 20.0


def settings(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env(env, cwd=tmp_path)


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/decide"


def test_no_supervisor_is_none_and_each_name_builds_its_own(tmp_path: Path) -> None:
    assert supervisor_from(settings(tmp_path)) is None
    webhook = supervisor_from(
        settings(
            tmp_path,
            ACP_SUPERVISOR="webhook",
            ACP_SUPERVISOR_URL="https://pdp.example/access/v1/evaluation",
            ACP_SUPERVISOR_SECRET=SECRET,
            ACP_SUPERVISOR_FORMAT="authzen",
            ACP_SUPERVISOR_TIMEOUT_MS="2500",
        )
    )
    assert isinstance(webhook, WebhookSupervisor)
    assert (webhook.url, webhook.format, webhook.timeout_s) == (
        "https://pdp.example/access/v1/evaluation",
        "authzen",
        2.5,
    )
    assert find_console(webhook) is None
    console = supervisor_from(
        settings(tmp_path, ACP_SUPERVISOR="console", ACP_CONSOLE_TOKEN=CONSOLE_TOKEN)
    )
    assert isinstance(console, ConsoleSupervisor)
    assert find_console(console) is console
    pair = supervisor_from(
        settings(
            tmp_path,
            ACP_SUPERVISOR="webhook,console",
            ACP_SUPERVISOR_URL="http://127.0.0.1:9/decide",
            ACP_SUPERVISOR_SECRET=SECRET,
            ACP_CONSOLE_TOKEN=CONSOLE_TOKEN,
        )
    )
    assert isinstance(pair, FirstThenSecond)
    assert pair.name == "webhook,console"
    assert isinstance(pair.first, WebhookSupervisor)
    assert find_console(pair) is pair.second


@pytest.mark.parametrize("verdict", ["allow", "deny"])
async def test_the_webhooks_verdict_is_final_and_the_console_is_not_asked(verdict: str) -> None:
    console = ConsoleSupervisor()
    async with serve_supervisor(signed({"decision": verdict, "reason": "pdp"})) as hook:
        pair = FirstThenSecond(WebhookSupervisor(hook.url, SECRET), console)
        answer = await pair.ask(question())
    assert answer == Answer(verdict, "pdp", "webhook")  # type: ignore[arg-type]
    assert console.version == 0  # never parked anything


async def ask_through_console(
    pair: FirstThenSecond, console: ConsoleSupervisor, click: str
) -> Answer:
    """Ask `pair`; when the console shows the question, click `click` on it."""
    q = question()
    result: dict[str, Answer] = {}
    async with anyio.create_task_group() as group:

        async def ask() -> None:
            result["answer"] = await pair.ask(q)

        group.start_soon(ask)
        with anyio.fail_after(ASKED_WITHIN_S):
            while not console.waiting():
                await console.changed(console.version)
        shown = console.waiting()[0]
        assert shown["id"] == q.id
        assert shown["reason"].startswith(
            "a push leaves the machine (the webhook gave no verdict: "
        )
        assert console.decide(q.id, click, "the operator looked") == "decided"
    return result["answer"]


async def test_a_webhook_that_is_down_hands_the_question_to_the_console() -> None:
    console = ConsoleSupervisor()
    metrics = Metrics()
    webhook = WebhookSupervisor(
        closed_port_url(),
        SECRET,
        on_outcome=lambda *a: metrics.supervisor_answered("webhook", *a),
    )
    answer = await ask_through_console(FirstThenSecond(webhook, console), console, "allow")
    assert answer == Answer("allow", "the operator looked", "console")
    text = metrics.exposition().decode()
    assert 'a2a_acp_bridge_supervisor_failures_total{cause="down",supervisor="webhook"} 1.0' in text


async def test_a_forged_allow_from_the_webhook_goes_to_the_console_and_is_no_allow() -> None:
    console = ConsoleSupervisor()
    forged = signed({"decision": "allow", "reason": "trust me"}, secret="forged-" + "f" * 40)
    async with serve_supervisor(forged) as hook:
        pair = FirstThenSecond(WebhookSupervisor(hook.url, SECRET), console)
        answer = await ask_through_console(pair, console, "deny")
    assert answer == Answer("deny", "the operator looked", "console")


async def test_an_abstaining_webhook_then_no_click_before_the_deadline_is_a_deny() -> None:
    console = ConsoleSupervisor()
    async with serve_supervisor(signed({"decision": "ask"})) as hook:
        pair = FirstThenSecond(WebhookSupervisor(hook.url, SECRET), console)
        answer = await pair.ask(question(deadline=time.time() + 1.0))
    assert answer == Answer("deny", "no operator decided before the deadline", "console")
    assert console.recent()[0]["how"] == "expired"


async def test_the_metrics_count_each_supervisors_answers_and_latency(tmp_path: Path) -> None:
    metrics = Metrics()
    async with serve_supervisor(signed({"decision": "allow", "reason": "ok"})) as hook:
        supervisor = supervisor_from(
            settings(
                tmp_path,
                ACP_SUPERVISOR="webhook",
                ACP_SUPERVISOR_URL=hook.url,
                ACP_SUPERVISOR_SECRET=SECRET,
            ),
            metrics=metrics,
        )
        assert supervisor is not None
        assert (await supervisor.ask(question())).verdict == "allow"
    text = metrics.exposition().decode()
    assert 'supervisor_answers_total{supervisor="webhook",verdict="allow"} 1.0' in text
    assert 'supervisor_latency_seconds_count{supervisor="webhook"} 1.0' in text
    assert "supervisor_failures_total{" not in text  # no failure, no sample


async def test_one_log_line_per_answer_names_the_principal_never_the_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="a2a_acp_bridge.decision")
    async with serve_supervisor(signed({"decision": "deny", "reason": "no"})) as hook:
        await WebhookSupervisor(hook.url, SECRET).ask(question(principal="alice"))
    lines = [r for r in caplog.records if r.getMessage() == "supervisor answered"]
    assert len(lines) == 1
    line = lines[0]
    assert (line.principal, line.verdict, line.supervisor) == ("alice", "deny", "webhook")  # type: ignore[attr-defined]
    assert all(SECRET not in str(value) for value in vars(line).values())

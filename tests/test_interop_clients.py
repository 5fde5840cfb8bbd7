"""The A2A clients people use, each installed from its registry in an environment of its own
(scripts/_interop.sh), driving the bridge over real HTTP with no bridge setting.

Each client runs as a subprocess (tests/interop/NAME/driver.*) and prints what it saw as
one JSON object; the assertions are here. The bridge runs with its default card: the 0.3
clients find it through the card's 0.3 fields (served to a card request without
`A2A-Version: 1.0`), the 1.0 clients through its 1.0 interfaces.

- google-adk 2.13 (on a2a-sdk 1.3): `RemoteA2aAgent` in a `Runner`, streaming and blocking,
  two turns in one session against the demo agent: the final response holds the answer
  text and the diff once, and the second turn sees the first turn's file.
- a2a-sdk 0.3, @a2a-js/sdk 1.3 and 0.3, on JSON-RPC and HTTP+JSON: send, get, stream,
  resubscribe and cancel, a question answered by a streamed reply, a push config created
  and read, and the webhook receiving the payloads of the registration's version.
- Strands Agents 1.62 (on a2a-sdk 0.3): `A2AAgent`, streaming and blocking, and a question
  reported as an interrupt.

a2a-sdk 1.3 is the bridge's own SDK: tests/test_a2a_interop.py drives its client in process.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import anyio
import pytest

from tests.support.agents import scripted_agent
from tests.support.server import RunningBridge, make_settings, serve_bridge
from tests.support.webhook import Delivery, Webhook, serve_webhook

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
DRIVERS = ROOT / "tests" / "interop"
ENVS = ROOT / ".interop"
# One driver's whole run: a cold start of its interpreter and SDK, then a dozen turns.
DRIVER_DEADLINE_S = 180.0
# How long the webhook may take to receive a task's last event after the client returned.
WEBHOOK_WAIT_S = 30.0
BINDINGS = ("JSONRPC", "HTTP+JSON")
ANSWER = "Hello from the bridge\n"
SCRIPT = {
    "by_prompt": {
        "hello": [
            {"op": "say", "text": "Hello "},
            {"op": "say", "text": "from the bridge\n"},
            {
                "op": "tool_call",
                "call": {
                    "toolCallId": "w1",
                    "title": "Write greeting.txt",
                    "kind": "edit",
                    "status": "completed",
                    "content": [
                        {
                            "type": "diff",
                            "path": "{CWD}/greeting.txt",
                            "oldText": None,
                            "newText": "hi\n",
                        }
                    ],
                },
            },
        ],
        "long": [{"op": "say", "text": "started\n"}, {"op": "wait_cancel"}],
        "ask": [
            {"op": "say", "text": "let me ask\n"},
            {"op": "ask", "message": "Which colour?"},
            {"op": "say", "text": "thanks\n"},
        ],
    }
}


def python_of(client: str) -> Path:
    """The client's own interpreter; a clear failure (never a skip) when it is missing."""
    python = ENVS / client / "bin" / "python"
    if not (ENVS / client / ".installed-requirements.txt").exists():
        pytest.fail(
            f"the interop client {client} is not installed in {ENVS / client}: run "
            "./scripts/test (it installs tests/interop/*/requirements.txt)",
            pytrace=False,
        )
    return python


def node_driver(client: str) -> list[str]:
    node = shutil.which("node")
    if node is None or not (DRIVERS / client / "node_modules" / "@a2a-js" / "sdk").exists():
        pytest.fail(
            f"the interop client {client} is not installed: run ./scripts/test (it runs "
            f"npm ci in tests/interop/{client}; Node.js 20+ is needed)",
            pytrace=False,
        )
    return [node, str(DRIVERS / client / "driver.mjs")]


async def run_driver(client: str, command: list[str]) -> dict[str, Any]:
    """Run one client's driver in its own directory; what it printed."""
    with anyio.fail_after(DRIVER_DEADLINE_S):
        done = await anyio.run_process(command, check=False, cwd=DRIVERS / client)
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 0, f"the {client} driver failed:\n{stderr[-4000:]}"
    report: dict[str, Any] = json.loads(done.stdout)
    return report


@pytest.fixture
async def bridge(tmp_path: Path) -> AsyncIterator[RunningBridge]:
    settings = make_settings(
        tmp_path,
        {"ACP_AGENT": scripted_agent(tmp_path, SCRIPT), "A2A_PUSH_ALLOW_PRIVATE": "true"},
    )
    async with serve_bridge(settings) as running:
        yield running


@pytest.fixture
async def demo_bridge(tmp_path: Path) -> AsyncIterator[RunningBridge]:
    # A directory of its own: a test may run it beside `bridge`, and a state directory
    # serves one bridge at a time.
    home = tmp_path / "demo"
    home.mkdir()
    async with serve_bridge(make_settings(home)) as running:
        yield running


# --- what a client holds of an artifact, by the two ways of keeping one -------------------


def appended(events: list[dict[str, Any]], artifact_id: str) -> str:
    """The artifact's text as an appending client builds it (append extends, else replace)."""
    text = ""
    for event in events:
        if event["kind"] == "artifact" and event["id"] == artifact_id:
            text = text + event["text"] if event["append"] else event["text"]
    return text


def last_chunk(events: list[dict[str, Any]], artifact_id: str) -> str:
    """The artifact's text as ADK keeps it: only its lastChunk update."""
    kept = [
        e["text"]
        for e in events
        if e["kind"] == "artifact" and e["id"] == artifact_id and e["lastChunk"]
    ]
    assert kept, f"the {artifact_id} artifact was never closed (no lastChunk update)"
    return str(kept[-1])


def assert_whole(events: list[dict[str, Any]], artifact_id: str, expected: str) -> None:
    assert appended(events, artifact_id) == expected
    assert last_chunk(events, artifact_id) == expected


def assert_state(events: list[dict[str, Any]], state: str) -> None:
    assert events[0]["kind"] == "task", events
    assert events[-1] == {"kind": "status", "state": state}


# --- the SDK clients ----------------------------------------------------------------------


def webhook_done(task_ids: dict[str, str], v03: bool) -> Callable[[list[Delivery]], bool]:
    """True once every binding's question task has reached the webhook completed."""

    def completed(delivery: Delivery) -> str | None:
        body = delivery.body
        if v03:
            done = body.get("status", {}).get("state") == "completed"
            return body.get("id") if done else None
        update = body.get("statusUpdate", {})
        done = update.get("status", {}).get("state") == "TASK_STATE_COMPLETED"
        return update.get("taskId") if done else None

    return lambda deliveries: set(task_ids.values()) <= {completed(d) for d in deliveries}


async def check_sdk_client(report: dict[str, Any], hook: Webhook, *, v03: bool) -> None:
    assert set(report) == set(BINDINGS)
    question_tasks = {}
    for binding, seen in report.items():
        assert seen["send"]["state"] == "completed", binding
        assert seen["send"]["answer"] == ANSWER
        assert seen["get"]["state"] == "completed"
        assert seen["get"]["answer"] == ANSWER
        assert "+hi" in seen["get"]["changes"]
        report_of_turn = seen["get"]["report"]
        assert report_of_turn["stopReason"] == "end_turn"
        assert report_of_turn["failedToolCalls"] == 0
        # A stream begins with the task, ends completed, and closes every artifact whole.
        streamed = seen["stream"]["events"]
        assert_state(streamed, "completed")
        assert_whole(streamed, "answer", ANSWER)
        assert "+hi" in last_chunk(streamed, "changes")
        # Resubscribed and cancelled.
        assert seen["cancel"]["state"] == "canceled"
        assert_state(seen["cancel"]["resubscribed"]["events"], "canceled")
        # The question: the task waits, the reply streams the rest from the task on.
        asked = seen["question"]["asked"]
        assert asked["state"] == "input-required"
        assert asked["answer"] == "let me ask\n"
        answered = seen["question"]["answered"]["events"]
        assert_state(answered, "completed")
        whole = last_chunk(answered, "answer")
        assert whole.startswith("let me ask\n")
        assert '"answer": "blue"' in whole
        assert whole.endswith("thanks\n")
        assert unquote(seen["question"]["push_url"]) == f"{hook.url}?c={binding}"
        question_tasks[binding] = asked["task_id"]
    deliveries = await hook.wait_until(webhook_done(question_tasks, v03), WEBHOOK_WAIT_S)
    for binding, task_id in question_tasks.items():
        mine = [d for d in deliveries if task_of(d.body) == task_id]
        assert mine, binding
        media = "application/json" if v03 else "application/a2a+json"
        assert all(d.headers["content-type"] == media for d in mine)
        if v03:
            # A 0.3 registration receives the 0.3 Task, never a StreamResponse.
            assert all(d.body["kind"] == "task" for d in mine)
            final = mine[-1].body
            answer = next(a for a in final["artifacts"] if a["artifactId"] == "answer")
            assert "".join(p["text"] for p in answer["parts"]).endswith("thanks\n")
        else:
            assert all(d.body.keys() & {"task", "statusUpdate", "artifactUpdate"} for d in mine)
            assert not any("kind" in d.body for d in mine)


def task_of(body: dict[str, Any]) -> str | None:
    if body.get("kind") == "task":
        return str(body["id"])
    for key in ("statusUpdate", "artifactUpdate"):
        if key in body:
            return str(body[key]["taskId"])
    return str(body["task"]["id"]) if "task" in body else None


async def test_the_a2a_sdk_0_3_client_discovers_and_uses_the_bridge_on_both_bindings(
    bridge: RunningBridge,
) -> None:
    python = python_of("sdk03")
    async with serve_webhook() as hook:
        report = await run_driver(
            "sdk03", [str(python), str(DRIVERS / "sdk03" / "driver.py"), bridge.url, hook.url]
        )
        await check_sdk_client(report, hook, v03=True)


async def test_the_a2a_js_1_3_client_uses_the_bridge_on_both_bindings(
    bridge: RunningBridge,
) -> None:
    command = node_driver("js13")
    async with serve_webhook() as hook:
        report = await run_driver("js13", [*command, bridge.url, hook.url])
        await check_sdk_client(report, hook, v03=False)


async def test_the_a2a_js_0_3_client_discovers_and_uses_the_bridge_on_both_bindings(
    bridge: RunningBridge,
) -> None:
    command = node_driver("js03")
    async with serve_webhook() as hook:
        report = await run_driver("js03", [*command, bridge.url, hook.url])
        await check_sdk_client(report, hook, v03=True)


# --- the agent frameworks -----------------------------------------------------------------


async def test_google_adk_gets_the_whole_answer_remembers_the_file_and_answers_a_question(
    demo_bridge: RunningBridge, bridge: RunningBridge
) -> None:
    python = python_of("adk")
    report = await run_driver(
        "adk", [str(python), str(DRIVERS / "adk" / "driver.py"), demo_bridge.url, bridge.url]
    )
    for mode in ("streaming", "blocking"):
        write, read = report[mode]
        said = "".join(write["final"])
        # The answer and the diff, each exactly once, and nothing of the turn's report.
        assert said.count("Wrote notes.txt (15 bytes).") == 1, (mode, said)
        assert said.count("+alpha from adk") == 1, (mode, said)
        assert "stopReason" not in said
        assert "failedToolCalls" not in said
        # The second turn, in the same session, reads the file the first one wrote.
        assert "alpha from adk" in "".join(read["final"]), (mode, read)
    assert report["streaming"][0]["partial"] >= 1  # it did stream
    assert report["blocking"][0]["partial"] == 0
    for mode in ("question_streaming", "question_blocking"):
        asked, answered = report[mode]
        # ADK makes the question a long-running call for the user's input...
        assert any("input" in call for call in asked["calls"]), (mode, asked)
        # ...and the next message answers it: the whole answer comes back, the rest once.
        said = "".join(answered["final"])
        assert said.count("thanks\n") == 1, (mode, said)
        assert '"answer": "blue"' in said


async def test_strands_gets_the_whole_answer_streaming_and_not_and_sees_the_question(
    bridge: RunningBridge,
) -> None:
    python = python_of("strands")
    report = await run_driver(
        "strands", [str(python), str(DRIVERS / "strands" / "driver.py"), bridge.url]
    )
    for mode in ("streaming", "blocking"):
        text = report[mode]["text"]
        assert report[mode]["stop_reason"] == "end_turn"
        assert text.count(ANSWER) == 1, (mode, text)
        assert "+hi" in text
        assert "stopReason" not in text
    assert report["question"] == {"text": "Which colour?", "stop_reason": "interrupt"}

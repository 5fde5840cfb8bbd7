"""What an operator sees: /metrics moving as tasks run, /readyz, and the JSON log lines."""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from a2a_acp_bridge.metrics import Metrics
from tests.support.agents import scripted_agent
from tests.support.server import make_settings, serve_bridge
from tests.support.wire import A2A_HEADERS, rpc, send, user_message

pytestmark = pytest.mark.anyio

# Bound on a server subprocess starting or stopping.
SERVER_S = 30.0
SECRET = "PAYLOAD-" + "7f3a9c" * 4


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text; 0 when the series does not exist yet."""
    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == name and all(found.labels.get(k) == v for k, v in labels.items()):
                return float(found.value)
    return 0.0


async def scrape(client: httpx.AsyncClient, url: str) -> str:
    response = await client.get(url + "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return response.text


P = "a2a_acp_bridge_"


async def test_metrics_move_as_tasks_run_and_permissions_are_decided(tmp_path: Path) -> None:
    async with serve_bridge(make_settings(tmp_path)) as bridge, httpx.AsyncClient() as client:
        before = await scrape(client, bridge.url)
        first = await send(client, bridge.rpc_url, "write a.txt: in\nwrite ../escape.txt: out")
        after_one = await scrape(client, bridge.url)
        await send(client, bridge.rpc_url, "read a.txt", context_id=first["contextId"])
        after_two = await scrape(client, bridge.url)
    assert first["status"]["state"] == "TASK_STATE_COMPLETED"
    assert sample(before, P + "tasks_total", state="completed") == 0
    assert sample(before, P + "adapters_live", role="conversation") == 0
    assert sample(after_one, P + "tasks_total", state="completed") == 1
    assert sample(after_one, P + "task_duration_seconds_count", state="completed") == 1
    assert sample(after_one, P + "task_first_event_seconds_count") == 1
    assert sample(after_one, P + "adapter_starts_total", outcome="ok") == 1
    assert sample(after_one, P + "adapters_live", role="conversation") == 1
    assert sample(after_one, P + "tasks_in_progress", phase="running") == 0
    allowed = {"verdict": "allow", "rule": "change-inside-root"}
    denied = {"verdict": "deny", "rule": "change-outside-root"}
    assert sample(after_one, P + "permission_decisions_total", **allowed) == 1
    assert sample(after_one, P + "permission_decisions_total", **denied) == 1
    assert sample(after_two, P + "tasks_total", state="completed") == 2
    assert sample(after_two, P + "task_first_event_seconds_count") == 2
    assert sample(after_two, P + "adapter_starts_total", outcome="ok") == 1
    assert (
        sample(after_two, P + "permission_decisions_total", verdict="allow", rule="read-only-kind")
        == 1
    )


async def test_a_crashing_adapter_is_counted_and_its_task_counted_failed(tmp_path: Path) -> None:
    agent = scripted_agent(tmp_path, {"turns": [[{"op": "crash", "code": 7}]]})
    settings = make_settings(tmp_path, {"ACP_AGENT": agent})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        task = await send(client, bridge.rpc_url, "go")
        text = await scrape(client, bridge.url)
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert sample(text, P + "adapter_crashes_total") == 1
    assert sample(text, P + "tasks_total", state="failed") == 1
    assert sample(text, P + "adapters_live", role="conversation") == 0


# Bound on the wait for the bridge to notice an idle adapter's death (it polls every 50 ms).
DEATH_NOTICED_S = 10.0


async def test_an_idle_adapter_that_dies_stops_counting_at_once_not_at_the_next_message(
    tmp_path: Path,
) -> None:
    script = {
        "turns": [
            [
                {"op": "say", "text": "done"},
                {"op": "after", "delay": 0.2, "steps": [{"op": "crash", "code": 6}]},
            ]
        ]
    }
    agent = scripted_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        task = await send(client, bridge.rpc_url, "go")
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        # No message follows: only the adapter's death can bring the count down.
        text = await scrape(client, bridge.url)
        live = sample(text, P + "adapters_live", role="conversation")
        with anyio.move_on_after(DEATH_NOTICED_S):
            while live:
                await anyio.sleep(0.05)
                text = await scrape(client, bridge.url)
                live = sample(text, P + "adapters_live", role="conversation")
        ready = (await client.get(bridge.url + "/readyz")).json()
    assert live == 0
    assert sample(text, P + "adapter_crashes_total") == 1
    assert ready["checks"]["capacity"]["live"] == 0


async def test_refusals_at_the_door_are_counted_by_reason(tmp_path: Path) -> None:
    token = "observability-token-0123456789"
    settings = make_settings(tmp_path, {"A2A_TOKEN": token})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        await client.post(bridge.rpc_url, json={}, headers=A2A_HEADERS)
        await client.get(bridge.url + "/healthz", headers={"Host": "evil.example"})
        metrics = await client.get(
            bridge.url + "/metrics", headers={"Authorization": f"Bearer {token}"}
        )
    assert sample(metrics.text, P + "http_refusals_total", reason="unauthorized") == 1
    assert sample(metrics.text, P + "http_refusals_total", reason="host") == 1


def test_each_metrics_object_has_a_registry_of_its_own() -> None:
    one, two = Metrics(), Metrics()
    one.task_finished("completed", 0.5)
    assert sample(one.exposition().decode(), P + "tasks_total", state="completed") == 1
    assert sample(two.exposition().decode(), P + "tasks_total", state="completed") == 0


async def test_readyz_is_ready_with_a_runnable_agent_and_a_missing_one_fails_its_start(
    tmp_path: Path,
) -> None:
    missing = make_settings(tmp_path, {"ACP_AGENT": str(tmp_path / "no-such-agent")})
    async with httpx.AsyncClient() as client:
        async with serve_bridge(make_settings(tmp_path)) as bridge:
            ready = await client.get(bridge.url + "/readyz")
            alive = await client.get(bridge.url + "/healthz")
        async with serve_bridge(missing) as bridge:
            not_ready = await client.get(bridge.url + "/readyz")
            still_alive = await client.get(bridge.url + "/healthz")
            failed = await send(client, bridge.rpc_url, "hello")
            text = await scrape(client, bridge.url)
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"
    assert alive.status_code == 200
    assert not_ready.status_code == 503
    assert not_ready.json()["checks"]["agent"] == {"ok": False}
    assert not_ready.json()["checks"]["capacity"]["ok"] is True
    assert still_alive.status_code == 200
    assert failed["status"]["state"] == "TASK_STATE_FAILED"
    assert sample(text, P + "adapter_starts_total", outcome="failed") == 1
    assert sample(text, P + "adapter_starts_total", outcome="ok") == 0


# --- logs of a real server process -------------------------------------------------------


async def run_logged_server(tmp_path: Path, texts: list[str]) -> tuple[list[dict[str, Any]], str]:
    """Serve with LOG_FORMAT=json in a subprocess, send `texts` in one context, stop it."""
    log = tmp_path / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("A2A_", "ACP_", "LOG_"))}
    env.update(LOG_FORMAT="json", ACP_POOL_SIZE="0", PORT="0")
    with log.open("w") as sink:
        proc = await anyio.open_process(
            [sys.executable, "-m", "a2a_acp_bridge", "serve"],
            cwd=tmp_path,
            env=env,
            stderr=sink,
            stdout=subprocess.DEVNULL,
        )
    try:
        url = None
        with anyio.fail_after(SERVER_S):
            while url is None:
                assert proc.returncode is None, log.read_text()
                for line in log.read_text().splitlines():
                    record = json.loads(line)
                    if record["event"] == "listening":
                        url = record["url"]
                await anyio.sleep(0.05)
        context_id = None
        async with httpx.AsyncClient(timeout=SERVER_S) as client:
            for text in texts:
                task = await send(client, url + "/", text, context_id=context_id)
                context_id = task["contextId"]
    finally:
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(SERVER_S):
            await proc.wait()
    raw = log.read_text()
    return [json.loads(line) for line in raw.splitlines()], raw


async def test_the_json_log_has_one_line_per_lifecycle_edge_with_the_ids(tmp_path: Path) -> None:
    records, raw = await run_logged_server(
        tmp_path, [f"write a.txt: {SECRET}\nwrite ../escape.txt: {SECRET}", "read a.txt"]
    )

    def events(name: str) -> list[dict[str, Any]]:
        return [r for r in records if r["event"] == name]

    started, finished = events("task started"), events("task finished")
    assert len(started) == 2
    assert len(finished) == 2
    task_ids = [r["task_id"] for r in started]
    context_id = started[0]["context_id"]
    assert [r["task_id"] for r in finished] == task_ids
    assert all(r["context_id"] == context_id for r in started + finished)
    assert [r["state"] for r in finished] == ["completed", "completed"]
    assert all(isinstance(r["duration_s"], float) for r in finished)
    session_id = finished[0]["session_id"]
    assert session_id

    (spawned,) = events("adapter spawned")
    assert spawned["context_id"] == context_id
    assert spawned["task_id"] == task_ids[0]
    (opened,) = events("session opened")
    assert opened["session_id"] == session_id
    assert opened["mode"] == "default"
    (exited,) = events("adapter exited")
    assert exited["pid"] == spawned["pid"]
    assert isinstance(exited["code"], int)
    assert exited["expected"] is True
    assert exited["session_id"] == session_id
    assert exited["context_id"] == context_id

    decisions = events("permission decided")
    assert [(d["verdict"], d["rule"]) for d in decisions] == [
        ("allow", "change-inside-root"),
        ("deny", "change-outside-root"),
        ("allow", "read-only-kind"),
    ]
    for decision, task_id in zip(decisions, [task_ids[0], task_ids[0], task_ids[1]], strict=True):
        assert decision["task_id"] == task_id
        assert decision["context_id"] == context_id
        assert decision["session_id"] == session_id
        assert decision["reason"]
        offered = {o["optionId"] for o in decision["offered"]}
        assert offered == {"allow-once", "allow-with-updates", "reject"}
        assert decision["chosen"] in offered
    assert [d["chosen"] for d in decisions] == ["allow-once", "reject", "allow-once"]
    # The caller's words never reach the log above DEBUG.
    assert SECRET not in raw
    assert all(r["level"] in ("info", "warning") for r in records)


async def test_at_debug_the_prompt_is_logged_with_files_by_size_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blob = base64.b64encode(b"\x00binary-content-" * 64).decode()
    message = user_message(f"read a.txt {SECRET}")
    message["parts"].append({"raw": blob, "filename": "blob.bin", "mediaType": "application/x"})
    caplog.set_level(logging.DEBUG, logger="a2a_acp_bridge.a2a.executor")
    async with serve_bridge(make_settings(tmp_path)) as bridge, httpx.AsyncClient() as client:
        reply = await rpc(client, bridge.rpc_url, "SendMessage", {"message": message})
    assert "result" in reply, reply
    (record,) = [r for r in caplog.records if r.getMessage() == "task prompt"]
    assert record.levelno == logging.DEBUG
    assert vars(record)["prompt"] == [
        f"read a.txt {SECRET}",
        "<file blob.bin application/x, 1024 bytes>",
    ]

"""The fuzz of the A2A surface: hostile bodies for every operation, both versions, both
bindings, against the real server over HTTP.

Every answer must be a protocol error the bridge wrote (never a 5xx, never Python's
exception text, never a stream cut without an error), within a deadline; the server must
still serve a normal request afterwards, and the client's mistakes must reach the log as
one line each, without a traceback. The count is bounded and derandomized (the same
examples on every run); `bench/fuzz.py` runs many more with a random seed.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import httpx
import pytest
from hypothesis import HealthCheck, given, settings

from tests.support.agents import scripted_agent
from tests.support.fuzz import V10, Probe, deliver, judge, probes
from tests.support.server import RunningBridge, make_settings, serve_bridge
from tests.support.wire import send

SCRIPT = {"turns": [[{"op": "say", "text": "fuzzed"}]]}
# Small enough that the file runs in well under half a minute on a shared machine.
EXAMPLES = 150
# The seeded task every probe about a task names.
TASK_ID_HOLDER: dict[str, str] = {}


class Records(logging.Handler):
    """Every log record, from any thread (the server runs in the portal's)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self.guard:
            self.records.append(record)


@dataclass
class Fuzzed:
    portal: anyio.from_thread.BlockingPortal
    running: RunningBridge
    client: httpx.AsyncClient
    task_id: str
    log: Records

    def deliver(self, probe: Probe) -> tuple[int, bytes, bool]:
        answer = self.portal.call(deliver, self.client, self.running.url, probe)
        return answer.status, answer.body, answer.stream_cut


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    tmp_path: Path = tmp_path_factory.mktemp("fuzz")
    env = {"ACP_AGENT": scripted_agent(tmp_path, SCRIPT), "ACP_MAX_SESSIONS": "4"}
    log = Records()
    root = logging.getLogger()
    root.addHandler(log)
    try:
        with (
            anyio.from_thread.start_blocking_portal() as portal,
            portal.wrap_async_context_manager(
                serve_bridge(make_settings(tmp_path, env))
            ) as running,
        ):
            client = portal.call(_client)
            try:
                task: dict[str, Any] = portal.call(send, client, running.rpc_url, "seed")
                yield Fuzzed(portal, running, client, str(task["id"]), log)
            finally:
                portal.call(client.aclose)
    finally:
        root.removeHandler(log)


async def _client() -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=httpx.Timeout(20.0))


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=probes("TASKID"))
def test_no_hostile_request_gets_a_5xx_or_exception_text(fuzzed: Fuzzed, data: Probe) -> None:
    probe = _for_task(data, fuzzed.task_id)
    status, body, cut = fuzzed.deliver(probe)
    fault = judge(probe, status, body, stream_cut=cut)
    assert fault is None, f"{probe}: {fault}"


def _for_task(probe: Probe, task_id: str) -> Probe:
    return Probe(
        probe.operation,
        probe.mutation,
        probe.method,
        probe.path.replace("TASKID", task_id),
        probe.headers,
        probe.body.replace(b"TASKID", task_id.encode()),
        probe.streams,
    )


def test_the_client_s_mistakes_are_logged_in_one_line_without_a_traceback(
    fuzzed: Fuzzed,
) -> None:
    with fuzzed.log.guard:
        records = list(fuzzed.log.records)
    assert records, "the fuzz logged nothing at all: its requests did not reach the bridge"
    with_traceback = [r.getMessage() for r in records if r.exc_info or r.exc_text]
    errors = [f"{r.name}: {r.getMessage()}" for r in records if r.levelno >= logging.ERROR]
    assert with_traceback == []
    assert errors == []


def test_the_server_still_serves_a_normal_request_after_the_fuzz(fuzzed: Fuzzed) -> None:
    task: dict[str, Any] = fuzzed.portal.call(
        send, fuzzed.client, fuzzed.running.rpc_url, f"after {uuid.uuid4().hex}"
    )
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"


# Requests the larger run (bench/fuzz.py) found answered wrongly, kept as they were sent.
FOUND = [
    ("rpc-03-history-length", "POST", "/", {}, b'"historyLength": ' + b"1" + b"0" * 30),
    ("rpc-10-params-null", "POST", "/", V10, b'"params": null'),
    ("rest-10-stream-not-utf8", "POST", "/rest/message:stream", V10, b'{"message": "\xff"}'),
    ("rest-03-send-deep", "POST", "/rest/v1/message:send", {}, b'{"message": ' + b"[" * 5000),
    ("rest-03-send-empty", "POST", "/rest/v1/message:send", {}, b""),
    (
        "rest-10-push-url-number",
        "POST",
        "/rest/tasks/TASKID/pushNotificationConfigs",
        V10,
        b'{"url": 1e5}',
    ),
]


@pytest.mark.parametrize(
    ("name", "method", "path", "headers", "body"), FOUND, ids=[f[0] for f in FOUND]
)
def test_what_the_larger_fuzz_found_stays_fixed(
    fuzzed: Fuzzed, name: str, method: str, path: str, headers: dict[str, str], body: bytes
) -> None:
    if path == "/":
        rpc = "tasks/get" if "03" in name else "GetTask"
        inner = (
            body if body.startswith(b'"params"') else b'"params": {"id": "TASKID", ' + body + b"}"
        )
        body = b'{"jsonrpc": "2.0", "id": 1, "method": "' + rpc.encode() + b'", ' + inner + b"}"
    probe = _for_task(
        Probe(name, "found", method, path, {"Content-Type": "application/json", **headers}, body),
        fuzzed.task_id,
    )
    status, answer, cut = fuzzed.deliver(probe)
    assert judge(probe, status, answer, stream_cut=cut) is None, answer
    assert 400 <= status < 500 or b'"error"' in answer

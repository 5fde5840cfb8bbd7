"""The HTTP door against a hostile caller, over real HTTP (uvicorn on 127.0.0.1, port 0).

- the body limit counts the bytes that arrive, whatever Content-Length and
  Transfer-Encoding claim (written on a raw socket, as a smuggling client would);
- a message has at most A2A_MAX_PARTS parts, refused before the SDK parses it;
- a websocket is refused, whatever path it names;
- a state-changing HTTP+JSON request must be declared JSON: a cross-site form or fetch
  cannot cancel a task.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import AgentCard, Message, Part, Role, SendMessageRequest
from a2a.utils.errors import InvalidParamsError

from a2a_acp_bridge.a2a.executor import BridgeExecutor
from a2a_acp_bridge.a2a.gate import Gate
from a2a_acp_bridge.a2a.handler import BridgeRequestHandler
from a2a_acp_bridge.a2a.store import TaskStore
from a2a_acp_bridge.bridge import Bridge
from tests.support.agents import scripted_agent
from tests.support.server import RunningBridge, make_settings, serve_bridge
from tests.support.tasks import start_stream
from tests.support.wire import REST_HEADERS, rpc, user_message

pytestmark = pytest.mark.anyio

LIMIT = 102_400
# Bound on one raw exchange with the server.
RAW_EXCHANGE_S = 30.0


async def raw_exchange(bridge: RunningBridge, request: bytes) -> bytes:
    """Write `request` as it is on a new connection; everything the server answers."""
    port = int(bridge.url.rsplit(":", 1)[1])
    received = b""
    with anyio.fail_after(RAW_EXCHANGE_S):
        async with await anyio.connect_tcp("127.0.0.1", port) as connection:
            await connection.send(request)
            try:
                while True:
                    received += await connection.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
                pass
    return received


def send_body(text: str, parts: int = 1) -> bytes:
    message = user_message(text)
    message["parts"] = [{"text": text} for _ in range(parts)]
    body = {"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": message}}
    return json.dumps(body).encode()


def http_request(body: bytes, *headers: str) -> bytes:
    head = [
        "POST / HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        "A2A-Version: 1.0",
        "Connection: close",
        *headers,
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def chunked(body: bytes, size: int = 16_384) -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


async def task_count(client: httpx.AsyncClient, bridge: RunningBridge) -> int:
    reply = await rpc(client, bridge.rpc_url, "ListTasks", {})
    return len(reply["result"].get("tasks", []))


# --- the body limit --------------------------------------------------------------------


@pytest.mark.parametrize(
    "claim",
    [
        pytest.param(("Content-Length: 10", "Transfer-Encoding: chunked"), id="a-short-length"),
        pytest.param(
            (f"Content-Length: {LIMIT}", "Transfer-Encoding: chunked"), id="the-limit-as-length"
        ),
        pytest.param(("Transfer-Encoding: chunked",), id="no-length"),
        pytest.param(("Content-Length: 0", "Transfer-Encoding: chunked"), id="a-zero-length"),
    ],
)
async def test_a_body_over_the_limit_is_refused_whatever_its_headers_claim(
    tmp_path: Path, claim: tuple[str, ...]
) -> None:
    """Content-Length: 10 beside a chunked body used to carry 200 KB through a 100 KB limit."""
    settings = make_settings(tmp_path, {"A2A_MAX_BODY_BYTES": str(LIMIT)})
    body = send_body("think " + "x" * 200_000)
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        response = await raw_exchange(bridge, http_request(chunked(body), *claim))
        assert await task_count(client, bridge) == 0
    assert status_of(response) == 413
    assert b"A2A_MAX_BODY_BYTES" in response


async def test_a_chunked_body_under_the_limit_is_read_whole_and_runs(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, {"A2A_MAX_BODY_BYTES": str(LIMIT)})
    body = send_body("think " + "x" * 50_000)
    async with serve_bridge(settings) as bridge:
        response = await raw_exchange(
            bridge, http_request(chunked(body, 1000), "Transfer-Encoding: chunked")
        )
    assert status_of(response) == 200
    answer = json.loads(response.split(b"\r\n\r\n", 1)[1])
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_content_length_above_the_limit_is_refused_before_the_body_is_read(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, {"A2A_MAX_BODY_BYTES": str(LIMIT)})
    async with serve_bridge(settings) as bridge:
        response = await raw_exchange(bridge, http_request(b"{", f"Content-Length: {LIMIT + 1}"))
    assert status_of(response) == 413


# --- parts ------------------------------------------------------------------------------


async def test_a_message_with_more_parts_than_a2a_max_parts_is_refused_on_every_binding(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, {"A2A_MAX_PARTS": "3"})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        over = json.loads(send_body("think a", parts=4))
        json_rpc = await client.post(bridge.rpc_url, json=over, headers={"A2A-Version": "1.0"})
        legacy = await client.post(bridge.rpc_url, json={**over, "method": "message/send"})
        rest = await client.post(
            bridge.url + "/rest/message:send",
            json={"message": over["params"]["message"]},
            headers=REST_HEADERS,
        )
        streamed = await client.post(
            bridge.rpc_url,
            json={**over, "method": "SendStreamingMessage"},
            headers={"A2A-Version": "1.0"},
        )
        within = await client.post(
            bridge.rpc_url,
            json=json.loads(send_body("think a", parts=3)),
            headers={"A2A-Version": "1.0"},
        )
        tasks = await task_count(client, bridge)
    for reply in (json_rpc.json(), legacy.json(), streamed.json()):
        assert reply["error"]["code"] == -32602
        assert (
            "the message has 4 parts; at most 3 are accepted (A2A_MAX_PARTS)"
            in (reply["error"]["message"])
        )
    assert reply["id"] == 7
    assert rest.status_code == 400
    assert rest.json()["error"]["details"][0]["reason"] == "INVALID_PARAMS"
    assert within.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert tasks == 1


async def test_the_default_parts_limit_refuses_a_flood_at_once(tmp_path: Path) -> None:
    """200,000 tiny parts used to hold the event loop for seconds; now they are counted."""
    settings = make_settings(tmp_path)
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        flood = await client.post(
            bridge.rpc_url,
            content=send_body("a", parts=200_000),
            headers={"A2A-Version": "1.0", "Content-Type": "application/json"},
        )
        alive = await client.get(bridge.url + "/healthz")
    assert "at most 1000 are accepted" in flood.json()["error"]["message"]
    assert alive.status_code == 200


# --- websockets -------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/rest/message:stream", "/healthz"])
async def test_a_websocket_is_refused_at_the_door(tmp_path: Path, path: str) -> None:
    settings = make_settings(tmp_path)
    handshake = "\r\n".join(
        [
            f"GET {path} HTTP/1.1",
            "Host: 127.0.0.1",
            "Upgrade: websocket",
            "Connection: Upgrade",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Version: 13",
            "",
            "",
        ]
    ).encode()
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        response = await raw_exchange(bridge, handshake)
        metrics = (await client.get(bridge.url + "/metrics")).text
    assert status_of(response) == 403
    # Refused at the door (counted there), not merely left without a route.
    assert 'a2a_acp_bridge_http_refusals_total{reason="websocket"} 1.0' in metrics


async def test_the_parts_limit_holds_before_the_sdk_and_again_in_the_handler(
    tmp_path: Path,
) -> None:
    """The gate refuses before any parsing; the handler refuses again for any other way in."""
    reached: list[str] = []

    async def sdk(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])

    gate = Gate(sdk, rpc_path="/", max_parts=2)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": send_body("a", parts=3), "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/",
        "headers": [(b"content-type", b"application/json")],
        "query_string": b"",
    }
    await gate(scope, receive, send)
    assert reached == []
    assert json.loads(sent[1]["body"])["error"]["code"] == -32602

    bridge = Bridge(make_settings(tmp_path, {"A2A_MAX_PARTS": "2"}))
    handler = BridgeRequestHandler(
        bridge=bridge,
        agent_executor=BridgeExecutor(bridge),
        task_store=TaskStore(),
        agent_card=AgentCard(),
    )
    message = Message(message_id="m", role=Role.ROLE_USER, parts=[Part(text="a")] * 3)
    with pytest.raises(InvalidParamsError, match="A2A_MAX_PARTS"):
        handler.check_input(SendMessageRequest(message=message), ServerCallContext())


# --- state changes need a JSON content type ----------------------------------------------


async def test_a_cross_site_form_or_fetch_cannot_cancel_a_task(tmp_path: Path) -> None:
    script = {"turns": [[{"op": "wait_cancel"}]]}
    settings = make_settings(tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script)})
    async with (
        serve_bridge(settings) as bridge,
        httpx.AsyncClient() as client,
        anyio.create_task_group() as group,
    ):
        task = start_stream(group, client, bridge.rpc_url, "wait")
        await task.wait_state("TASK_STATE_WORKING")
        url = f"{bridge.url}/rest/tasks/{task.task_id}:cancel"
        attempts: list[dict[str, Any]] = [
            {"headers": {"Content-Type": "application/x-www-form-urlencoded"}},
            {"headers": {"Content-Type": "text/plain"}, "content": b"{}"},
            {"headers": {"Content-Type": "multipart/form-data; boundary=x"}},
            {"headers": {"Origin": "https://evil.example"}},
            {"headers": {"Sec-Fetch-Site": "cross-site"}},
        ]
        refused = [(await client.post(url, **attempt)).status_code for attempt in attempts]
        still = await rpc(client, bridge.rpc_url, "GetTask", {"id": task.task_id})
        cancelled = await client.post(url, headers=REST_HEADERS, content=b"{}")
        await task.wait_end()
    assert refused == [415] * len(attempts)
    assert still["result"]["status"]["state"] == "TASK_STATE_WORKING"
    assert cancelled.status_code == 200
    assert task.final_state == "TASK_STATE_CANCELED"


async def test_a_client_that_posts_without_a_type_or_a_body_still_cancels(
    tmp_path: Path,
) -> None:
    """The SDK's own A2A 0.3 client cancels with no Content-Type and no body."""
    script = {"turns": [[{"op": "wait_cancel"}]]}
    settings = make_settings(tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script)})
    async with (
        serve_bridge(settings) as bridge,
        httpx.AsyncClient() as client,
        anyio.create_task_group() as group,
    ):
        task = start_stream(group, client, bridge.rpc_url, "wait")
        await task.wait_state("TASK_STATE_WORKING")
        reply = await client.post(f"{bridge.url}/rest/v1/tasks/{task.task_id}:cancel")
        await task.wait_end()
    assert reply.status_code == 200
    assert task.final_state == "TASK_STATE_CANCELED"

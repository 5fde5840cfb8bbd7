"""The edges of the A2A surface: versions, media types, body limit, the card, failures."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types.a2a_pb2 import AgentCard
from google.protobuf.json_format import ParseDict, ParseError

from a2a_acp_bridge.a2a.gate import asked_media_type
from a2a_acp_bridge.a2a.store import TaskStore
from tests.support.agents import scripted_agent
from tests.support.server import RunningBridge, make_settings, serve_bridge
from tests.support.wire import error_code, rest, rpc, send, user_message

pytestmark = pytest.mark.anyio

SCRIPT = {"turns": [[{"op": "say", "text": "hello from the agent"}]]}
BODY_LIMIT = 4096


@pytest.fixture
async def bridge(tmp_path: Path) -> AsyncIterator[RunningBridge]:
    settings = make_settings(
        tmp_path,
        {
            "ACP_AGENT": scripted_agent(tmp_path, SCRIPT),
            "A2A_MAX_BODY_BYTES": str(BODY_LIMIT),
        },
    )
    async with serve_bridge(settings) as running:
        yield running


def _envelope(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": "req-1", "method": method, "params": params}


def _v03_message(text: str) -> dict[str, Any]:
    return {
        "message": {
            "kind": "message",
            "messageId": uuid.uuid4().hex,
            "role": "user",
            "parts": [{"kind": "text", "text": text}],
        }
    }


# --- versions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [({}, -32009), ({"A2A-Version": "2.0"}, -32009), ({"A2A-Version": "0.3"}, -32009)],
    ids=["missing-means-0.3", "unknown", "0.3"],
)
async def test_a_1_0_method_without_version_1_0_is_version_not_supported(
    bridge: RunningBridge, headers: dict[str, str], expected: int
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(
            bridge.rpc_url,
            json=_envelope("GetTask", {"id": "x"}),
            headers={"Content-Type": "application/json", **headers},
        )
        rest_response = await client.get(f"{bridge.url}/rest/tasks/x", headers=headers)
    assert response.json()["error"]["code"] == expected
    assert response.json()["error"]["data"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    assert rest_response.status_code == 400
    assert rest_response.json()["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"


async def test_the_version_may_come_as_a_query_parameter(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(
            bridge.rpc_url + "?A2A-Version=1.0",
            json=_envelope("GetTask", {"id": "x"}),
            headers={"Content-Type": "application/json"},
        )
    assert response.json()["error"]["code"] == -32001


async def test_a_0_3_client_without_the_header_is_served(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(
            bridge.rpc_url,
            json=_envelope("message/send", _v03_message("hi")),
            headers={"Content-Type": "application/json"},
        )
        task = response.json()["result"]
        got = await client.post(
            bridge.rpc_url,
            json=_envelope("tasks/get", {"id": task["id"]}),
            headers={"Content-Type": "application/json"},
        )
    assert task["kind"] == "task"
    assert task["status"]["state"] == "completed"
    assert got.json()["result"]["id"] == task["id"]


async def test_a_0_3_method_sent_as_version_1_0_is_version_not_supported(
    bridge: RunningBridge,
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        reply = await rpc(client, bridge.rpc_url, "message/send", _v03_message("hi"))
    assert error_code(reply) == -32009
    assert "use SendMessage" in reply["error"]["message"]


async def test_0_3_params_that_do_not_validate_are_invalid_params(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(
            bridge.rpc_url,
            json=_envelope("message/send", {"message": {"role": "nobody"}}),
            headers={"Content-Type": "application/json"},
        )
    assert response.json()["error"]["code"] == -32602


# --- media types and body size ------------------------------------------------------------


async def test_a_json_rpc_request_that_is_not_json_is_content_type_not_supported(
    bridge: RunningBridge,
) -> None:
    body = json.dumps(_envelope("GetTask", {"id": "x"}))
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(
            bridge.rpc_url,
            content=body,
            headers={"Content-Type": "text/plain", "A2A-Version": "1.0"},
        )
    reply = response.json()
    assert response.status_code == 200
    assert reply["id"] == "req-1"
    assert reply["error"]["code"] == -32005
    assert reply["error"]["data"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"


async def test_a_rest_body_that_is_not_json_is_refused_with_415(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(
            f"{bridge.url}/rest/message:send",
            content=b"hello",
            headers={"Content-Type": "text/plain", "A2A-Version": "1.0"},
        )
    assert response.status_code == 415
    assert response.json()["error"]["details"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"


async def test_a_rest_client_gets_its_own_json_media_type_back(bridge: RunningBridge) -> None:
    body = {"message": user_message("hi")}
    async with httpx.AsyncClient(timeout=30) as client:
        plain = await client.post(
            f"{bridge.url}/rest/message:send",
            json=body,
            headers={"Content-Type": "application/json", "A2A-Version": "1.0"},
        )
        body["message"]["messageId"] = uuid.uuid4().hex
        a2a = await client.post(
            f"{bridge.url}/rest/message:send",
            json=body,
            headers={"Content-Type": "application/a2a+json", "A2A-Version": "1.0"},
        )
    assert plain.headers["content-type"] == "application/json"
    assert a2a.headers["content-type"].startswith("application/a2a+json")
    assert plain.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


@pytest.mark.parametrize(
    ("content_type", "accept", "expected"),
    [
        (None, "application/json", "application/json"),
        (None, None, "application/a2a+json"),
        (None, "application/a2a+json", "application/a2a+json"),
        ("application/a2a+json", "application/json", "application/json"),
        ("application/json", "application/a2a+json, application/json", "application/a2a+json"),
        ("application/json", "*/*", "application/json"),
    ],
)
def test_the_media_type_asked_for_is_accept_first_then_the_body_s_own(
    content_type: str | None, accept: str | None, expected: str
) -> None:
    encoded = asked_media_type(
        accept.encode() if accept else None, content_type.encode() if content_type else None
    )
    assert (encoded or b"application/a2a+json").decode() == expected


async def test_a_get_that_accepts_plain_json_gets_plain_json(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        task = await send(client, bridge.rpc_url, "hi")
        plain = await client.get(
            f"{bridge.url}/rest/tasks/{task['id']}",
            headers={"Accept": "application/json", "A2A-Version": "1.0"},
        )
        default = await client.get(
            f"{bridge.url}/rest/tasks/{task['id']}", headers={"A2A-Version": "1.0"}
        )
    assert plain.status_code == default.status_code == 200
    assert plain.headers["content-type"] == "application/json"
    assert default.headers["content-type"].startswith("application/a2a+json")


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
async def test_a_body_over_the_limit_is_refused_with_a_clear_error(
    bridge: RunningBridge, declared: bool
) -> None:
    big = json.dumps(_envelope("SendMessage", {"message": user_message("x" * BODY_LIMIT)}))

    async def chunks() -> AsyncIterator[bytes]:
        yield big.encode()

    content: Any = big.encode() if declared else chunks()
    headers = {"Content-Type": "application/json", "A2A-Version": "1.0"}
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(bridge.rpc_url, content=content, headers=headers)
        rest_response = await client.post(
            f"{bridge.url}/rest/message:send", content=big.encode(), headers=headers
        )
        small = await rpc(client, bridge.rpc_url, "GetTask", {"id": "x"})
    assert response.status_code == 413
    assert response.json()["error"] == "body_too_large"
    assert "A2A_MAX_BODY_BYTES" in response.json()["message"]
    assert rest_response.status_code == 413
    assert "A2A_MAX_BODY_BYTES" in rest_response.json()["message"]
    assert error_code(small) == -32001


async def test_a_stream_asked_for_with_a_chunked_body_streams_to_the_end(
    bridge: RunningBridge,
) -> None:
    body = json.dumps(_envelope("SendStreamingMessage", {"message": user_message("hi")}))

    async def chunks() -> AsyncIterator[bytes]:
        yield body.encode()

    headers = {"Content-Type": "application/json", "A2A-Version": "1.0"}
    events = []
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream("POST", bridge.rpc_url, content=chunks(), headers=headers) as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                events.append(json.loads(line.removeprefix("data:")))
    states = [
        e["result"]["statusUpdate"]["status"]["state"]
        for e in events
        if "statusUpdate" in e.get("result", {})
    ]
    assert "task" in events[0]["result"]
    assert states[-1] == "TASK_STATE_COMPLETED"


# --- the card ---------------------------------------------------------------------------


async def test_the_card_is_cacheable_and_revalidates(bridge: RunningBridge) -> None:
    url = f"{bridge.url}/.well-known/agent-card.json"
    async with httpx.AsyncClient(timeout=30) as client:
        first = await client.get(url)
        again = await client.get(url, headers={"If-None-Match": first.headers["etag"]})
    assert first.status_code == 200
    assert "max-age=" in first.headers["cache-control"]
    assert first.headers["etag"]
    assert first.headers["last-modified"].endswith("GMT")
    assert again.status_code == 304


V03_FIELDS = {"url", "preferredTransport", "protocolVersion"}


async def test_a_card_request_stating_a2a_1_0_gets_the_pure_1_0_card(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        by_header = await client.get(
            f"{bridge.url}/.well-known/agent-card.json", headers={"A2A-Version": "1.0"}
        )
        by_query = await client.get(f"{bridge.url}/.well-known/agent-card.json?A2A-Version=1.0")
    for response in (by_header, by_query):
        card = response.json()
        parsed = ParseDict(card, AgentCard())  # unknown (0.3) members would raise
        assert {i.protocol_version for i in parsed.supported_interfaces} == {"1.0"}
        assert {i.protocol_binding for i in parsed.supported_interfaces} == {"JSONRPC", "HTTP+JSON"}
        assert card["capabilities"] == {"streaming": True, "pushNotifications": True}
        assert response.headers["vary"] == "A2A-Version"


async def test_a_card_request_without_a_version_gets_the_0_3_fields_too(
    bridge: RunningBridge,
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        current = (await client.get(f"{bridge.url}/.well-known/agent-card.json")).json()
        legacy = (await client.get(f"{bridge.url}/.well-known/agent.json")).json()
    for card in (current, legacy):
        assert card.keys() >= V03_FIELDS
        assert card["url"] == f"{bridge.url}/"
        assert card["preferredTransport"] == "JSONRPC"
        versions = {
            (i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]
        }
        assert versions == {
            ("JSONRPC", "1.0"),
            ("HTTP+JSON", "1.0"),
            ("JSONRPC", "0.3"),
            ("HTTP+JSON", "0.3"),
        }
        # The 1.0 interfaces come first, so a 1.0 client picks them.
        assert card["supportedInterfaces"][0]["protocolVersion"] == "1.0"


@pytest.mark.parametrize(("setting", "v03_without_header"), [("true", True), ("false", False)])
async def test_a2a_card_v03_decides_for_every_card_request(
    tmp_path: Path, setting: str, v03_without_header: bool
) -> None:
    settings = make_settings(
        tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, SCRIPT), "A2A_CARD_V03": setting}
    )
    async with serve_bridge(settings) as running, httpx.AsyncClient(timeout=30) as client:
        plain = (await client.get(f"{running.url}/.well-known/agent-card.json")).json()
        stated = (
            await client.get(
                f"{running.url}/.well-known/agent-card.json", headers={"A2A-Version": "1.0"}
            )
        ).json()
        legacy = (await client.get(f"{running.url}/.well-known/agent.json")).json()
    assert (plain.keys() >= V03_FIELDS) is v03_without_header
    assert (stated.keys() >= V03_FIELDS) is v03_without_header
    assert legacy.keys() >= V03_FIELDS
    if not v03_without_header:
        ParseDict(plain, AgentCard())
    else:
        with pytest.raises(ParseError):
            ParseDict(plain, AgentCard())


# --- failures -----------------------------------------------------------------------------


async def test_an_unexpected_failure_is_a_plain_internal_error(
    bridge: RunningBridge, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(self: TaskStore, task_id: str, context: Any) -> None:
        raise RuntimeError("secret detail of the failure")

    monkeypatch.setattr(TaskStore, "get", broken)
    async with httpx.AsyncClient(timeout=30) as client:
        reply = await rpc(client, bridge.rpc_url, "GetTask", {"id": "x"})
        rest_response = await rest(client, bridge.url, "GET", "/tasks/x")
    for text in (json.dumps(reply), rest_response.text):
        assert "secret detail" not in text
        assert "Traceback" not in text
    assert error_code(reply) == -32603
    assert rest_response.status_code == 500


async def test_malformed_requests_get_json_rpc_errors(bridge: RunningBridge) -> None:
    headers = {"Content-Type": "application/json", "A2A-Version": "1.0"}
    async with httpx.AsyncClient(timeout=30) as client:
        broken = await client.post(bridge.rpc_url, content=b"{not json", headers=headers)
        unknown = await rpc(client, bridge.rpc_url, "NoSuchMethod", {})
        bad_params = await rpc(client, bridge.rpc_url, "GetTask", {"id": 5})
    assert broken.json()["error"]["code"] == -32700
    assert error_code(unknown) == -32601
    assert error_code(bad_params) == -32602


async def test_the_card_lists_the_media_types_the_agent_accepts_once_it_runs(
    tmp_path: Path,
) -> None:
    script = {"prompt_capabilities": {"image": True}, "turns": [[{"op": "say", "text": "ok"}]]}
    settings = make_settings(tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script)})
    url_path = "/.well-known/agent-card.json"
    async with serve_bridge(settings) as running, httpx.AsyncClient(timeout=30) as client:
        before = (await client.get(running.url + url_path)).json()["defaultInputModes"]
        await rpc(client, running.rpc_url, "SendMessage", {"message": user_message("hi")})
        after = (await client.get(running.url + url_path)).json()["defaultInputModes"]
    assert "application/octet-stream" in before
    assert after == [
        "text/plain",
        "application/json",
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
    ]


@pytest.mark.parametrize(
    "body",
    [
        {"jsonrpc": "2.0", "id": 1},  # no method
        {"jsonrpc": "2.0", "id": {"not": "an id"}, "method": "message/send", "params": {}},
        {"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": 7}},
    ],
    ids=["no-method", "bad-id", "bad-params"],
)
async def test_a_malformed_json_rpc_request_is_an_error_without_a_traceback_in_the_log(
    bridge: RunningBridge, caplog: pytest.LogCaptureFixture, body: dict[str, Any]
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(bridge.rpc_url, json=body, headers={"A2A-Version": "1.0"})
    assert response.status_code == 200
    assert response.json()["error"]["code"] in (-32600, -32602)
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]

"""The fake model servers themselves: the proxy trap counts what it refuses, scripts advance.

The real-adapter tests assert that no outside connection was attempted; these show that
the trap does see one when it happens, so those assertions can fail.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.gemini import FakeGemini
from tests.fakes.openai import FakeOpenAI
from tests.fakes.script import Call, Say, Script, schema_instance
from tests.support.real_adapters import running_fake


@pytest.fixture
def anthropic() -> Iterator[FakeAnthropic]:
    yield from running_fake(FakeAnthropic())


def sse_data(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


def test_an_https_request_through_the_proxy_is_refused_and_counted(
    anthropic: FakeAnthropic,
) -> None:
    with (
        httpx.Client(proxy=anthropic.url) as client,
        pytest.raises(httpx.ProxyError),
    ):
        client.get("https://model-host.invalid/v1/models")
    assert anthropic.outside_attempts() == ["model-host.invalid:443"]


def test_a_plain_http_request_through_the_proxy_is_refused_and_counted(
    anthropic: FakeAnthropic,
) -> None:
    with httpx.Client(proxy=anthropic.url) as client:
        response = client.get("http://model-host.invalid/page")
    assert response.status_code == 403
    assert anthropic.outside_attempts() == ["http://model-host.invalid/page"]


def test_the_anthropic_script_calls_the_tool_then_repeats_what_the_tool_returned(
    anthropic: FakeAnthropic,
) -> None:
    script = anthropic.add(Script([Call("Bash", {"command": "ls"})]))
    tools = [{"name": "Bash", "input_schema": {"type": "object"}}]
    user = {"role": "user", "content": f"go {script.marker}"}
    with httpx.Client(base_url=anthropic.url) as client:
        first = client.post(
            "/v1/messages", json={"messages": [user], "tools": tools, "stream": True}
        )
        events = sse_data(first.text)
        assert events[0]["type"] == "message_start"
        assert events[-1]["type"] == "message_stop"
        [tool] = [e["content_block"] for e in events if e["type"] == "content_block_start"][1:]
        arguments = "".join(
            e["delta"].get("partial_json", "") for e in events if e["type"] == "content_block_delta"
        )
        assert (tool["type"], tool["name"], json.loads(arguments)) == (
            "tool_use",
            "Bash",
            {"command": "ls"},
        )
        assert any(e.get("delta", {}).get("stop_reason") == "tool_use" for e in events)
        history = [
            user,
            {"role": "assistant", "content": [{**tool, "input": {"command": "ls"}}]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool["id"], "content": "a.txt"}],
            },
        ]
        second = client.post("/v1/messages", json={"messages": history, "tools": tools})
    assert second.json()["content"][0]["text"] == "Done. Tool results seen: 'a.txt'"
    assert [seen.step for seen in anthropic.main_requests()] == ["Call", "Say"]


def test_a_request_without_a_known_marker_is_told_so_and_a_side_request_gets_plain_text(
    anthropic: FakeAnthropic,
) -> None:
    tools = [{"name": "Bash", "input_schema": {"type": "object"}}]
    with httpx.Client(base_url=anthropic.url) as client:
        main = client.post(
            "/v1/messages", json={"messages": [{"role": "user", "content": "hi"}], "tools": tools}
        )
        side = client.post("/v1/messages", json={"messages": [{"role": "user", "content": "hi"}]})
    assert "no script for this prompt" in main.json()["content"][0]["text"]
    assert side.json()["content"][0]["text"] == "Offline test"


def test_an_openai_text_call_becomes_a_custom_tool_call_and_a_schema_request_an_instance() -> None:
    for fake in running_fake(FakeOpenAI()):
        script = fake.add(Script([Call("apply_patch", "*** Begin Patch\n*** End Patch\n")]))
        user = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": script.marker}],
        }
        schema = {"type": "object", "properties": {"title": {"type": "string"}}}
        with httpx.Client(base_url=fake.url) as client:
            main = sse_data(client.post("/v1/responses", json={"input": [user]}).text)
            side = sse_data(
                client.post(
                    "/v1/responses",
                    json={
                        "input": [user],
                        "text": {"format": {"type": "json_schema", "schema": schema}},
                    },
                ).text
            )
        done = [e["item"] for e in main if e["type"] == "response.output_item.done"]
        assert [(item["type"], item["name"]) for item in done] == [
            ("custom_tool_call", "apply_patch")
        ]
        assert main[-1]["type"] == "response.completed"
        [message] = [e["item"] for e in side if e["type"] == "response.output_item.done"]
        assert json.loads(message["content"][0]["text"]) == {"title": "Offline test"}


def test_a_gemini_call_becomes_a_function_call_part() -> None:
    for fake in running_fake(FakeGemini()):
        script = fake.add(Script([Call("run_shell_command", {"command": "ls"}), Say("never")]))
        body = {"contents": [{"role": "user", "parts": [{"text": script.marker}]}]}
        with httpx.Client(base_url=fake.url) as client:
            reply = client.post(
                "/v1beta/models/gemini-test:streamGenerateContent", params={"alt": "sse"}, json=body
            )
        [chunk] = sse_data(reply.text)
        parts = chunk["candidates"][0]["content"]["parts"]
        assert parts == [{"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}}]


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        pytest.param(
            {"type": "object", "properties": {"next_speaker": {"enum": ["model", "user"]}}},
            {"next_speaker": "user"},
            id="gemini-next-speaker-hands-back-to-the-user",
        ),
        pytest.param(
            {"type": "object", "properties": {"outcome": {"enum": ["allow", "deny"]}}},
            {"outcome": "deny"},
            id="codex-guardian-denies",
        ),
        pytest.param(
            {"type": ["integer", "null"]},
            0,
            id="nullable-integer",
        ),
    ],
)
def test_a_schema_instance_steers_side_requests_nowhere(schema: Any, expected: Any) -> None:
    assert schema_instance(schema) == expected

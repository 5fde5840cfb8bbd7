"""An ACP agent that acts out the official A2A conformance kit's scenarios.

    python tests/agents/conformance_agent.py

The kit (a2aproject/a2a-tck) picks what the system under test does by the prefix of the
A2A `messageId`. The bridge hands the A2A ids to the agent in the prompt's `_meta.a2a`
(and in `_meta.a2a` of an answer to a question), so this agent reads the prefix there and
answers with ACP only; the bridge turns that into A2A:

    tck-complete-task            says "Hello from TCK"; the turn ends end_turn (COMPLETED)
    tck-artifact-text            says "Generated text content"
    tck-artifact-file            an embedded text resource output.txt (a raw file part)
    tck-artifact-file-url        a resource link to https://example.com/output.txt
    tck-artifact-data            an embedded application/json resource (a data part)
    tck-message-response         says "Direct message response" and asks, in the prompt
                                 response's _meta, to be answered as a message
    tck-input-required           asks a question (elicitation, one string field); an answer
                                 whose messageId again starts tck-input-required asks again,
                                 any other one continues with that prefix's scenario
    tck-reject-task              says "rejected" and ends the turn with stopReason refusal
    tck-stream-artifact-file     as tck-artifact-file
    tck-stream-artifact-chunked  "chunk-1 " then, a moment later, "chunk-2"
    test-resubscribe-message-id  stays working for RESUBSCRIBE_S (2 x TCK_STREAMING_TIMEOUT)
    tck-stream-*, other tck-*    says the scenario's text, or echoes the prompt
    anything else                keeps the task open: asks for more input, as a multi-turn
                                 agent does, until an answer names a tck-* scenario. The 0.3
                                 kit (whose ids do not start tck-) cancels and continues the
                                 tasks a blocking message/send created, which only an open
                                 task allows.

A session/cancel ends the turn `cancelled` at once, a declined question too.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from typing import Any

from a2a_acp_bridge.agent_wire import AgentPeer, method_not_found

# The kit's resubscription scenario stays working for twice its streaming timeout.
RESUBSCRIBE_S = 2 * float(os.environ.get("TCK_STREAMING_TIMEOUT", "2.0"))
CHUNK_GAP_S = 0.3
TEXTS = {
    "tck-complete-task": "Hello from TCK",
    "tck-artifact-text": "Generated text content",
    "tck-message-response": "Direct message response",
    "tck-reject-task": "rejected",
    "tck-stream-001": "Stream hello from TCK",
    "tck-stream-003": "Stream task lifecycle",
    "tck-stream-ordering-001": "Ordered output",
    "tck-stream-artifact-text": "Streamed text content",
}
FILE_RESOURCE = {
    "uri": "file:///tck/output.txt",
    "mimeType": "text/plain",
    "text": "Generated file content",
}
FILE_LINK = {
    "type": "resource_link",
    "uri": "https://example.com/output.txt",
    "name": "output.txt",
    "mimeType": "text/plain",
}
DATA_RESOURCE = {
    "uri": "file:///tck/result.json",
    "mimeType": "application/json",
    "text": json.dumps({"key": "value", "count": 42}),
}
QUESTION_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "description": "Your answer"}},
    "required": ["answer"],
}


EXTRA_SCENARIOS = (
    "tck-artifact-file",
    "tck-artifact-file-url",
    "tck-artifact-data",
    "tck-input-required",
    "tck-stream-artifact-file",
    "tck-stream-artifact-chunked",
    "test-resubscribe-message-id",
)
SCENARIOS = sorted((*TEXTS, *EXTRA_SCENARIOS), key=len, reverse=True)


def scenario(message_id: str) -> str:
    """The scenario named by the longest known prefix of a messageId."""
    found = next((name for name in SCENARIOS if message_id.startswith(name)), None)
    if found is not None:
        return found
    return "default" if message_id.startswith("tck-") else "open"


class ConformanceAgent:
    def __init__(self, peer: AgentPeer) -> None:
        self.peer = peer
        self.cancelled: dict[str, asyncio.Event] = {}

    async def handle(self, method: str, params: dict[str, Any]) -> Any:
        if method == "initialize":
            return {
                "protocolVersion": 1,
                "agentCapabilities": {
                    "loadSession": False,
                    "promptCapabilities": {"embeddedContext": True, "image": True},
                },
                "agentInfo": {"name": "a2a-conformance-agent", "version": "1"},
                "authMethods": [],
                # It answers some prompts with a direct message (the kit's Message replies).
                "_meta": {"a2a": {"directReplies": True}},
            }
        if method == "session/new":
            session_id = str(uuid.uuid4())
            self.cancelled[session_id] = asyncio.Event()
            return {"sessionId": session_id}
        if method == "session/prompt":
            return await self.prompt(params)
        if method == "session/cancel":
            event = self.cancelled.get(str(params.get("sessionId")))
            if event is not None:
                event.set()
            return None
        raise method_not_found(method)

    async def update(self, session_id: str, update: dict[str, Any]) -> None:
        await self.peer.notify("session/update", {"sessionId": session_id, "update": update})

    async def say(self, session_id: str, content: dict[str, Any] | str) -> None:
        if isinstance(content, str):
            content = {"type": "text", "text": content}
        await self.update(session_id, {"sessionUpdate": "agent_message_chunk", "content": content})

    async def prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        session_id = str(params["sessionId"])
        cancelled = self.cancelled.setdefault(session_id, asyncio.Event())
        cancelled.clear()
        meta = (params.get("_meta") or {}).get("a2a") or {}
        text = " ".join(
            str(block.get("text", ""))
            for block in params.get("prompt", [])
            if block.get("type") == "text"
        )
        name = scenario(str(meta.get("messageId", "")))
        end: dict[str, Any] = {"stopReason": "end_turn"}
        while name in ("tck-input-required", "open"):
            answer = await self.ask(session_id, cancelled)
            if answer is None:
                return {"stopReason": "cancelled"}
            name = scenario(str(answer.get("messageId", "")))
            text = str(answer.get("answer", text))
        if name in ("tck-artifact-file", "tck-stream-artifact-file"):
            await self.say(session_id, {"type": "resource", "resource": FILE_RESOURCE})
        elif name == "tck-artifact-file-url":
            await self.say(session_id, FILE_LINK)
        elif name == "tck-artifact-data":
            await self.say(session_id, {"type": "resource", "resource": DATA_RESOURCE})
        elif name == "tck-stream-artifact-chunked":
            await self.say(session_id, "chunk-1 ")
            if await self.wait(cancelled, CHUNK_GAP_S):
                return {"stopReason": "cancelled"}
            await self.say(session_id, "chunk-2")
        elif name == "test-resubscribe-message-id":
            await self.say(session_id, "Working on it.\n")
            if await self.wait(cancelled, RESUBSCRIBE_S):
                return {"stopReason": "cancelled"}
            await self.say(session_id, "Done.")
        elif name in TEXTS:
            await self.say(session_id, TEXTS[name])
            if name == "tck-reject-task":
                end = {"stopReason": "refusal"}
            elif name == "tck-message-response":
                end["_meta"] = {"a2a": {"reply": "message"}}
        else:
            await self.say(session_id, f"echo: {text}")
        if cancelled.is_set():
            return {"stopReason": "cancelled"}
        return end

    async def ask(self, session_id: str, cancelled: asyncio.Event) -> dict[str, Any] | None:
        """Ask for input; the answer's fields plus the A2A messageId, or None if declined."""
        request = asyncio.ensure_future(
            self.peer.request(
                "elicitation/create",
                {
                    "sessionId": session_id,
                    "mode": "form",
                    "message": "Input required by TCK: send a follow-up message to this task.",
                    "requestedSchema": QUESTION_SCHEMA,
                },
            )
        )
        stop = asyncio.ensure_future(cancelled.wait())
        done, _ = await asyncio.wait({request, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if request not in done:
            request.cancel()
            return None
        response = request.result() or {}
        if response.get("action") != "accept":
            return None
        answer = dict(response.get("content") or {})
        answer["messageId"] = ((response.get("_meta") or {}).get("a2a") or {}).get("messageId", "")
        return answer

    async def wait(self, cancelled: asyncio.Event, seconds: float) -> bool:
        """Wait `seconds`; True if a session/cancel came first."""
        try:
            await asyncio.wait_for(cancelled.wait(), timeout=seconds)
        except TimeoutError:
            return False
        return True


async def main() -> None:
    peer = AgentPeer()
    await peer.open()
    await peer.serve(ConformanceAgent(peer).handle)


if __name__ == "__main__":
    asyncio.run(main())

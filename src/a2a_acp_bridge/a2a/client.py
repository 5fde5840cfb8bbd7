"""The small A2A client behind `a2a-acp-bridge send` and `a2a-acp-bridge card`.

Built on the a2a-sdk client: `send` streams the task, printing each progress line as it
arrives and the answer as it streams, then the final state; it exits 0 for a COMPLETED
task, 1 for any other end, 2 when the bridge cannot be reached. What the agent wrote is
printed with its control characters escaped (terminal.py): an answer cannot retitle the
terminal, clear it or hide text in it.
"""

from __future__ import annotations

import json
import sys
import uuid
from typing import TextIO

import httpx
from a2a.client import A2ACardResolver, A2AClientError, ClientConfig, create_client
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, StreamResponse, TaskState
from google.protobuf.json_format import MessageToDict

from a2a_acp_bridge.a2a.input import field_options
from a2a_acp_bridge.a2a.states import INTERRUPTED, TERMINAL
from a2a_acp_bridge.terminal import neutralise

# The CLI waits for long turns: no read timeout on the stream, a bounded connect.
HTTP_TIMEOUT = httpx.Timeout(connect=10.0, read=None, write=30.0, pool=10.0)


def _state_name(state: int) -> str:
    name: str = TaskState.Name(state)
    return name.removeprefix("TASK_STATE_")


def _safe(text: str) -> str:
    """Text from the bridge (the agent's, mostly) as it may reach a terminal."""
    return neutralise(text, keep="\n\t")


def render(
    event: StreamResponse, out: TextIO, answer_open: list[bool], seen: set[str] | None = None
) -> int | None:
    """Print one stream event; return the task state once it is final. `seen`: the
    artifacts printed so far in this stream."""
    seen = set() if seen is None else seen

    def write(text: str) -> None:
        out.write(_safe(text))

    kind = event.WhichOneof("payload")
    if kind == "task":
        write(f"task {event.task.id} (context {event.task.context_id})\n")
        return None
    if kind == "message":
        write("".join(part.text for part in event.message.parts) + "\n")
        return TaskState.TASK_STATE_COMPLETED
    if kind == "artifact_update":
        update = event.artifact_update
        if update.last_chunk and not update.append and update.artifact.artifact_id in seen:
            return None  # the closing update repeats, whole, what was printed as it came
        seen.add(update.artifact.artifact_id)
        for part in update.artifact.parts:
            if part.WhichOneof("content") == "text" and update.artifact.artifact_id == "answer":
                write(part.text)
                answer_open[0] = not part.text.endswith("\n")
        return None
    if kind == "status_update":
        status = event.status_update.status
        text = (
            "".join(part.text for part in status.message.parts)
            if status.HasField("message")
            else ""
        )
        if answer_open[0]:
            write("\n")
            answer_open[0] = False
        if status.state == TaskState.TASK_STATE_WORKING:
            if text:
                write(f"· {text}\n")
            return None
        write(f"[{_state_name(status.state)}]" + (f" {text}" if text else "") + "\n")
        if status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            fields = _form_fields(status.message)
            if fields:
                write(f"  answer with: {fields}\n")
            write(f"  reply with: send --task {event.status_update.task_id} TEXT\n")
        if status.state in TERMINAL or status.state in INTERRUPTED:
            return status.state
    return None


def _form_fields(message: Message) -> str:
    """The fields of a question's form (a JSON Schema in a data part), for one line."""
    for part in message.parts:
        if part.WhichOneof("content") != "data":
            continue
        schema = MessageToDict(part.data)
        properties = schema.get("properties") if isinstance(schema, dict) else None
        if not isinstance(properties, dict):
            continue
        required = set(schema.get("required") or [])
        shown = []
        for name, spec in sorted(properties.items()):
            spec = spec if isinstance(spec, dict) else {}
            options = field_options(spec)
            kind = (
                "one of: " + " | ".join(title for _value, title in options)
                if options
                else str(spec.get("type", "any"))
            )
            shown.append(f"{name} ({kind}" + (", required)" if name in required else ")"))
        return ", ".join(shown)
    return ""


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


async def send_and_print(
    url: str,
    text: str,
    context_id: str | None,
    task_id: str | None,
    token: str | None = None,
    out: TextIO = sys.stdout,
) -> int:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    if context_id:
        message.context_id = context_id
    if task_id:
        message.task_id = task_id
    final: int | None = None
    answer_open = [False]
    seen: set[str] = set()
    try:
        async with httpx.AsyncClient(timeout=HTTP_TIMEOUT, headers=_headers(token)) as http:
            client = await create_client(url, ClientConfig(streaming=True, httpx_client=http))
            async with client:
                async for event in client.send_message(SendMessageRequest(message=message)):
                    state = render(event, out, answer_open, seen)
                    out.flush()
                    if state is not None:
                        final = state
    except (httpx.HTTPError, A2AClientError) as exc:
        print(_safe(f"a2a-acp-bridge: cannot talk to {url}: {exc}"), file=sys.stderr)
        return 2
    return 0 if final == TaskState.TASK_STATE_COMPLETED else 1


async def print_card(url: str, token: str | None = None, out: TextIO = sys.stdout) -> int:
    try:
        async with httpx.AsyncClient(timeout=HTTP_TIMEOUT, headers=_headers(token)) as http:
            card = await A2ACardResolver(http, url).get_agent_card()
    except (httpx.HTTPError, A2AClientError) as exc:
        print(_safe(f"a2a-acp-bridge: cannot fetch the card from {url}: {exc}"), file=sys.stderr)
        return 2
    out.write(json.dumps(MessageToDict(card), indent=2) + "\n")
    return 0

"""A supervisor webhook for tests: a real HTTP server on 127.0.0.1 whose answers a test
scripts, signed with the test's own HMAC code (not the bridge's), and a question maker."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from a2a_acp_bridge.decision import Question

SUPERVISOR_START_S = 10.0
SECRET = "s3cret-" + "k" * 40


def hmac_hex(secret: str, message: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


# What the supervisor does with a request: (status, body, headers) to send back.
Reply = Callable[[Received], Awaitable[tuple[int, bytes, dict[str, str]]]]


def signed(
    answer: Any,
    *,
    secret: str = SECRET,
    stamp: float | None = None,
    question_id: str | None = None,
    status: int = 200,
) -> Reply:
    """Answer `answer` (JSON, or raw bytes) signed as the contract says: over the
    timestamp, the question's id (from the request's X-Bridge-Id unless given) and body."""

    async def reply(request: Received) -> tuple[int, bytes, dict[str, str]]:
        body = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        timestamp = str(int(stamp if stamp is not None else time.time()))
        qid = question_id or request.headers["x-bridge-id"]
        message = timestamp.encode() + b"." + qid.encode() + b"." + body
        return (
            status,
            body,
            {"X-Bridge-Timestamp": timestamp, "X-Bridge-Signature": hmac_hex(secret, message)},
        )

    return reply


@dataclass
class ScriptedSupervisor:
    url: str
    reply: Reply
    received: list[Received] = field(default_factory=list)
    release: anyio.Event = field(default_factory=anyio.Event)


@contextlib.asynccontextmanager
async def serve_supervisor(reply: Reply) -> AsyncIterator[ScriptedSupervisor]:
    hook = ScriptedSupervisor(url="", reply=reply)

    async def receive(request: Request) -> Response:
        got = Received(dict(request.headers), await request.body())
        hook.received.append(got)
        status, body, headers = await hook.reply(got)
        return Response(body, status_code=status, headers=headers, media_type="application/json")

    app = Starlette(routes=[Route("/decide", receive, methods=["POST"])])
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False)
    )
    async with anyio.create_task_group() as group:
        group.start_soon(server.serve)
        with anyio.fail_after(SUPERVISOR_START_S):
            while not server.started:
                if server.should_exit:
                    raise RuntimeError("the supervisor did not start")
                await anyio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        hook.url = f"http://127.0.0.1:{port}/decide"
        try:
            yield hook
        finally:
            hook.release.set()  # a slow reply ends, so the server can stop
            server.should_exit = True


def never_answer(hook_release: Callable[[], anyio.Event]) -> Reply:
    """A supervisor that holds the request until the test ends."""

    async def reply(request: Received) -> tuple[int, bytes, dict[str, str]]:
        await hook_release().wait()
        return 200, b"{}", {}

    return reply


def question(**changes: Any) -> Question:
    """A question as the chain asks it: an execute the policy said `ask` about."""
    now = time.time()
    base = Question(
        id=uuid.uuid4().hex,
        principal="default",
        context_id="ctx-1",
        task_id="task-1",
        session_id="sess-1",
        adapter="claude",
        tool_call_id="toolu_01",
        kind="execute",
        title="git push origin main",
        tool_name="Bash",
        raw_input={"command": "git push origin main", "description": "push"},
        locations=(),
        command="git push origin main",
        diff=None,
        root="/srv/repo",
        owned=False,
        allow_execute=True,
        rule="ask-git-push",
        reason="a push leaves the machine",
        asked_at=now,
        deadline=now + 60.0,
    )
    return replace(base, **changes)

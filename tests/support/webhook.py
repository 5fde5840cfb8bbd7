"""A push-notification webhook for tests: a real HTTP server on 127.0.0.1 that records what
it receives and can refuse the first requests (503) to exercise retries."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

WEBHOOK_START_S = 10.0


@dataclass
class Delivery:
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class Webhook:
    url: str
    deliveries: list[Delivery] = field(default_factory=list)
    refused: int = 0
    arrived: anyio.Event = field(default_factory=anyio.Event)

    def reset_arrival(self) -> None:
        self.arrived = anyio.Event()

    def states(self) -> list[str]:
        found = []
        for delivery in self.deliveries:
            body = delivery.body
            # A 1.0 payload is a StreamResponse; a 0.3 one the task itself (`kind: task`).
            holder = body if body.get("kind") == "task" else body.get("task")
            status = (holder or body.get("statusUpdate") or {}).get("status") or {}
            if "state" in status:
                found.append(str(status["state"]))
        return found

    async def wait_until(
        self, done: Callable[[list[Delivery]], bool], timeout_s: float = 20.0
    ) -> list[Delivery]:
        """Wait until `done` holds for the deliveries so far; all of them."""
        with anyio.fail_after(timeout_s):
            while not done(self.deliveries):
                await self.arrived.wait()
                self.reset_arrival()
        return list(self.deliveries)

    async def wait_for_state(self, state: str, timeout_s: float = 20.0) -> list[Delivery]:
        """Wait until a delivery carries the task in `state`; every delivery so far."""
        with anyio.fail_after(timeout_s):
            while state not in self.states():
                await self.arrived.wait()
                self.reset_arrival()
        return list(self.deliveries)


@contextlib.asynccontextmanager
async def serve_webhook(*, refuse_first: int = 0) -> AsyncIterator[Webhook]:
    hook = Webhook(url="")

    async def receive(request: Request) -> Response:
        if hook.refused < refuse_first:
            hook.refused += 1
            return Response(status_code=503)
        body = json.loads(await request.body())
        hook.deliveries.append(Delivery(dict(request.headers), body))
        hook.arrived.set()
        return Response(status_code=204)

    app = Starlette(routes=[Route("/hook", receive, methods=["POST"])])
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False)
    )
    async with anyio.create_task_group() as group:
        group.start_soon(server.serve)
        with anyio.fail_after(WEBHOOK_START_S):
            while not server.started:
                if server.should_exit:
                    raise RuntimeError("the webhook did not start")
                await anyio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        hook.url = f"http://127.0.0.1:{port}/hook"
        try:
            yield hook
        finally:
            server.should_exit = True

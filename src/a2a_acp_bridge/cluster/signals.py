"""Signals between replicas: PostgreSQL's LISTEN/NOTIFY, so a replica is woken at once.

`Signals.run()` keeps one connection of its own (asyncpg, outside SQLAlchemy's pool: a
listening connection is never handed to a query) listening on the bridge's channels, and
hands each notification's payload (JSON) to the handler registered for its channel, in
order, one at a time. A lost connection is opened again after `RECONNECT_S`; what was
notified meanwhile is lost, so every sender also repeats itself or checks the database
(a2a/remote.py). `send` notifies through the state database's own pool: delivered when its
transaction commits.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import asyncpg
from anyio.streams.memory import MemoryObjectSendStream
from sqlalchemy import make_url, text
from sqlalchemy.exc import SQLAlchemyError

from a2a_acp_bridge.state import PG_CONNECT_S, StateDatabase
from a2a_acp_bridge.state_writer import describe_failure

logger = logging.getLogger(__name__)

RECONNECT_S = 1.0
# A listening connection that says nothing is checked this often (a silent network loss
# sends no termination), and must answer within PG_CONNECT_S.
KEEPALIVE_S = 5.0
# Notifications waiting for their handler at most; beyond, one is dropped (and logged).
BACKLOG = 1000
# NOTIFY's payload limit is 8000 bytes; ours are a few ids.
MAX_PAYLOAD = 7900

Handler = Callable[[dict[str, Any]], Awaitable[None]]


def asyncpg_dsn(url: str) -> str:
    """The SQLAlchemy URL (postgresql+asyncpg://...) as asyncpg's own DSN."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class Signals:
    def __init__(self, database: StateDatabase) -> None:
        assert database.url is not None
        self.database = database
        self._dsn = asyncpg_dsn(database.url)
        self._handlers: dict[str, Handler] = {}
        self.listening = anyio.Event()

    def on(self, channel: str, handler: Handler) -> None:
        self._handlers[channel] = handler

    async def send(self, channel: str, payload: dict[str, Any]) -> bool:
        """Notify every replica listening on `channel`; False when the database refused."""
        body = json.dumps(payload, separators=(",", ":"))
        if len(body) > MAX_PAYLOAD:
            raise ValueError("a notification payload is limited to a few kilobytes")
        try:
            async with self.database.begin() as conn:
                await conn.execute(
                    text("SELECT pg_notify(:channel, :payload)"),
                    {"channel": channel, "payload": body},
                )
        except (SQLAlchemyError, OSError) as exc:
            logger.warning(
                "a notification could not be sent",
                extra={"channel": channel, "problem": describe_failure(exc, "postgresql")},
            )
            return False
        return True

    async def run(self) -> None:
        """Listen until cancelled, connecting again whenever the connection is lost."""
        send, receive = anyio.create_memory_object_stream[tuple[str, str]](BACKLOG)
        async with send, receive, anyio.create_task_group() as group:
            group.start_soon(self._dispatch, receive)
            while True:
                try:
                    await self._listen(send)
                except (
                    OSError,
                    TimeoutError,
                    asyncpg.PostgresError,
                    asyncpg.InterfaceError,
                ) as exc:
                    logger.warning(
                        "the replica signals' connection was lost; connecting again",
                        extra={"problem": describe_failure(exc, "postgresql")},
                    )
                await anyio.sleep(RECONNECT_S)

    async def _listen(self, send: MemoryObjectSendStream[tuple[str, str]]) -> None:
        lost = anyio.Event()

        def received(_conn: object, _pid: int, channel: str, payload: str) -> None:
            try:
                send.send_nowait((channel, payload))
            except anyio.WouldBlock:
                logger.error("a replica signal was dropped: too many waiting", extra={})

        with anyio.fail_after(PG_CONNECT_S):
            conn = await asyncpg.connect(self._dsn)
        try:
            conn.add_termination_listener(lambda _conn: lost.set())
            for channel in self._handlers:
                await conn.add_listener(channel, received)
            self.listening.set()
            while not lost.is_set():
                with anyio.move_on_after(KEEPALIVE_S):
                    await lost.wait()
                if not lost.is_set():
                    with anyio.fail_after(PG_CONNECT_S):
                        await conn.execute("SELECT 1")
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(PG_CONNECT_S):
                await conn.close()

    async def _dispatch(self, receive: Any) -> None:
        async for channel, payload in receive:
            handler = self._handlers.get(channel)
            if handler is None:
                continue
            try:
                message = json.loads(payload)
                if isinstance(message, dict):
                    await handler(message)
            except Exception:
                # One bad signal must not stop the others.
                logger.exception(
                    "a replica signal could not be handled", extra={"channel": channel}
                )

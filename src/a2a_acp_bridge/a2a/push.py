"""Push notifications: delivery of task events to the caller's webhook, and the URL policy.

`PushDelivery` is the SDK's `PushNotificationSender`. The SDK calls it inline for every
task event, so it only serializes the payload and queues it. The payload follows the
protocol version the webhook was registered with (`PushConfigs` remembers it): a 1.0
registration gets the event as a StreamResponse, a 0.3 one (`tasks/pushNotificationConfig/
set`, `/rest/v1/...`, or inline in `message/send`) the task as it is after the event, in
the 0.3 shape, which is what 0.3 receivers parse. One worker per (task, config) posts
the queue in order, so a slow webhook never holds up the task. Delivery is at least
once: a connection error, a timeout, 408, 429 or a 5xx is retried with backoff; any
other answer ends the attempts for that event. Each request carries `Authorization:
<scheme> <credentials>` when the config has `authentication`, and
`X-A2A-Notification-Token` when it has a `token`.

`PushUrlPolicy` is the guard against server-side request forgery. When a config is
created the URL must be http(s) without credentials in it, and a literal address or
`localhost` must be public. When an event is delivered the host is resolved, every
address must be public, and the request goes to the address that was checked (the Host
header and TLS name stay the URL's), so a DNS answer that changes in between cannot
redirect it. Redirects are not followed. `allow_private` (A2A_PUSH_ALLOW_PRIVATE) admits
loopback and private addresses, for webhooks on the same machine or network.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import socket
from collections import deque
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any
from urllib.parse import SplitResult, urlsplit, urlunsplit

import anyio
import httpx
from a2a.compat.v0_3.conversions import to_compat_task
from a2a.server.context import ServerCallContext
from a2a.server.tasks import (
    InMemoryPushNotificationConfigStore,
    PushNotificationConfigStore,
    PushNotificationSender,
)
from a2a.server.tasks.push_notification_sender import PushNotificationEvent
from a2a.types.a2a_pb2 import Task, TaskPushNotificationConfig
from a2a.utils.proto_utils import to_stream_response
from anyio.abc import TaskGroup
from google.protobuf.json_format import MessageToDict

logger = logging.getLogger(__name__)

# One POST, connection included: a webhook is expected to answer at once.
DELIVERY_TIMEOUT_S = 10.0
# Attempts per event and the pause before each retry (doubling from the first, capped):
# about 15 s of retrying covers a webhook restart without holding events for long.
DELIVERY_ATTEMPTS = 5
FIRST_RETRY_S = 0.5
MAX_RETRY_S = 8.0
# At shutdown, how long queued events may still be delivered.
DRAIN_S = 5.0
RETRY_STATUSES = frozenset({408, 425, 429})
MEDIA_TYPE = "application/a2a+json"
# The media type of a 0.3 payload (0.3 had no A2A media type of its own).
MEDIA_TYPE_V03 = "application/json"
# Where the call context records the A2A version of the request (a2a/app.py).
VERSION_STATE = "a2a_version"
V03 = "0.3"


class PushConfigs(InMemoryPushNotificationConfigStore):
    """The SDK's in-memory config store, remembering the protocol version of each
    registration (from the request that made it)."""

    def __init__(self) -> None:
        super().__init__()
        self._v03: set[tuple[str, str]] = set()

    async def set_info(
        self,
        task_id: str,
        notification_config: TaskPushNotificationConfig,
        context: ServerCallContext,
    ) -> TaskPushNotificationConfig:
        stored: TaskPushNotificationConfig = await super().set_info(
            task_id, notification_config, context
        )
        key = (task_id, stored.id)
        if context.state.get(VERSION_STATE) == V03:
            self._v03.add(key)
        else:
            self._v03.discard(key)
        return stored

    def registered_v03(self, task_id: str, config: TaskPushNotificationConfig) -> bool:
        return (task_id, config.id) in self._v03


class PushRefused(Exception):
    """The webhook URL is not allowed (the message says why)."""


def _address_blocked(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    return (
        not address.is_global
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
    )


class PushUrlPolicy:
    """Which webhook URLs the bridge will call."""

    def __init__(self, *, allow_private: bool = False) -> None:
        self.allow_private = allow_private

    def check_url(self, url: str) -> SplitResult:
        """The parsed URL if its form is acceptable; PushRefused otherwise (no DNS)."""
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError for a bad port
        except ValueError:
            raise PushRefused("the webhook URL cannot be parsed") from None
        if parts.scheme not in ("http", "https"):
            raise PushRefused("the webhook URL must be http or https")
        if not parts.hostname:
            raise PushRefused("the webhook URL has no host")
        if parts.username is not None or parts.password is not None:
            raise PushRefused("put webhook credentials in `authentication`, not in the URL")
        host = parts.hostname.rstrip(".").lower()
        if not self.allow_private:
            if host == "localhost" or host.endswith(".localhost"):
                raise PushRefused("the webhook URL points at this machine")
            literal = _literal(host)
            if literal is not None and _address_blocked(literal):
                raise PushRefused("the webhook URL points at a private or reserved address")
        return parts

    async def accepts(self, url: str) -> bool:
        """The SDK's push_url_validator: the form check at config creation."""
        try:
            self.check_url(url)
        except PushRefused as refused:
            logger.warning("push config refused", extra={"reason": str(refused)})
            return False
        return True

    async def addresses(self, parts: SplitResult) -> list[str]:
        """The addresses to deliver to, all of them allowed; PushRefused otherwise."""
        host = parts.hostname or ""
        literal = _literal(host)
        if literal is not None:
            found = [literal]
        else:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(
                    host, port, type=socket.SOCK_STREAM
                )
            except OSError:
                raise PushRefused(f"the webhook host {host!r} cannot be resolved") from None
            found = []
            for info in infos:
                address = _literal(str(info[4][0]))
                if address is not None and address not in found:
                    found.append(address)
        if not found:
            raise PushRefused(f"the webhook host {host!r} has no address")
        if not self.allow_private and any(_address_blocked(a) for a in found):
            raise PushRefused(f"the webhook host {host!r} resolves to a private address")
        return [str(address) for address in found]


def _literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


class _Outbox:
    """The events still to deliver to one webhook of one task, in order."""

    __slots__ = ("config", "items", "running")

    def __init__(self, config: TaskPushNotificationConfig) -> None:
        self.config = config
        self.items: deque[bytes] = deque()
        self.running = False


class PushDelivery(PushNotificationSender):
    """Delivers task events to webhooks in the background. Use as an async context manager."""

    def __init__(
        self,
        config_store: PushNotificationConfigStore,
        policy: PushUrlPolicy,
        *,
        task_of: Callable[[str], Task | None] = lambda _task_id: None,
        attempts: int = DELIVERY_ATTEMPTS,
        first_retry_s: float = FIRST_RETRY_S,
    ) -> None:
        self.config_store = config_store
        # The task as stored now (for 0.3 payloads, which are the whole task).
        self.task_of = task_of
        self.policy = policy
        self.attempts = attempts
        self.first_retry_s = first_retry_s
        self._outboxes: dict[tuple[str, str], _Outbox] = {}
        self._group: TaskGroup | None = None
        self._client: httpx.AsyncClient | None = None
        self._running = 0
        self._quiet = anyio.Event()
        self._quiet.set()

    async def __aenter__(self) -> PushDelivery:
        # Direct connections only (no proxy from the environment): the address checked is
        # the address called.
        self._client = httpx.AsyncClient(
            timeout=DELIVERY_TIMEOUT_S, follow_redirects=False, trust_env=False
        )
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        group = self._group
        assert group is not None
        with anyio.move_on_after(DRAIN_S, shield=True):
            await self._quiet.wait()
        group.cancel_scope.cancel()
        await group.__aexit__(exc_type, exc, tb)
        self._group = None
        if self._client is not None:
            await self._client.aclose()

    async def send_notification(self, task_id: str, event: PushNotificationEvent) -> None:
        configs: Sequence[
            TaskPushNotificationConfig
        ] = await self.config_store.get_info_for_dispatch(task_id)
        if not configs or self._group is None:
            return
        # Serialized now: the SDK goes on changing the task object after this call.
        bodies: dict[bool, bytes | None] = {}
        for config in configs:
            v03 = self._v03(task_id, config)
            if v03 not in bodies:
                bodies[v03] = self._payload(task_id, event, v03=v03)
            body = bodies[v03]
            if body is None:
                continue
            key = (task_id, config.id or config.url)
            box = self._outboxes.get(key)
            if box is None:
                box = self._outboxes[key] = _Outbox(config)
            box.config = config
            box.items.append(body)
            if not box.running:
                box.running = True
                if self._running == 0:
                    self._quiet = anyio.Event()
                self._running += 1
                self._group.start_soon(self._drain, key, box)

    def _v03(self, task_id: str, config: TaskPushNotificationConfig) -> bool:
        # PushConfigs, or the durable store: each remembers which version registered it.
        registered = getattr(self.config_store, "registered_v03", None)
        return registered is not None and bool(registered(task_id, config))

    def _payload(self, task_id: str, event: PushNotificationEvent, *, v03: bool) -> bytes | None:
        if not v03:
            return json.dumps(
                MessageToDict(to_stream_response(event)), separators=(",", ":")
            ).encode()
        task = event if isinstance(event, Task) else self.task_of(task_id)
        if task is None:
            return None
        compat = to_compat_task(task).model_dump(mode="json", by_alias=True, exclude_none=True)
        return json.dumps(compat, separators=(",", ":")).encode()

    async def _drain(self, key: tuple[str, str], box: _Outbox) -> None:
        try:
            while box.items:
                body = box.items[0]
                await self._deliver(key[0], box.config, body)  # logs what did not go out
                box.items.popleft()
        finally:
            box.running = False
            if not box.items:
                self._outboxes.pop(key, None)
            self._running -= 1
            if self._running == 0:
                self._quiet.set()

    async def _deliver(self, task_id: str, config: TaskPushNotificationConfig, body: bytes) -> bool:
        """Post one event, retrying what may pass later; True once the webhook took it."""
        pause = self.first_retry_s
        media_type = MEDIA_TYPE_V03 if self._v03(task_id, config) else MEDIA_TYPE
        for attempt in range(1, self.attempts + 1):
            outcome = await self._post(config, body, media_type)
            if outcome is None:
                return True
            retry, why = outcome
            last = attempt == self.attempts or not retry
            logger.warning(
                "push notification not delivered" + ("" if last else "; retrying"),
                extra={
                    "task_id": task_id,
                    "config_id": config.id,
                    "attempt": attempt,
                    "reason": why,
                },
            )
            if last:
                return False
            await anyio.sleep(pause)
            pause = min(pause * 2, MAX_RETRY_S)
        return False

    async def _post(
        self, config: TaskPushNotificationConfig, body: bytes, media_type: str = MEDIA_TYPE
    ) -> tuple[bool, str] | None:
        """None when delivered, else (worth retrying, why not)."""
        client = self._client
        assert client is not None
        try:
            parts = self.policy.check_url(config.url)
            addresses = await self.policy.addresses(parts)
        except PushRefused as refused:
            return False, str(refused)
        headers = {"Content-Type": media_type, "Host": _host_header(parts)}
        if config.token:
            headers["X-A2A-Notification-Token"] = config.token
        if config.HasField("authentication") and config.authentication.scheme:
            auth = config.authentication
            headers["Authorization"] = (
                f"{auth.scheme} {auth.credentials}" if auth.credentials else auth.scheme
            )
        extensions: dict[str, Any] = {}
        if parts.scheme == "https":
            extensions["sni_hostname"] = parts.hostname
        why = "no address answered"
        for address in addresses:
            target = _pinned(parts, address)
            try:
                response = await client.post(
                    target, content=body, headers=headers, extensions=extensions
                )
            except httpx.ConnectError:
                why = "connection refused or unreachable"
                continue
            except httpx.TimeoutException:
                return True, f"no answer within {DELIVERY_TIMEOUT_S:g} s"
            except httpx.HTTPError as exc:
                return True, type(exc).__name__
            if response.is_success:
                return None
            status = response.status_code
            return (status >= 500 or status in RETRY_STATUSES), f"HTTP {status}"
        return True, why


def _host_header(parts: SplitResult) -> str:
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{parts.port}" if parts.port else host


def _pinned(parts: SplitResult, address: str) -> str:
    host = f"[{address}]" if ":" in address else address
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))

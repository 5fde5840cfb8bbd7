"""Ownership: whose a task or a push config is, read from the SDK's call context.

The guard (guard.py) names the caller's principal; the call context builder (app.py) makes
it the context's user and marks an operator (A2A_ADMIN_PRINCIPALS) in its state. The stores
partition by `owner_name` (the SDK's owner resolver, with the unnamed caller of an internal
context counted as `default`), so another principal's task is simply not there: every
operation on it answers exactly as for an id that never existed, through the same code.

An operator sees every task only where the request handler says so (`ADMIN_VIEW_STATE`:
GetTask, ListTasks, CancelTask, SubscribeToTask); its lookups then resolve to
`EVERY_OWNER`, which the task store serves from all partitions. A message it sends, and
its push configs, stay its own: an operator does not speak in another principal's
conversation. A task keeps the owner it was created with whoever saves it later (an
operator's cancel included).

Push configs' secrets (`token`, `authentication.credentials`) are write-only: a config is
returned with each set secret replaced by `REDACTED`, to its owner as to anyone.
"""

from __future__ import annotations

from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import TaskPushNotificationConfig
from sqlalchemy import ColumnElement, true

from a2a_acp_bridge.schema import DEFAULT_PRINCIPAL

# The context's state: the caller is an operator / this request may see every task.
ADMIN_STATE = "a2a_acp_bridge.admin"
ADMIN_VIEW_STATE = "a2a_acp_bridge.admin_view"
# The owner an operator's view resolves to (no principal name holds a control character).
EVERY_OWNER = "\x00every"
# What a push config's secret reads as once stored.
REDACTED = "********"


class StoredOwner(User):
    """A principal as the SDK's owner resolver reads it (a task restored, an internal save)."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def is_authenticated(self) -> bool:
        return bool(self._name)

    @property
    def user_name(self) -> str:
        return self._name


def owner_context(owner: str) -> ServerCallContext:
    return ServerCallContext(user=StoredOwner(owner or DEFAULT_PRINCIPAL))


def principal_of(context: ServerCallContext | None) -> str:
    """The caller's principal (`default` when the context names none)."""
    if context is None:
        return DEFAULT_PRINCIPAL
    return context.user.user_name or DEFAULT_PRINCIPAL


def owner_name(context: ServerCallContext) -> str:
    """The owner resolver of the stores: the principal, or everyone for an operator's view."""
    if context.state.get(ADMIN_VIEW_STATE):
        return EVERY_OWNER
    return principal_of(context)


def owned_by(column: ColumnElement[str], owner: str) -> ColumnElement[bool]:
    """The SQL condition of the owner partition (`EVERY_OWNER`, an operator's view: any row)."""
    return true() if owner == EVERY_OWNER else column == owner


def allow_admin_view(context: ServerCallContext) -> None:
    """An operator's request may look at every task (GetTask, ListTasks, CancelTask,
    SubscribeToTask only)."""
    if context.state.get(ADMIN_STATE):
        context.state[ADMIN_VIEW_STATE] = True


def redacted(config: TaskPushNotificationConfig) -> TaskPushNotificationConfig:
    """A copy without the secrets: each one set reads `REDACTED`."""
    shown = TaskPushNotificationConfig()
    shown.CopyFrom(config)
    if shown.token:
        shown.token = REDACTED
    if shown.HasField("authentication") and shown.authentication.credentials:
        shown.authentication.credentials = REDACTED
    return shown

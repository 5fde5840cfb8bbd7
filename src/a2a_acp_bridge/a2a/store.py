"""The task store: the SDK's in-memory store, keeping each task's answer in few parts.

The SDK appends every artifact chunk to the stored artifact as a part of its own, and
copies the whole task for every event it hands to subscribers, so a long answer streamed
in small chunks would be stored, and copied, as thousands of parts. When a chunk of the
`answer` artifact arrives, `save` folds it into the previous part while that part is
plain text under `MERGE_LIMIT` characters: the stored answer grows in parts of about that
size, and folding never copies more than one such part. Files and the report (data parts)
stay parts of their own. Tasks are stored without copying (the SDK's `use_copying=False`):
each task is written by one consumer and read by handlers that copy before trimming.

Tasks are partitioned by owner (ownership.py): a task keeps the owner it was first saved
under, whoever's context saves it later; an operator's view (`EVERY_OWNER`) reads every
partition.
"""

from __future__ import annotations

from collections import OrderedDict

from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryTaskStore
from a2a.types.a2a_pb2 import Artifact, Part, Task

from a2a_acp_bridge.a2a.ownership import EVERY_OWNER, owner_context, owner_name
from a2a_acp_bridge.a2a.states import TERMINAL
from a2a_acp_bridge.config import DEFAULT_TASK_RETENTION

ANSWER_ARTIFACT = "answer"
# A stored answer part stops taking more text at this size (characters).
MERGE_LIMIT = 8192


def fold_last_text_part(artifact: Artifact) -> None:
    """Fold the artifact's last part into the one before when both are plain small text."""
    parts = artifact.parts
    if len(parts) < 2:
        return
    last, previous = parts[-1], parts[-2]
    if not (is_plain_text(last) and is_plain_text(previous)):
        return
    if len(previous.text) >= MERGE_LIMIT:
        return
    previous.text += last.text
    del parts[-1]


def is_plain_text(part: Part) -> bool:
    """Text with nothing else on it (no media type, file name or metadata): foldable."""
    return (
        part.WhichOneof("content") == "text"
        and not part.media_type
        and not part.filename
        and not part.HasField("metadata")
    )


class TaskStore(InMemoryTaskStore):
    """In memory, without copies, answer parts folded as they arrive; at most
    `retention` finished tasks are kept, the oldest finished first to go."""

    def __init__(self, retention: int = DEFAULT_TASK_RETENTION) -> None:
        super().__init__(use_copying=False, owner_resolver=owner_name)
        self._retention = retention
        # Finished tasks in the order they finished, with the context that owns them.
        self._finished: OrderedDict[str, ServerCallContext] = OrderedDict()
        # Each task's owner, fixed when it is first saved.
        self._owners: dict[str, str] = {}
        impl = self._impl
        one_owner = impl._get_owner_tasks

        def owner_tasks(owner: str) -> dict[str, Task]:
            if owner != EVERY_OWNER:
                return one_owner(owner)
            return {tid: task for tasks in impl.tasks.values() for tid, task in tasks.items()}

        # The SDK's in-memory store reads a partition through this one method.
        setattr(impl, "_get_owner_tasks", owner_tasks)  # noqa: B010

    def owning(self, task: Task, context: ServerCallContext) -> ServerCallContext:
        """The context `task` is saved under: its owner's, once it has one."""
        owner = self._owners.get(task.id)
        if owner is None:
            owner = owner_name(context)
            if owner == EVERY_OWNER:  # an operator's view never creates a task
                raise ValueError("a task is saved under its owner, not an operator's view")
            self._owners[task.id] = owner
        elif owner == owner_name(context):
            return context
        return owner_context(owner)

    def owner_of(self, task_id: str) -> str | None:
        return self._owners.get(task_id)

    async def save(self, task: Task, context: ServerCallContext) -> None:
        context = self.owning(task, context)
        for artifact in task.artifacts:
            if artifact.artifact_id == ANSWER_ARTIFACT:
                fold_last_text_part(artifact)
                break
        await super().save(task, context)
        if task.status.state in TERMINAL and task.id not in self._finished:
            self._finished[task.id] = context
            while len(self._finished) > self._retention:
                oldest, owner = self._finished.popitem(last=False)
                await self._evict(oldest, owner)

    async def _evict(self, task_id: str, context: ServerCallContext) -> None:
        """A finished task beyond the retention goes (a2a/durable_store.py deletes its row)."""
        await super().delete(task_id, self._context_of(task_id, context))
        self._owners.pop(task_id, None)

    def _context_of(self, task_id: str, context: ServerCallContext) -> ServerCallContext:
        owner = self._owners.get(task_id)
        return context if owner is None else owner_context(owner)

    def peek(self, task_id: str) -> Task | None:
        """The stored task whoever owns it (for push delivery, which has no caller)."""
        for tasks in self._impl.tasks.values():
            task = tasks.get(task_id)
            if task is not None:
                return task
        return None

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        self._finished.pop(task_id, None)
        await super().delete(task_id, self._context_of(task_id, context))
        self._owners.pop(task_id, None)

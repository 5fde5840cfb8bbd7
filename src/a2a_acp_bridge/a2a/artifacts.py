"""The artifacts a task streams, each closed whole, and the turn's report beside them.

A2A clients keep a streamed artifact in two ways: the SDKs' aggregators (a2a-sdk,
@a2a-js/sdk), Microsoft Agent Framework and Strands append every chunk; Google ADK keeps
only the update marked `lastChunk` as the whole artifact and drops the rest. Both end
with exactly the full artifact when the last update of every artifact *replaces* it
(`append: false`, `lastChunk: true`, all its parts): appenders replace what they built,
ADK takes it as it is, and nobody sees the text twice.

`StreamedArtifact` keeps what the caller was sent of one artifact, folded the way the task
store folds it (a2a/store.py: text chunks merged into parts of about `MERGE_LIMIT`
characters), so a chunk costs the same however long the answer is, and the closing
update carries a few large parts rather than one per chunk.

The turn's report (stop reason, usage, tool calls, refusals, session id) is not part of
any artifact: it goes in the terminal status update's `metadata` under `REPORT_KEY`, which
the SDK merges into the task's own metadata (so GetTask and ListTasks show it). Clients
that turn a task's artifacts into the answer they hand a model (ADK, Agent Framework)
leave metadata alone, so the report never reaches the answer text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from a2a.types.a2a_pb2 import Artifact, Part, TaskArtifactUpdateEvent

from a2a_acp_bridge.a2a.store import ANSWER_ARTIFACT, fold_last_text_part

CHANGES_ARTIFACT = "changes"
# The key of the turn's report in the final status update's (and the task's) metadata.
REPORT_KEY = "report"
DESCRIPTIONS = {
    ANSWER_ARTIFACT: "What the agent said, and the files it returned",
    CHANGES_ARTIFACT: "File edits the agent completed, as unified diffs",
}


class StreamedArtifact:
    """One artifact of one task: what was sent of it, and whether it is still open."""

    __slots__ = ("_sent", "open", "started")

    def __init__(self, artifact_id: str) -> None:
        self._sent = Artifact(
            artifact_id=artifact_id,
            name=artifact_id,
            description=DESCRIPTIONS.get(artifact_id, ""),
        )
        # Any update sent (the first one creates the artifact in the task).
        self.started = False
        # Chunks sent since the artifact was last closed.
        self.open = False

    @property
    def artifact_id(self) -> str:
        return str(self._sent.artifact_id)

    def chunk(
        self, task_id: str, context_id: str, parts: Iterable[Part]
    ) -> TaskArtifactUpdateEvent:
        """The update that adds `parts` (the first one names and describes the artifact)."""
        artifact = Artifact(artifact_id=self._sent.artifact_id, parts=parts)
        if not self.started:
            artifact.name = self._sent.name
            artifact.description = self._sent.description
        self._sent.parts.extend(artifact.parts)
        fold_last_text_part(self._sent)
        event = TaskArtifactUpdateEvent(
            task_id=task_id, context_id=context_id, artifact=artifact, append=self.started
        )
        self.started = True
        self.open = True
        return event

    def close(self, task_id: str, context_id: str) -> TaskArtifactUpdateEvent:
        """The closing update: the whole artifact, replacing what the caller assembled."""
        self.open = False
        whole = Artifact()
        whole.CopyFrom(self._sent)
        return TaskArtifactUpdateEvent(
            task_id=task_id, context_id=context_id, artifact=whole, append=False, last_chunk=True
        )


class TaskArtifacts:
    """The artifacts of one task in the order they were started."""

    def __init__(self) -> None:
        self._artifacts: dict[str, StreamedArtifact] = {}

    def get(self, artifact_id: str) -> StreamedArtifact:
        artifact = self._artifacts.get(artifact_id)
        if artifact is None:
            artifact = self._artifacts[artifact_id] = StreamedArtifact(artifact_id)
        return artifact

    def closing(self, task_id: str, context_id: str) -> list[TaskArtifactUpdateEvent]:
        """The closing update of every artifact that has chunks not yet closed."""
        return [
            artifact.close(task_id, context_id)
            for artifact in self._artifacts.values()
            if artifact.open
        ]


def report_metadata(report: Mapping[str, Any]) -> dict[str, Any]:
    """The final status update's metadata: the turn's report under `REPORT_KEY`."""
    return {REPORT_KEY: dict(report)}

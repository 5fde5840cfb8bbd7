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
update carries the store's few large parts rather than one per chunk.

The turn's report (stop reason, usage, tool calls, refusals, session id) is not part of
any artifact: it goes in the terminal status update's `metadata` under `REPORT_KEY`, which
the SDK merges into the task's own metadata (so GetTask and ListTasks show it). Clients
that turn a task's artifacts into the answer they hand a model (ADK, Agent Framework)
leave metadata alone, so the report never reaches the answer text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from a2a.types.a2a_pb2 import Part, TaskArtifactUpdateEvent

from a2a_acp_bridge.a2a.store import ANSWER_ARTIFACT, MERGE_LIMIT, is_plain_text

CHANGES_ARTIFACT = "changes"
# The key of the turn's report in the final status update's (and the task's) metadata.
REPORT_KEY = "report"
DESCRIPTIONS = {
    ANSWER_ARTIFACT: "What the agent said, and the files it returned",
    CHANGES_ARTIFACT: "File edits the agent completed, as unified diffs",
}


class StreamedArtifact:
    """One artifact of one task: what was sent of it, and whether it is still open.

    Text is kept as Python strings, a run of chunks joined once it reaches `MERGE_LIMIT`
    (the store's fold rule, so the closing update's parts are the store's parts): a chunk
    costs an append, and only the closing update builds parts."""

    __slots__ = ("_done", "_run", "_run_size", "artifact_id", "open", "started")

    def __init__(self, artifact_id: str) -> None:
        self.artifact_id = artifact_id
        # Finished pieces: a text part's whole text, or a part that is not plain text.
        self._done: list[str | Part] = []
        # The text part still taking chunks, and its size.
        self._run: list[str] = []
        self._run_size = 0
        # Any update sent (the first one creates the artifact in the task).
        self.started = False
        # Chunks sent since the artifact was last closed.
        self.open = False

    def chunk(
        self, task_id: str, context_id: str, parts: Iterable[Part]
    ) -> TaskArtifactUpdateEvent:
        """The update that adds `parts` (the first one names and describes the artifact)."""
        event = self._event(task_id, context_id)
        kept = list(parts)
        event.artifact.parts.extend(kept)
        for index, part in enumerate(kept):
            # As the store does: only a chunk's last part folds into the part before it.
            self._keep(part, fold=index == len(kept) - 1)
        return event

    def text_chunk(self, task_id: str, context_id: str, text: str) -> TaskArtifactUpdateEvent:
        """The update that adds one plain text part (the answer's chunks): kept as the
        string it is, without reading it back from the part."""
        event = self._event(task_id, context_id)
        event.artifact.parts.add(text=text)
        self._keep_text(text, fold=True)
        return event

    def _event(self, task_id: str, context_id: str) -> TaskArtifactUpdateEvent:
        # Built in place: a message passed to a constructor is copied once more.
        event = TaskArtifactUpdateEvent(task_id=task_id, context_id=context_id, append=self.started)
        artifact = event.artifact
        artifact.artifact_id = self.artifact_id
        if not self.started:
            artifact.name = self.artifact_id
            artifact.description = DESCRIPTIONS.get(self.artifact_id, "")
        self.started = True
        self.open = True
        return event

    def _keep(self, part: Part, *, fold: bool) -> None:
        if not is_plain_text(part):
            self._end_run()
            self._done.append(part)
            return
        self._keep_text(str(part.text), fold=fold)

    def _keep_text(self, text: str, *, fold: bool) -> None:
        if fold and self._run and self._run_size < MERGE_LIMIT:
            self._run.append(text)
            self._run_size += len(text)
            return
        self._end_run()
        self._run = [text]
        self._run_size = len(text)

    def _end_run(self) -> None:
        if self._run:
            self._done.append("".join(self._run))
            self._run = []
            self._run_size = 0

    def close(self, task_id: str, context_id: str) -> TaskArtifactUpdateEvent:
        """The closing update: the whole artifact, replacing what the caller assembled. The
        text part still open stays open: later chunks fold into it as they do in the store."""
        self.open = False
        if len(self._run) > 1:
            self._run = ["".join(self._run)]
        event = TaskArtifactUpdateEvent(
            task_id=task_id, context_id=context_id, append=False, last_chunk=True
        )
        whole = event.artifact
        whole.artifact_id = self.artifact_id
        whole.name = self.artifact_id
        whole.description = DESCRIPTIONS.get(self.artifact_id, "")
        for piece in [*self._done, *self._run]:
            if isinstance(piece, str):
                whole.parts.add(text=piece)
            else:
                whole.parts.append(piece)
        return event


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

"""Edits reach the `changes` artifact however the adapter spreads a tool call's fields."""

from __future__ import annotations

from a2a_acp_bridge.events import FileDiff, ToolCallSeen
from a2a_acp_bridge.progress import ChangeMade, TurnProgress

DIFF = FileDiff("/root/hello.txt", None, "hello\n")


def changes(progress: TurnProgress, *events: ToolCallSeen) -> list[ChangeMade]:
    return [out for out in progress.feed(list(events)) if isinstance(out, ChangeMade)]


def test_a_diff_sent_before_the_request_is_published_when_the_call_completes() -> None:
    # codex-acp and claude-agent-acp: the diff comes with the tool call, the completion
    # update carries only the status.
    progress = TurnProgress()
    assert (
        changes(
            progress,
            ToolCallSeen("c1", True, "Editing files", "edit", "in_progress", diffs=(DIFF,)),
        )
        == []
    )
    assert changes(progress, ToolCallSeen("c1", False, status="completed")) == [
        ChangeMade("c1", DIFF)
    ]


def test_a_diff_is_published_once_even_when_repeated_after_completion() -> None:
    progress = TurnProgress()
    done = ToolCallSeen("c1", False, status="completed", diffs=(DIFF,))
    assert changes(progress, ToolCallSeen("c1", True, kind="edit"), done) == [
        ChangeMade("c1", DIFF)
    ]
    assert changes(progress, done) == []


def test_a_failed_edit_publishes_no_change() -> None:
    progress = TurnProgress()
    assert (
        changes(
            progress,
            ToolCallSeen("c1", True, kind="edit", status="pending", diffs=(DIFF,)),
            ToolCallSeen("c1", False, status="failed"),
        )
        == []
    )


def test_the_latest_diff_of_a_call_is_the_one_published() -> None:
    progress = TurnProgress()
    newer = FileDiff("/root/hello.txt", None, "hello again\n")
    out = changes(
        progress,
        ToolCallSeen("c1", True, kind="edit", status="pending", diffs=(DIFF,)),
        ToolCallSeen("c1", False, status="in_progress", diffs=(newer,)),
        ToolCallSeen("c1", False, status="completed"),
    )
    assert out == [ChangeMade("c1", newer)]

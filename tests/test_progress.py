"""The ACP -> A2A mapping (progress.py): coalescing, status lines, the end of a turn."""

from __future__ import annotations

import pytest

from a2a_acp_bridge.events import (
    FileChunk,
    FileDiff,
    Notice,
    PermissionSeen,
    PlanEntry,
    PlanSeen,
    QuestionAsked,
    TextChunk,
    ToolCallSeen,
    TurnEnd,
)
from a2a_acp_bridge.permissions import Refusal
from a2a_acp_bridge.progress import (
    FLUSH_CHARS,
    AnswerFile,
    AnswerText,
    ChangeMade,
    FinalState,
    Question,
    StatusText,
    TurnProgress,
)


def answer(text: str) -> TextChunk:
    return TextChunk("answer", text)


def thought(text: str) -> TextChunk:
    return TextChunk("thought", text)


def refusal(label: str = "rm -rf /") -> Refusal:
    return Refusal(
        tool_call_id="t1",
        label=label,
        kind="execute",
        rule="execute-outside-sandbox",
        reason="commands run only in the bridge's own sandbox",
        answer="reject",
        turn_effect="continues",
        offered=(("allow", "allow_once"), ("reject", "reject_once")),
    )


# --- coalescing -------------------------------------------------------------------------


def test_the_first_answer_text_goes_out_at_once() -> None:
    progress = TurnProgress()
    assert progress.feed([answer("Hel")]) == [AnswerText("Hel")]


def test_later_small_chunks_are_held_until_a_newline_or_the_mark() -> None:
    progress = TurnProgress()
    progress.feed([answer("a")])
    assert progress.feed([answer("b"), answer("c")]) == []
    assert progress.holding
    assert progress.feed([answer("d\n")]) == [AnswerText("bcd\n")]
    assert progress.feed([answer("x" * (FLUSH_CHARS - 1))]) == []
    assert progress.feed([answer("yz")]) == [AnswerText("x" * (FLUSH_CHARS - 1) + "yz")]


def test_a_tick_releases_held_text() -> None:
    progress = TurnProgress()
    progress.feed([answer("a")])
    progress.feed([answer("b")])
    assert progress.feed([]) == [AnswerText("b")]
    assert not progress.holding


def test_one_batch_of_many_chunks_becomes_one_output() -> None:
    progress = TurnProgress()
    progress.feed([answer("start ")])
    chunks = [answer(f"{i:03d}") for i in range(60)]
    outputs = progress.feed(chunks)
    assert outputs == [AnswerText("".join(f"{i:03d}" for i in range(60)))]


def test_thoughts_are_status_lines_and_never_part_of_the_answer() -> None:
    progress = TurnProgress()
    outputs = progress.feed([thought("let me "), thought("think\n"), answer("the answer")])
    assert outputs == [StatusText("Thinking: let me think\n"), AnswerText("the answer")]


def test_a_change_of_channel_flushes_what_was_held() -> None:
    progress = TurnProgress()
    progress.feed([answer("a")])
    outputs = progress.feed([answer("b"), thought("hmm"), answer("c")])
    assert outputs[0] == AnswerText("b")
    assert outputs[1] == StatusText("Thinking: hmm")


def test_finish_flushes_the_rest() -> None:
    progress = TurnProgress()
    progress.feed([answer("a")])
    progress.feed([answer("b")])
    assert progress.finish() == [AnswerText("b")]
    assert progress.finish() == []


# --- status lines ----------------------------------------------------------------------


def test_a_tool_call_is_announced_again_only_when_its_status_changes() -> None:
    progress = TurnProgress()
    start = ToolCallSeen("t1", True, title="Read  a.txt", kind="read", status="pending")
    same = ToolCallSeen("t1", False, status="pending")
    running = ToolCallSeen("t1", False, status="in_progress")
    title_only = ToolCallSeen("t1", False, title="Read a.txt (lines 1-9)")
    done = ToolCallSeen("t1", False, status="completed")
    outputs = progress.feed([start, same, running, title_only, done])
    assert outputs == [
        StatusText("Tool call: Read a.txt (read, pending)"),
        StatusText("Tool call: Read a.txt (read, running)"),
        StatusText("Tool call: Read a.txt (lines 1-9) (read, done)"),
    ]


def test_tool_calls_flush_held_answer_text_first() -> None:
    progress = TurnProgress()
    progress.feed([answer("a")])
    outputs = progress.feed([answer("b"), ToolCallSeen("t1", True, title="ls", kind="execute")])
    assert outputs == [AnswerText("b"), StatusText("Tool call: ls (execute, pending)")]


def test_a_plan_is_a_status_line_of_its_entries() -> None:
    progress = TurnProgress()
    plan = PlanSeen((PlanEntry("read", "completed"), PlanEntry("write", "in_progress")))
    assert progress.feed([plan]) == [StatusText("Plan:\n· [completed] read\n· [in_progress] write")]


def test_a_refusal_and_a_notice_are_status_lines() -> None:
    progress = TurnProgress()
    denied = PermissionSeen("t1", "rm -rf /", False, "reject", "rule", refusal())
    allowed = PermissionSeen("t2", "ls", True, "allow", "rule")
    outputs = progress.feed([denied, allowed, Notice("Queued: 1 earlier task(s).")])
    assert outputs == [
        StatusText(f"Refused by the bridge: {refusal().summary()}"),
        StatusText("Queued: 1 earlier task(s)."),
    ]


def test_a_completed_edit_is_a_change_once() -> None:
    progress = TurnProgress()
    diff = FileDiff("/w/a.txt", None, "hi\n")
    pending = ToolCallSeen("t1", True, title="Write", kind="edit", diffs=(diff,))
    done = ToolCallSeen("t1", False, status="completed", diffs=(diff,))
    repeated = ToolCallSeen("t1", False, status="completed", diffs=(diff,))
    outputs = progress.feed([pending, done, repeated])
    changes = [o for o in outputs if isinstance(o, ChangeMade)]
    assert changes == [ChangeMade("t1", diff)]


def test_a_file_in_the_answer_and_a_question_keep_their_order() -> None:
    progress = TurnProgress()
    file = FileChunk("out.txt", "text/plain", text="hello")
    question = QuestionAsked("q1", "Which?", {"type": "object"})
    outputs = progress.feed([answer("see "), file, question])
    assert outputs == [AnswerText("see "), AnswerFile(file), Question(question)]


# --- the end of a turn -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("stop_reason", "state", "note"),
    [
        ("end_turn", FinalState.COMPLETED, None),
        ("cancelled", FinalState.CANCELED, "demo cancelled the turn."),
        ("refusal", FinalState.REJECTED, "I will not do that."),
        ("max_tokens", FinalState.COMPLETED, "Stopped early: the agent reached its token limit"),
        ("max_turn_requests", FinalState.COMPLETED, "Stopped early: the agent reached its limit"),
    ],
    ids=["end_turn", "cancelled", "refusal", "max_tokens", "max_turn_requests"],
)
def test_each_stop_reason_gives_its_state(
    stop_reason: str, state: FinalState, note: str | None
) -> None:
    progress = TurnProgress()
    progress.feed([answer("I will not do that.")])
    outcome = progress.outcome(TurnEnd(stop_reason), cancel_reason=None, agent="demo")
    assert outcome.state is state
    if note is None:
        assert outcome.message is None
    else:
        assert outcome.message is not None
        assert outcome.message.startswith(note)


def test_a_refusal_without_words_names_the_agent() -> None:
    outcome = TurnProgress().outcome(TurnEnd("refusal"), cancel_reason=None, agent="Claude")
    assert outcome == outcome.__class__(FinalState.REJECTED, "Claude refused the request.")


def test_end_turn_with_refusals_or_failed_calls_is_completed_with_a_note() -> None:
    progress = TurnProgress()
    progress.feed(
        [
            PermissionSeen("t1", "rm -rf /", False, "reject", "rule", refusal()),
            ToolCallSeen("t2", True, title="make", kind="execute", status="failed"),
        ]
    )
    outcome = progress.outcome(TurnEnd("end_turn"), cancel_reason=None, agent="Codex")
    assert outcome.state is FinalState.COMPLETED
    assert outcome.message is not None
    assert "1 action(s) refused by the bridge" in outcome.message
    assert "1 tool call(s) failed" in outcome.message


def test_a_cancelled_task_is_canceled_even_when_the_agent_finished() -> None:
    progress = TurnProgress()
    outcome = progress.outcome(TurnEnd("end_turn"), cancel_reason="Cancelled.", agent="x")
    assert outcome.state is FinalState.CANCELED
    assert outcome.message is not None
    assert "already finished" in outcome.message


def test_the_report_carries_every_field() -> None:
    progress = TurnProgress()
    progress.feed(
        [
            ToolCallSeen("t1", True, title="ls", kind="execute", status="completed"),
            ToolCallSeen("t2", True, title="make", kind="execute", status="failed"),
            PermissionSeen("t3", "rm -rf /", False, "reject", "rule", refusal()),
        ]
    )
    report = progress.summary(TurnEnd("end_turn", {"totalTokens": 7}), session_id="s-1")
    assert report["stopReason"] == "end_turn"
    assert report["usage"] == {"totalTokens": 7}
    assert report["sessionId"] == "s-1"
    assert report["failedToolCalls"] == 1
    assert [c["toolCallId"] for c in report["toolCalls"]] == ["t1", "t2"]
    assert report["toolCalls"][1] == {
        "toolCallId": "t2",
        "title": "make",
        "kind": "execute",
        "status": "failed",
    }
    (refused,) = report["refusedByBridge"]
    assert refused["action"] == "rm -rf /"
    assert refused["rule"] == "execute-outside-sandbox"
    assert refused["offered"] == [
        {"optionId": "allow", "kind": "allow_once"},
        {"optionId": "reject", "kind": "reject_once"},
    ]

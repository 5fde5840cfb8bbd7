"""The seam where an external channel replaces the classifier fails closed.

Whatever a replacement `decide` or `answer` raises or returns, the bridge's ACP client sends
only an offered option id, an allow option only when the decision allowed, and otherwise the
outcome `cancelled`, with the refusal recorded for the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from acp.schema import AllowedOutcome, RequestPermissionRequest

from a2a_acp_bridge.acp.client import BridgeClient, SessionState
from a2a_acp_bridge.adapters import CODEX
from a2a_acp_bridge.boundary import Boundary, Sandboxes
from a2a_acp_bridge.events import PermissionSeen
from a2a_acp_bridge.permissions import (
    Answer,
    Answerer,
    Decider,
    Decision,
    PermissionOption,
    Rule,
    Supervision,
    answer,
    decide,
)
from a2a_acp_bridge.turn import Turn
from tests.support import fixtures
from tests.support.fixtures import Places

pytestmark = pytest.mark.anyio

SUPERVISION = Supervision(CODEX, "read-only")
PATCH = "codex-acp-2.6.0-cx_patch_ro.json"  # allow_once / allow_for_session / cancel


async def ask(
    tmp_path: Path, decider: Decider = decide, answerer: Answerer = answer
) -> tuple[str, PermissionSeen]:
    boundary: Boundary = Sandboxes(tmp_path / "sandboxes").create("seam")
    params = fixtures.load(PATCH, Places(boundary.root, tmp_path, tmp_path))
    request = RequestPermissionRequest.model_validate(params)
    state = SessionState(boundary=boundary, supervision=SUPERVISION, turn=Turn("task", "ctx"))
    client = BridgeClient("seam", decider, answerer)
    client.sessions[request.session_id] = state
    response = await client.request_permission(
        session_id=request.session_id, tool_call=request.tool_call, options=request.options
    )
    [event] = [e for e in state.sink.drain() if isinstance(e, PermissionSeen)]
    outcome = response.outcome
    return (outcome.option_id if isinstance(outcome, AllowedOutcome) else "cancelled"), event


async def test_the_bridges_own_classifier_allows_this_patch(tmp_path: Path) -> None:
    sent, event = await ask(tmp_path)
    assert (sent, event.allowed, event.rule) == ("allow_once", True, "change-inside-root")


async def test_a_decider_that_raises_refuses_the_action(tmp_path: Path) -> None:
    def broken(*_: object) -> Decision:
        raise RuntimeError("the policy server is down")

    sent, event = await ask(tmp_path, decider=broken)
    assert sent == "cancel"
    assert event.allowed is False
    assert event.rule == "classifier-failed"
    assert event.refusal is not None
    assert event.refusal.reason == "the permission classifier failed"
    assert event.refusal.turn_effect == "ends"  # codex's cancel aborts the turn


async def test_an_answerer_that_raises_answers_cancelled(tmp_path: Path) -> None:
    def broken(decision: Decision, options: Sequence[PermissionOption], s: Supervision) -> Answer:
        raise KeyError("oops")

    sent, event = await ask(tmp_path, answerer=broken)
    assert sent == "cancelled"
    assert event.rule == "classifier-failed"
    assert event.refusal is not None
    assert event.refusal.reason == "choosing the answer failed; refused to be safe"


async def test_an_answer_that_was_not_offered_is_never_sent(tmp_path: Path) -> None:
    def inventive(
        decision: Decision, options: Sequence[PermissionOption], s: Supervision
    ) -> Answer:
        return Answer("approved", "allow_once")  # codex 0.16's id, not offered by 2.6

    sent, event = await ask(tmp_path, answerer=inventive)
    assert sent == "cancelled"
    assert event.allowed is False
    assert event.refusal is not None
    assert "'approved' was not offered" in event.refusal.reason


async def test_an_answer_that_allows_what_was_refused_is_never_sent(tmp_path: Path) -> None:
    def refuse(*_: object) -> Decision:
        return Decision(False, Rule.UNVERIFIABLE_HANDED_ROOT, "no")

    def contrary(decision: Decision, options: Sequence[PermissionOption], s: Supervision) -> Answer:
        return Answer("allow_for_session", "reject_once")  # mislabelled, too

    sent, event = await ask(tmp_path, decider=refuse, answerer=contrary)
    assert sent == "cancelled"
    assert event.allowed is False
    assert event.rule == "classifier-failed"


async def test_the_kind_of_the_answer_is_taken_from_the_offer(tmp_path: Path) -> None:
    def mislabelled(
        decision: Decision, options: Sequence[PermissionOption], s: Supervision
    ) -> Answer:
        return Answer("cancel", "allow_once")  # claims to allow, but `cancel` refuses

    sent, event = await ask(tmp_path, answerer=mislabelled)
    assert sent == "cancel"
    assert event.allowed is False
    assert event.refusal is not None

"""Every permission request captured from a real adapter, decided and answered as the table says.

Each of the 89 fixtures goes through the bridge's own ACP client (the SDK's schema, the
client's request building, `decide`, `answer`) in three boundaries: an owned sandbox made
by `Sandboxes` ({CWD}), a root handed over by the operator, and the same handed root with
ACP_ALLOW_EXECUTE. {OUTSIDE} is a sibling directory of the root and {WORKROOT} its parent.

The expectations are written out per fixture, the way a person reading the table in
docs/permissions.md would predict them; the same facts are then checked against what
INDEX.json says the real adapters did with each answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from acp.schema import AllowedOutcome, RequestPermissionRequest

from a2a_acp_bridge.acp.client import BridgeClient, SessionState
from a2a_acp_bridge.adapters import (
    CLAUDE,
    ExitEffect,
    TurnEffect,
    exit_plan_table,
    profile_for,
    refusal_effect,
)
from a2a_acp_bridge.boundary import Boundary, Sandboxes, handed_boundary
from a2a_acp_bridge.events import PermissionSeen
from a2a_acp_bridge.permissions import Rule, Supervision
from a2a_acp_bridge.turn import Turn
from tests.support import fixtures
from tests.support.fixtures import Places

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class Verdict:
    answer: str
    rule: Rule
    turn: TurnEffect = TurnEffect.CONTINUES


@dataclass(frozen=True)
class Expected:
    """The verdict in an owned sandbox, a handed root, and a handed root with allow_execute."""

    owned: Verdict
    handed: Verdict
    handed_execute: Verdict


def everywhere(verdict: Verdict) -> Expected:
    return Expected(verdict, verdict, verdict)


def unverifiable(allow: str, deny: str, turn: TurnEffect) -> Expected:
    return Expected(
        Verdict(allow, Rule.UNVERIFIABLE_OWNED_ROOT),
        Verdict(deny, Rule.UNVERIFIABLE_HANDED_ROOT, turn),
        Verdict(allow, Rule.UNVERIFIABLE_ALLOWED_BY_OPERATOR),
    )


CONTINUES, ENDS = TurnEffect.CONTINUES, TurnEffect.ENDS

# claude-agent-acp 0.101: allow-once / [allow-with-updates] / reject (the turn goes on).
CLAUDE_UNVERIFIABLE = unverifiable("allow-once", "reject", CONTINUES)
CLAUDE_EDIT_INSIDE = everywhere(Verdict("allow-once", Rule.CHANGE_INSIDE_ROOT))
CLAUDE_EDIT_OUTSIDE = everywhere(Verdict("reject", Rule.CHANGE_OUTSIDE_ROOT))
CLAUDE_READ = everywhere(Verdict("allow-once", Rule.READ_ONLY_KIND))
CLAUDE_PLAN_EXIT = everywhere(Verdict("exit-plan-default", Rule.MODE_KEEPS_SUPERVISION))
# codex-acp 2.6: allow_once / allow_for_session or accept_execpolicy_amendment / cancel,
# and cancel aborts the whole turn.
CODEX_UNVERIFIABLE = unverifiable("allow_once", "cancel", ENDS)
CODEX_EDIT_INSIDE = everywhere(Verdict("allow_once", Rule.CHANGE_INSIDE_ROOT))
CODEX_EDIT_OUTSIDE = everywhere(Verdict("cancel", Rule.CHANGE_OUTSIDE_ROOT, ENDS))
CODEX_PLAN_REVIEW = everywhere(Verdict("implement_plan", Rule.MODE_KEEPS_SUPERVISION))
# gemini-cli 0.61: proceed_always / proceed_once / cancel (the turn goes on).
GEMINI_UNVERIFIABLE = unverifiable("proceed_once", "cancel", CONTINUES)
GEMINI_EDIT_INSIDE = everywhere(Verdict("proceed_once", Rule.CHANGE_INSIDE_ROOT))
GEMINI_PLAN_EXIT = everywhere(Verdict("proceed_once", Rule.MODE_KEEPS_SUPERVISION))

EXPECTED: dict[str, Expected] = {
    "claude-agent-acp-0.101.0-acceptedits.json": CLAUDE_UNVERIFIABLE,  # python3 -c
    "claude-agent-acp-0.101.0-always.json": CLAUDE_UNVERIFIABLE,
    "claude-agent-acp-0.101.0-always_write.json": CLAUDE_EDIT_INSIDE,
    "claude-agent-acp-0.101.0-bash.json": CLAUDE_UNVERIFIABLE,  # touch in the root
    "claude-agent-acp-0.101.0-cancelled.json": CLAUDE_UNVERIFIABLE,
    # execute names an outside path: the table does not read an execute's locations.
    "claude-agent-acp-0.101.0-cat_outside.json": CLAUDE_UNVERIFIABLE,
    "claude-agent-acp-0.101.0-edit_inside.json": CLAUDE_EDIT_INSIDE,
    "claude-agent-acp-0.101.0-fetch.json": CLAUDE_UNVERIFIABLE,
    "claude-agent-acp-0.101.0-fetch_ext.json": CLAUDE_UNVERIFIABLE,
    "claude-agent-acp-0.101.0-invented.json": CLAUDE_UNVERIFIABLE,
    "claude-agent-acp-0.101.0-ls_outside.json": CLAUDE_UNVERIFIABLE,
    "claude-agent-acp-0.101.0-mv.json": CLAUDE_UNVERIFIABLE,  # mv is Bash: execute
    "claude-agent-acp-0.101.0-noauto-bash.json": CLAUDE_UNVERIFIABLE,
    "claude-agent-acp-0.101.0-noauto-dontask.json": CLAUDE_UNVERIFIABLE,
    "claude-agent-acp-0.101.0-noauto-fetch.json": CLAUDE_UNVERIFIABLE,
    "claude-agent-acp-0.101.0-noauto-fetch_ext.json": CLAUDE_UNVERIFIABLE,
    # without auto mode: exit-plan-default beside the accept-edits exits
    "claude-agent-acp-0.101.0-noauto-plan.json": CLAUDE_PLAN_EXIT,
    "claude-agent-acp-0.101.0-noauto-plan_clear.json": CLAUDE_PLAN_EXIT,
    "claude-agent-acp-0.101.0-noauto-plan_keep.json": CLAUDE_PLAN_EXIT,
    "claude-agent-acp-0.101.0-noauto-plan_then_write.json": CLAUDE_PLAN_EXIT,
    # with auto mode: exit-plan-default beside the auto exits
    "claude-agent-acp-0.101.0-plan.json": CLAUDE_PLAN_EXIT,
    "claude-agent-acp-0.101.0-plan_accept_edits.json": CLAUDE_PLAN_EXIT,
    "claude-agent-acp-0.101.0-plan_auto.json": CLAUDE_PLAN_EXIT,
    "claude-agent-acp-0.101.0-plan_cancelled.json": CLAUDE_PLAN_EXIT,
    "claude-agent-acp-0.101.0-plan_clear.json": CLAUDE_PLAN_EXIT,
    "claude-agent-acp-0.101.0-plan_clear_auto.json": CLAUDE_PLAN_EXIT,
    "claude-agent-acp-0.101.0-plan_default_write-2.json": CLAUDE_EDIT_INSIDE,
    "claude-agent-acp-0.101.0-plan_default_write.json": CLAUDE_PLAN_EXIT,
    "claude-agent-acp-0.101.0-plan_invented.json": CLAUDE_PLAN_EXIT,
    "claude-agent-acp-0.101.0-plan_keep.json": CLAUDE_PLAN_EXIT,
    "claude-agent-acp-0.101.0-plan_session_cancel.json": CLAUDE_PLAN_EXIT,
    "claude-agent-acp-0.101.0-plan_then_write-2.json": CLAUDE_EDIT_INSIDE,
    "claude-agent-acp-0.101.0-plan_then_write.json": CLAUDE_PLAN_EXIT,
    # a read outside the root is allowed, except of the bridge's own: {OUTSIDE} lies in
    # the sandboxes parent beside an owned sandbox, among the other conversations'
    "claude-agent-acp-0.101.0-read_outside.json": Expected(
        Verdict("reject", Rule.READ_PROTECTED),
        Verdict("allow-once", Rule.READ_ONLY_KIND),
        Verdict("allow-once", Rule.READ_ONLY_KIND),
    ),
    "claude-agent-acp-0.101.0-reject.json": CLAUDE_UNVERIFIABLE,
    "claude-agent-acp-0.101.0-rm.json": CLAUDE_UNVERIFIABLE,  # rm is Bash: execute
    "claude-agent-acp-0.101.0-sandbox-bash.json": CLAUDE_UNVERIFIABLE,
    # as root with IS_SANDBOX=1: exit-plan-bypass is offered too
    "claude-agent-acp-0.101.0-sandbox-plan.json": CLAUDE_PLAN_EXIT,
    "claude-agent-acp-0.101.0-sandbox-plan_bypass.json": CLAUDE_PLAN_EXIT,
    "claude-agent-acp-0.101.0-session_cancel.json": CLAUDE_UNVERIFIABLE,
    "claude-agent-acp-0.101.0-session_cancel_only.json": CLAUDE_UNVERIFIABLE,
    "claude-agent-acp-0.101.0-touch_outside.json": CLAUDE_UNVERIFIABLE,
    "claude-agent-acp-0.101.0-write-2.json": CLAUDE_EDIT_INSIDE,
    "claude-agent-acp-0.101.0-write.json": CLAUDE_EDIT_INSIDE,
    "claude-agent-acp-0.101.0-write_outside.json": CLAUDE_EDIT_OUTSIDE,
    "claude-agent-acp-0.101.0-write_outside_dotdot.json": CLAUDE_EDIT_OUTSIDE,
    "codex-acp-2.6.0-cx_always.json": CODEX_UNVERIFIABLE,
    "codex-acp-2.6.0-cx_always_amend.json": CODEX_UNVERIFIABLE,
    "codex-acp-2.6.0-cx_cancel.json": CODEX_UNVERIFIABLE,
    "codex-acp-2.6.0-cx_cancelled.json": CODEX_UNVERIFIABLE,
    "codex-acp-2.6.0-cx_decline.json": CODEX_UNVERIFIABLE,
    "codex-acp-2.6.0-cx_delete_ro.json": CODEX_EDIT_INSIDE,  # a patch deleting hello.txt
    "codex-acp-2.6.0-cx_exec.json": CODEX_UNVERIFIABLE,
    "codex-acp-2.6.0-cx_exec_redirect.json": CODEX_UNVERIFIABLE,
    "codex-acp-2.6.0-cx_exec_redirect_decline.json": CODEX_UNVERIFIABLE,
    "codex-acp-2.6.0-cx_exec_ro.json": CODEX_UNVERIFIABLE,
    "codex-acp-2.6.0-cx_invented.json": CODEX_UNVERIFIABLE,
    "codex-acp-2.6.0-cx_move_ro.json": CODEX_EDIT_INSIDE,  # the source; the diff has the rest
    "codex-acp-2.6.0-cx_patch_cancel.json": CODEX_EDIT_INSIDE,
    "codex-acp-2.6.0-cx_patch_dotdot_ro.json": CODEX_EDIT_OUTSIDE,  # ../outside-rel.txt
    "codex-acp-2.6.0-cx_patch_invented.json": CODEX_EDIT_INSIDE,
    "codex-acp-2.6.0-cx_patch_nontmp_ww.json": CODEX_EDIT_OUTSIDE,  # /proc/...
    "codex-acp-2.6.0-cx_patch_outside_ro.json": CODEX_EDIT_OUTSIDE,
    "codex-acp-2.6.0-cx_patch_ro-2.json": CODEX_EDIT_INSIDE,
    "codex-acp-2.6.0-cx_patch_ro.json": CODEX_EDIT_INSIDE,
    "codex-acp-2.6.0-cx_patch_session.json": CODEX_EDIT_INSIDE,
    "codex-acp-2.6.0-cx_plan.json": CODEX_PLAN_REVIEW,
    "codex-acp-2.6.0-cx_plan_cancelled.json": CODEX_PLAN_REVIEW,
    "codex-acp-2.6.0-cx_plan_invented.json": CODEX_PLAN_REVIEW,
    "codex-acp-2.6.0-cx_plan_revise.json": CODEX_PLAN_REVIEW,
    "codex-acp-2.6.0-cx_session_cancel.json": CODEX_UNVERIFIABLE,
    "codex-acp-2.6.0-cx_session_cancel_only.json": CODEX_UNVERIFIABLE,
    "gemini-cli-0.61.0-gm_always.json": GEMINI_UNVERIFIABLE,
    "gemini-cli-0.61.0-gm_cancelled.json": GEMINI_UNVERIFIABLE,
    "gemini-cli-0.61.0-gm_edit.json": GEMINI_EDIT_INSIDE,
    "gemini-cli-0.61.0-gm_edit_autoedit.json": GEMINI_EDIT_INSIDE,
    "gemini-cli-0.61.0-gm_fetch.json": GEMINI_UNVERIFIABLE,
    "gemini-cli-0.61.0-gm_invented.json": GEMINI_UNVERIFIABLE,
    # exit_plan_mode comes as kind `other`: still a plan exit, into the default mode
    "gemini-cli-0.61.0-gm_plan.json": GEMINI_PLAN_EXIT,
    "gemini-cli-0.61.0-gm_plan_invented.json": GEMINI_PLAN_EXIT,
    "gemini-cli-0.61.0-gm_plan_reject.json": GEMINI_PLAN_EXIT,
    "gemini-cli-0.61.0-gm_reject.json": GEMINI_UNVERIFIABLE,
    "gemini-cli-0.61.0-gm_session_cancel.json": GEMINI_UNVERIFIABLE,
    "gemini-cli-0.61.0-gm_session_cancel_only.json": GEMINI_UNVERIFIABLE,
    "gemini-cli-0.61.0-gm_shell.json": GEMINI_UNVERIFIABLE,
    "gemini-cli-0.61.0-gm_shell_autoedit.json": GEMINI_UNVERIFIABLE,
    "gemini-cli-0.61.0-gm_write.json": GEMINI_EDIT_INSIDE,
    "gemini-cli-0.61.0-trusted-gm_shell.json": GEMINI_UNVERIFIABLE,
    "gemini-cli-0.61.0-trusted-gm_shell_autoedit.json": GEMINI_UNVERIFIABLE,
}

BOUNDARIES = ("owned", "handed", "handed_execute")


def test_every_fixture_has_a_written_expectation_and_the_copy_is_complete() -> None:
    names = fixtures.fixture_names()
    assert len(names) == 89
    assert sorted(EXPECTED) == names
    assert sorted(entry["file"] for entry in fixtures.index()) == names


def make_boundary(tmp_path: Path, which: str) -> Boundary:
    if which == "owned":
        return Sandboxes(tmp_path / "sandboxes").create("fixture")
    project = tmp_path / "handed" / "project"
    project.mkdir(parents=True)
    return handed_boundary(project, allow_execute=which == "handed_execute")


@dataclass(frozen=True)
class Decided:
    answer: str
    event: PermissionSeen


async def decide_fixture(name: str, boundary: Boundary, home: Path) -> Decided:
    """Send the fixture through the bridge's ACP client, as an adapter would."""
    outside = boundary.root.parent / "outside"
    outside.mkdir(exist_ok=True)
    params = fixtures.load(name, Places(boundary.root, outside, home))
    request = RequestPermissionRequest.model_validate(params)
    profile = profile_for(fixtures.agent_name(name))
    assert profile is not None
    state = SessionState(
        boundary=boundary,
        supervision=Supervision(profile=profile, supervised_mode=profile.supervised_mode),
        turn=Turn("task", "ctx"),
    )
    client = BridgeClient("fixture")
    client.sessions[request.session_id] = state
    response = await client.request_permission(
        session_id=request.session_id, tool_call=request.tool_call, options=request.options
    )
    events = [e for e in state.sink.drain() if isinstance(e, PermissionSeen)]
    assert len(events) == 1
    outcome = response.outcome
    chosen = outcome.option_id if isinstance(outcome, AllowedOutcome) else "cancelled"
    return Decided(chosen, events[0])


@pytest.mark.parametrize("which", BOUNDARIES)
@pytest.mark.parametrize("name", sorted(EXPECTED), ids=lambda n: n.removesuffix(".json"))
async def test_each_fixture_is_decided_and_answered_as_the_table_says(
    tmp_path: Path, name: str, which: str
) -> None:
    expected: Verdict = getattr(EXPECTED[name], which)
    decided = await decide_fixture(name, make_boundary(tmp_path, which), tmp_path / "home")
    params = fixtures.load(name, Places(tmp_path, tmp_path, tmp_path))
    offered = [option["optionId"] for option in params["options"]]
    assert decided.answer in offered
    assert (decided.answer, decided.event.rule) == (expected.answer, expected.rule.value)
    refusal = decided.event.refusal
    if decided.event.allowed:
        assert refusal is None
    else:
        assert refusal is not None
        assert refusal.turn_effect == expected.turn.value
        assert refusal.answer == expected.answer
        assert [o for o, _ in refusal.offered] == offered


# --- the tables agree with what the real adapters did (INDEX.json) ---------------------


def _refusals_in_index() -> list[dict[str, object]]:
    """Runs where the harness refused with an offered reject option or `cancelled`, and the
    turn's end tells what that refusal did (session/cancel runs say nothing about it)."""
    picked = []
    for entry in fixtures.index():
        if "session_cancel" in entry["scenario"]:
            continue
        outcome = entry["our_reply"]["outcome"]
        offered = dict(entry["options"])
        if outcome["outcome"] == "selected" and not offered.get(outcome["optionId"], "").startswith(
            "reject"
        ):
            continue
        picked.append(entry)
    return picked


def _is_plan_exit(entry: dict[str, object]) -> bool:
    tool_call = entry["toolCall"]
    assert isinstance(tool_call, dict)
    return tool_call["kind"] == "switch_mode" or entry["scenario"] in (
        "gm_plan",
        "gm_plan_reject",
        "gm_plan_invented",
    )


REFUSALS = _refusals_in_index()


def test_the_index_holds_refusals_of_every_adapter_to_check_the_tables_against() -> None:
    adapters = {entry["adapter"] for entry in REFUSALS}
    assert adapters == set(fixtures.AGENT_NAME_OF_PACKAGE)
    assert len(REFUSALS) >= 10


@pytest.mark.parametrize("entry", REFUSALS, ids=lambda e: str(e["file"]).removesuffix(".json"))
def test_what_a_refusal_does_to_the_turn_matches_what_the_adapter_did(
    entry: dict[str, object],
) -> None:
    profile = profile_for(fixtures.AGENT_NAME_OF_PACKAGE[str(entry["adapter"])])
    outcome = entry["our_reply"]
    assert isinstance(outcome, dict)
    option_id = outcome["outcome"].get("optionId")
    result = entry["prompt_result"]
    assert isinstance(result, dict)
    observed = TurnEffect.ENDS if result["stopReason"] == "cancelled" else TurnEffect.CONTINUES
    assert refusal_effect(profile, option_id, leaving_plan=_is_plan_exit(entry)) is observed


def _claude_plan_exits_with_evidence() -> list[tuple[str, str, ExitEffect]]:
    """Claude runs that left plan mode through an offered option and then wrote hello.txt:
    if the write was asked about (a `-2` fixture follows) the exit kept supervision,
    otherwise it had dropped it."""
    names = set(fixtures.fixture_names())
    found = []
    for entry in fixtures.index():
        if entry["toolCall"]["kind"] != "switch_mode" or not entry["adapter"].endswith(
            "claude-agent-acp"
        ):
            continue
        outcome = entry["our_reply"]["outcome"]
        offered = {oid for oid, _ in entry["options"]}
        if outcome.get("optionId") not in offered or "hello.txt" not in entry["files_in_cwd_after"]:
            continue
        asked = entry["file"].replace(".json", "-2.json") in names
        effect = ExitEffect.KEEPS_SUPERVISION if asked else ExitEffect.DROPS_SUPERVISION
        found.append((entry["file"], outcome["optionId"], effect))
    return found


PLAN_EXITS = _claude_plan_exits_with_evidence()


def test_the_index_shows_claude_plan_exits_that_kept_and_that_dropped_supervision() -> None:
    effects = {effect for _, _, effect in PLAN_EXITS}
    assert effects == {ExitEffect.KEEPS_SUPERVISION, ExitEffect.DROPS_SUPERVISION}


@pytest.mark.parametrize(("name", "option_id", "effect"), PLAN_EXITS, ids=lambda v: str(v))
def test_claude_plan_exit_effects_match_whether_the_next_write_was_asked_about(
    name: str, option_id: str, effect: ExitEffect
) -> None:
    assert exit_plan_table(CLAUDE)[option_id] is effect

"""The classifier's table, row by row, and every entry of the adapters' option tables.

`decide` and `answer` are pure: these tests call them directly, with real directories for
the roots (containment resolves paths against the filesystem).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from a2a_acp_bridge.adapters import (
    ANY_OTHER,
    CLAUDE,
    CLAUDE_CODE,
    CLAUDE_ZED,
    CODEX,
    GEMINI,
    PROFILES,
    AdapterProfile,
    ExitEffect,
    TurnEffect,
    profile_for,
)
from a2a_acp_bridge.boundary import Boundary, Sandboxes, handed_boundary
from a2a_acp_bridge.permissions import (
    Answer,
    Decision,
    PermissionOption,
    PermissionRequest,
    Rule,
    Supervision,
    answer,
    decide,
    is_plan_exit_tool,
    refusal_record,
)

CLAUDE_SUPERVISION = Supervision(CLAUDE, "default")
CODEX_SUPERVISION = Supervision(CODEX, "read-only")
GEMINI_SUPERVISION = Supervision(GEMINI, "default")
PLAIN = [
    PermissionOption("allow-once", "allow_once"),
    PermissionOption("allow-with-updates", "allow_always"),
    PermissionOption("reject", "reject_once"),
]


def options(*pairs: tuple[str, str]) -> tuple[PermissionOption, ...]:
    return tuple(PermissionOption(oid, kind) for oid, kind in pairs)


@dataclass(frozen=True)
class Roots:
    owned: Boundary
    handed: Boundary
    handed_execute: Boundary

    def of(self, which: str) -> Boundary:
        boundary: Boundary = getattr(self, which)
        return boundary


@pytest.fixture
def roots(tmp_path: Path) -> Roots:
    project = tmp_path / "project"
    project.mkdir()
    return Roots(
        owned=Sandboxes(tmp_path / "sandboxes").create("test"),
        handed=handed_boundary(project, allow_execute=False),
        handed_execute=handed_boundary(project, allow_execute=True),
    )


def verdict(
    roots: Roots,
    which: str,
    kind: str | None,
    locations: Sequence[str] = (),
    raw_input: Any = None,
    supervision: Supervision = CLAUDE_SUPERVISION,
) -> tuple[bool, Rule]:
    boundary = roots.of(which)
    located = tuple(
        p.replace("{ROOT}", str(boundary.root)).replace("{OUT}", str(boundary.root.parent))
        for p in locations
    )
    request = PermissionRequest("call-1", "a title", kind, located, raw_input, tuple(PLAIN))
    decision = decide(request, boundary, supervision)
    return decision.allow, decision.rule


# --- the table, row by row ---------------------------------------------------------------

ROWS = [
    # read, search, think: allow (paths are checked only against the read floor, even
    # outside the root; an owned sandbox's parent holds the other conversations' sandboxes)
    *[
        pytest.param(
            kind,
            ["{OUT}/../elsewhere/secret.txt"],
            which,
            True,
            Rule.READ_ONLY_KIND,
            id=f"{kind}-outside-the-root-is-allowed-in-{which}",
        )
        for kind in ("read", "search", "think")
        for which in ("owned", "handed")
    ],
    *[
        pytest.param(
            kind,
            ["{OUT}/elsewhere/secret.txt"],
            "owned",
            False,
            Rule.READ_PROTECTED,
            id=f"{kind}-beside-an-owned-sandbox-is-refused",
        )
        for kind in ("read", "search", "think")
    ],
    # edit, delete, move with locations: allow only if every location is inside the root
    *[
        pytest.param(
            kind,
            ["{ROOT}/a.txt", "b/c.txt"],
            which,
            True,
            Rule.CHANGE_INSIDE_ROOT,
            id=f"{kind}-inside-is-allowed-in-{which}",
        )
        for kind in ("edit", "delete", "move")
        for which in ("owned", "handed")
    ],
    *[
        pytest.param(
            kind,
            ["{ROOT}/a.txt", "{OUT}/x.txt"],
            which,
            False,
            Rule.CHANGE_OUTSIDE_ROOT,
            id=f"{kind}-with-one-location-outside-is-refused-in-{which}",
        )
        for kind in ("edit", "delete", "move")
        for which in ("owned", "handed", "handed_execute")
    ],
    # edit, delete, move without locations: allow only if the root is owned
    *[
        pytest.param(
            kind,
            [],
            "owned",
            True,
            Rule.UNLOCATED_CHANGE_OWNED_ROOT,
            id=f"{kind}-without-locations-is-allowed-in-an-owned-sandbox",
        )
        for kind in ("edit", "delete", "move")
    ],
    *[
        pytest.param(
            kind,
            [],
            which,
            False,
            Rule.UNLOCATED_CHANGE_HANDED_ROOT,
            id=f"{kind}-without-locations-is-refused-in-{which}",
        )
        for kind in ("edit", "delete", "move")
        for which in ("handed", "handed_execute")
    ],
    # execute, fetch, other, or no kind: allow only if owned, or allow_execute
    *[
        pytest.param(
            kind,
            ["{OUT}/x"],
            "owned",
            True,
            Rule.UNVERIFIABLE_OWNED_ROOT,
            id=f"{kind or 'no-kind'}-is-allowed-in-an-owned-sandbox",
        )
        for kind in ("execute", "fetch", "other", None)
    ],
    *[
        pytest.param(
            kind,
            ["{ROOT}/x"],
            "handed",
            False,
            Rule.UNVERIFIABLE_HANDED_ROOT,
            id=f"{kind or 'no-kind'}-is-refused-in-a-handed-root",
        )
        for kind in ("execute", "fetch", "other", None)
    ],
    *[
        pytest.param(
            kind,
            [],
            "handed_execute",
            True,
            Rule.UNVERIFIABLE_ALLOWED_BY_OPERATOR,
            id=f"{kind or 'no-kind'}-is-allowed-in-a-handed-root-with-allow-execute",
        )
        for kind in ("execute", "fetch", "other", None)
    ],
]


@pytest.mark.parametrize(("kind", "locations", "which", "allowed", "rule"), ROWS)
def test_each_row_of_the_table_decides_as_written(
    roots: Roots, kind: str | None, locations: list[str], which: str, allowed: bool, rule: Rule
) -> None:
    assert verdict(roots, which, kind, locations) == (allowed, rule)


@pytest.mark.parametrize("which", ["owned", "handed"])
def test_a_switch_mode_that_keeps_supervision_is_allowed_whoever_owns_the_root(
    roots: Roots, which: str
) -> None:
    request = PermissionRequest(
        "toolu_1",
        "Approve Plan",
        "switch_mode",
        raw_input={"plan": "1. do it"},
        options=options(
            ("exit-plan-auto", "allow_always"),
            ("exit-plan-default", "allow_once"),
            ("reject", "reject_once"),
        ),
    )
    decision = decide(request, roots.of(which), CLAUDE_SUPERVISION)
    assert (decision.allow, decision.rule) == (True, Rule.MODE_KEEPS_SUPERVISION)
    assert answer(decision, request.options, CLAUDE_SUPERVISION).option_id == "exit-plan-default"


@pytest.mark.parametrize("which", ["owned", "handed_execute"])
def test_owning_the_root_or_allow_execute_grants_no_switch_that_drops_supervision(
    roots: Roots, which: str
) -> None:
    request = PermissionRequest(
        "toolu_1",
        "Approve Plan",
        "switch_mode",
        options=options(
            ("exit-plan-clear-auto", "allow_always"),
            ("exit-plan-auto", "allow_once"),
            ("reject", "reject_once"),
        ),
    )
    decision = decide(request, roots.of(which), CLAUDE_SUPERVISION)
    assert (decision.allow, decision.rule) == (False, Rule.MODE_DROPS_SUPERVISION)
    assert "exit-plan-clear-auto, exit-plan-auto" in decision.reason
    reply = answer(decision, request.options, CLAUDE_SUPERVISION)
    assert (reply.option_id, reply.turn_effect) == ("reject", TurnEffect.ENDS)


def test_an_unknown_exit_id_is_refused_rather_than_guessed(roots: Roots) -> None:
    request = PermissionRequest(
        "toolu_1",
        "Approve Plan",
        "switch_mode",
        options=options(("exit-plan-to-somewhere-new", "allow_once"), ("reject", "reject_once")),
    )
    decision = decide(request, roots.owned, CLAUDE_SUPERVISION)
    assert (decision.allow, decision.rule) == (False, Rule.MODE_UNKNOWN)
    assert answer(decision, request.options, CLAUDE_SUPERVISION).option_id == "reject"


def test_an_unknown_exit_id_beside_a_keeping_one_is_never_chosen(roots: Roots) -> None:
    request = PermissionRequest(
        "toolu_1",
        "Approve Plan",
        "switch_mode",
        options=options(
            ("exit-plan-to-somewhere-new", "allow_once"),
            ("exit-plan-default", "allow_always"),
            ("reject", "reject_once"),
        ),
    )
    decision = decide(request, roots.owned, CLAUDE_SUPERVISION)
    assert answer(decision, request.options, CLAUDE_SUPERVISION).option_id == "exit-plan-default"


def test_no_switch_is_judged_when_the_supervised_mode_is_unknown(roots: Roots) -> None:
    request = PermissionRequest(
        "t", "Approve Plan", "switch_mode", options=options(("exit-plan-default", "allow_once"))
    )
    decision = decide(request, roots.owned, Supervision(None, None))
    assert (decision.allow, decision.rule) == (False, Rule.MODE_UNKNOWN)


TARGET_CASES = [
    pytest.param({"modeId": "bypassPermissions"}, False, None, id="modeId-elevating-is-refused"),
    pytest.param({"mode": "acceptEdits"}, False, None, id="mode-elevating-is-refused"),
    pytest.param({"currentModeId": "auto"}, False, None, id="currentModeId-elevating-is-refused"),
    pytest.param({"modeId": "default"}, True, "exit-plan-default", id="the-supervised-mode"),
    pytest.param({"modeId": "plan"}, True, "exit-plan-default", id="a-read-only-mode"),
    pytest.param({"modeId": "auto", "mode": "default"}, False, None, id="modeId-wins-over-mode"),
]


@pytest.mark.parametrize(("raw_input", "allowed", "chosen"), TARGET_CASES)
def test_an_explicit_target_in_raw_input_wins_over_the_options(
    roots: Roots, raw_input: dict[str, str], allowed: bool, chosen: str | None
) -> None:
    request = PermissionRequest(
        "t",
        "Switch mode",
        "switch_mode",
        raw_input=raw_input,
        options=options(
            ("exit-plan-default", "allow_once"),
            ("exit-plan-auto", "allow_always"),
            ("reject", "reject_once"),
        ),
    )
    decision = decide(request, roots.owned, CLAUDE_SUPERVISION)
    reply = answer(decision, request.options, CLAUDE_SUPERVISION)
    assert decision.allow is allowed
    assert reply.option_id == (chosen if allowed else "reject")


def test_a_named_target_never_unlocks_a_single_unknown_yes(roots: Roots) -> None:
    """The target is the model's word: only an option the table knows to keep supervision
    may answer it (this single "yes" used to be taken)."""
    request = PermissionRequest(
        "t",
        "Switch mode",
        "switch_mode",
        raw_input={"modeId": "default"},
        options=options(("yes", "allow_once"), ("no", "reject_once")),
    )
    decision = decide(request, roots.handed, CLAUDE_SUPERVISION)
    assert (decision.allow, decision.rule) == (False, Rule.MODE_UNKNOWN)
    assert answer(decision, request.options, CLAUDE_SUPERVISION).option_id == "no"


def test_a_switch_to_a_named_mode_with_several_unknown_yeses_is_refused(roots: Roots) -> None:
    request = PermissionRequest(
        "t",
        "Switch mode",
        "switch_mode",
        raw_input={"modeId": "default"},
        options=options(
            ("yes", "allow_once"), ("yes-and-more", "allow_always"), ("no", "reject_once")
        ),
    )
    decision = decide(request, roots.owned, CLAUDE_SUPERVISION)
    assert (decision.allow, decision.rule) == (False, Rule.MODE_UNKNOWN)


# --- containment, through decide --------------------------------------------------------

CONTAINMENT = [
    pytest.param("notes.txt", True, id="relative-is-taken-against-the-root"),
    pytest.param("{ROOT}/deep/new/dir/file", True, id="absolute-inside-not-yet-existing"),
    pytest.param("{ROOT}", True, id="the-root-itself"),
    pytest.param("{ROOT}/..notes", True, id="dotdot-notes-is-a-child"),
    pytest.param("..notes/x", True, id="relative-dotdot-notes-is-a-child"),
    pytest.param("{ROOT}/a/../b.txt", True, id="a-climb-that-stays-inside"),
    pytest.param("{ROOT}/missing/../../escape.txt", False, id="a-climb-through-a-missing-dir"),
    pytest.param("../escape.txt", False, id="relative-climb-out"),
    pytest.param("a/../../escape.txt", False, id="relative-climb-out-in-two-steps"),
    pytest.param("{ROOT}/../escape.txt", False, id="absolute-climb-out"),
    pytest.param("{ROOT}2/x.txt", False, id="a-sibling-sharing-the-prefix"),
    pytest.param("/etc/passwd", False, id="an-absolute-path-elsewhere"),
    pytest.param("", False, id="empty"),
    pytest.param("a\x00b", False, id="a-nul-byte"),
    pytest.param("~/.bashrc", False, id="a-tilde-a-tool-may-expand"),
    pytest.param("file:///etc/passwd", False, id="a-uri"),
    pytest.param("{ROOT}/" + "x" * 4000, True, id="a-very-long-name-inside"),
    pytest.param("{ROOT}/" + "x" * 5000, False, id="a-path-over-4096-bytes"),
]


@pytest.mark.parametrize(("path", "inside"), CONTAINMENT)
def test_an_edit_is_allowed_only_where_its_path_lands_inside_the_root(
    roots: Roots, path: str, inside: bool
) -> None:
    for which in ("owned", "handed"):
        allowed, rule = verdict(roots, which, "edit", [path])
        assert allowed is inside
        assert rule is (Rule.CHANGE_INSIDE_ROOT if inside else Rule.CHANGE_OUTSIDE_ROOT)


@pytest.mark.parametrize("bad", [None, 42, b"bytes", ["a"]], ids=repr)
def test_a_location_that_is_not_text_is_refused(roots: Roots, bad: object) -> None:
    request = PermissionRequest("t", None, "edit", (bad,))  # type: ignore[arg-type]
    assert decide(request, roots.owned, CLAUDE_SUPERVISION).allow is False


RAW_INPUTS = [
    pytest.param({"file_path": "{OUT}/x.txt"}, False, id="claude-file-path-outside"),
    pytest.param({"file_path": "{ROOT}/x.txt"}, True, id="claude-file-path-inside"),
    pytest.param({"notebook_path": "{OUT}/n.ipynb"}, False, id="claude-notebook-path-outside"),
    pytest.param(
        {"changes": {"{ROOT}/a.txt": {"type": "update", "move_path": "{OUT}/a.txt"}}},
        False,
        id="codex-0.16-move-path-outside",
    ),
    pytest.param(
        {"changes": {"{OUT}/b.txt": {"type": "add", "content": "x"}}},
        False,
        id="codex-0.16-changed-path-outside",
    ),
    pytest.param(
        {"changes": {"{ROOT}/a.txt": {"type": "update", "move_path": "{ROOT}/b.txt"}}},
        True,
        id="codex-0.16-move-inside",
    ),
]


@pytest.mark.parametrize(("raw_input", "inside"), RAW_INPUTS)
def test_paths_named_in_raw_input_are_checked_on_top_of_the_locations(
    roots: Roots, raw_input: dict[str, Any], inside: bool
) -> None:
    root = str(roots.handed.root)
    out = str(roots.handed.root.parent)

    def fill(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace("{ROOT}", root).replace("{OUT}", out)
        if isinstance(value, dict):
            return {fill(k): fill(v) for k, v in value.items()}
        return value

    allowed, _ = verdict(roots, "handed", "edit", ["{ROOT}/a.txt"], raw_input=fill(raw_input))
    assert allowed is inside


def test_raw_input_paths_do_not_turn_an_unlocated_edit_into_a_located_one(roots: Roots) -> None:
    raw = {"file_path": str(roots.handed.root / "x.txt")}
    assert verdict(roots, "handed", "edit", [], raw_input=raw) == (
        False,
        Rule.UNLOCATED_CHANGE_HANDED_ROOT,
    )


# --- the owned sandbox must still be the one the bridge made ----------------------------


def test_a_deleted_sandbox_grants_nothing_its_ownership_granted(tmp_path: Path) -> None:
    boundary = Sandboxes(tmp_path / "sandboxes").create("ctx")
    boundary.root.rmdir()
    for kind, rule in (("execute", Rule.SANDBOX_NOT_INTACT), ("edit", Rule.SANDBOX_NOT_INTACT)):
        decision = decide(PermissionRequest("t", None, kind), boundary, CLAUDE_SUPERVISION)
        assert (decision.allow, decision.rule) == (False, rule)


def test_a_sandbox_replaced_by_a_symlink_is_owned_no_more(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    boundary = Sandboxes(tmp_path / "sandboxes").create("ctx")
    boundary.root.rmdir()
    boundary.root.symlink_to(elsewhere)
    execute = decide(PermissionRequest("t", None, "execute"), boundary, CLAUDE_SUPERVISION)
    assert (execute.allow, execute.rule) == (False, Rule.SANDBOX_NOT_INTACT)
    edit = PermissionRequest("t", None, "edit", (str(boundary.root / "x.txt"),))
    assert decide(edit, boundary, CLAUDE_SUPERVISION).rule is Rule.CHANGE_OUTSIDE_ROOT


def test_allow_execute_still_applies_to_a_sandbox_that_is_not_intact(tmp_path: Path) -> None:
    boundary = Sandboxes(tmp_path / "sandboxes", allow_execute=True).create("ctx")
    boundary.root.rmdir()
    decision = decide(PermissionRequest("t", None, "execute"), boundary, CLAUDE_SUPERVISION)
    assert (decision.allow, decision.rule) == (True, Rule.UNVERIFIABLE_ALLOWED_BY_OPERATOR)


# --- gemini's plan exit, kind other -------------------------------------------------------

GEMINI_PLAN_OPTIONS = options(("proceed_once", "allow_once"), ("cancel", "reject_once"))


def test_gemini_exit_plan_mode_of_kind_other_is_a_supervision_keeping_switch(
    roots: Roots,
) -> None:
    request = PermissionRequest(
        "exit_plan_mode__exit_plan_mode_1796044361373_0",
        "Requesting plan approval for: /home/u/.gemini/tmp/plans/plan.md",
        "other",
        options=GEMINI_PLAN_OPTIONS,
    )
    decision = decide(request, roots.handed, GEMINI_SUPERVISION)
    assert (decision.allow, decision.rule, decision.leaving_plan) == (
        True,
        Rule.MODE_KEEPS_SUPERVISION,
        True,
    )
    assert answer(decision, request.options, GEMINI_SUPERVISION).option_id == "proceed_once"


NOT_PLAN_EXITS = [
    pytest.param(
        "run_shell_command-1",
        "other",
        GEMINI_PLAN_OPTIONS,
        GEMINI_SUPERVISION,
        id="another-tool-of-kind-other",
    ),
    pytest.param(
        "exit_plan_mode_1",
        "execute",
        GEMINI_PLAN_OPTIONS,
        GEMINI_SUPERVISION,
        id="the-plan-exit-name-on-an-execute",
    ),
    pytest.param(
        "exit_plan_mode_1",
        "other",
        options(
            ("proceed_always", "allow_always"),
            *((o.option_id or "", o.kind or "") for o in GEMINI_PLAN_OPTIONS),
        ),
        GEMINI_SUPERVISION,
        id="offering-more-than-the-plan-exit-ids",
    ),
    pytest.param(
        "exit_plan_mode_1",
        "other",
        GEMINI_PLAN_OPTIONS,
        CLAUDE_SUPERVISION,
        id="the-gemini-name-from-another-adapter",
    ),
    pytest.param("exit_plan_mode_1", "other", (), GEMINI_SUPERVISION, id="offering-nothing"),
]


@pytest.mark.parametrize(("call_id", "kind", "offered", "supervision"), NOT_PLAN_EXITS)
def test_only_the_exact_shape_of_geminis_plan_exit_counts_as_one(
    roots: Roots,
    call_id: str,
    kind: str,
    offered: tuple[PermissionOption, ...],
    supervision: Supervision,
) -> None:
    request = PermissionRequest(call_id, "Requesting plan approval for: x", kind, options=offered)
    assert not is_plan_exit_tool(request, supervision)
    decision = decide(request, roots.handed, supervision)
    assert (decision.allow, decision.rule) == (False, Rule.UNVERIFIABLE_HANDED_ROOT)


# --- every entry of the option tables ---------------------------------------------------


def _exit_entries() -> list[Any]:
    return [
        pytest.param(profile, option_id, effect, id=f"{profile.family}-{name}-{option_id}")
        for profile, name in ((CLAUDE, "0.101"), (CODEX, "2.6"), (GEMINI, "0.61"))
        for option_id, effect in profile.exit_plan_options.items()
    ]


def _plan_request(
    profile: AdapterProfile, offered: tuple[PermissionOption, ...]
) -> PermissionRequest:
    if profile is GEMINI:
        return PermissionRequest(
            "exit_plan_mode__1", "Requesting plan approval", "other", options=offered
        )
    return PermissionRequest("toolu_1", "Approve Plan", "switch_mode", options=offered)


@pytest.mark.parametrize(("profile", "option_id", "effect"), _exit_entries())
def test_each_plan_exit_option_is_chosen_only_if_it_keeps_supervision(
    roots: Roots, profile: AdapterProfile, option_id: str, effect: ExitEffect
) -> None:
    supervision = Supervision(profile, profile.supervised_mode)
    reject_id = next(
        oid for oid, e in profile.exit_plan_options.items() if e is ExitEffect.STAYS_IN_PLAN
    )
    if effect is ExitEffect.STAYS_IN_PLAN:
        offered = options((option_id, "reject_once"))
        decision = decide(_plan_request(profile, offered), roots.owned, supervision)
        assert decision.allow is False
        assert answer(decision, offered, supervision).option_id == option_id
        return
    offered = options((option_id, "allow_once"), (reject_id, "reject_once"))
    decision = decide(_plan_request(profile, offered), roots.owned, supervision)
    reply = answer(decision, offered, supervision)
    keeps = effect is ExitEffect.KEEPS_SUPERVISION
    assert decision.allow is keeps
    assert reply.option_id == (option_id if keeps else reject_id)


def _reject_entries() -> list[Any]:
    return [
        pytest.param(
            profile,
            option_id,
            effect,
            id=f"{profile.family}-{sorted(profile.agent_names)[0]}-{option_id}",
        )
        for profile in (CLAUDE, CLAUDE_ZED, CLAUDE_CODE, CODEX, GEMINI)
        for option_id, effect in profile.reject_effects.items()
    ]


@pytest.mark.parametrize(("profile", "option_id", "effect"), _reject_entries())
def test_each_refusal_entry_is_what_the_caller_is_told_about_the_turn(
    roots: Roots, profile: AdapterProfile, option_id: str, effect: TurnEffect
) -> None:
    supervision = Supervision(profile, profile.supervised_mode)
    reject_id = "some-other-reject" if option_id == ANY_OTHER else option_id
    offered = options(("allow", "allow_once"), (reject_id, "reject_once"))
    request = PermissionRequest("t", "Run", "execute", options=offered)
    decision = decide(request, roots.handed, supervision)
    reply = answer(decision, offered, supervision)
    assert (reply.option_id, reply.turn_effect) == (reject_id, effect)


@pytest.mark.parametrize(
    "profile",
    [CLAUDE, CLAUDE_ZED, CLAUDE_CODE, CODEX, GEMINI],
    ids=lambda p: sorted(p.agent_names)[0],
)
def test_answering_cancelled_is_recorded_with_the_adapters_measured_effect(
    roots: Roots, profile: AdapterProfile
) -> None:
    supervision = Supervision(profile, profile.supervised_mode)
    offered = options(("allow", "allow_once"))
    decision = decide(
        PermissionRequest("t", "Run", "execute", options=offered), roots.handed, supervision
    )
    reply = answer(decision, offered, supervision)
    assert (reply.option_id, reply.turn_effect) == (None, profile.cancelled_effect)


@pytest.mark.parametrize(
    ("profile", "reject_id", "effect"),
    [
        pytest.param(CLAUDE, "reject", TurnEffect.ENDS, id="claude-0.101-keep-planning-interrupts"),
        pytest.param(
            CLAUDE_ZED, "plan", TurnEffect.CONTINUES, id="claude-0.23-keep-planning-goes-on"
        ),
        pytest.param(CLAUDE_CODE, "plan", TurnEffect.ENDS, id="claude-code-0.16-interrupts"),
        pytest.param(CODEX, "revise_plan", TurnEffect.CONTINUES, id="codex-revise-plan-goes-on"),
        pytest.param(GEMINI, "cancel", TurnEffect.CONTINUES, id="gemini-cancel-goes-on"),
    ],
)
def test_refusing_a_plan_exit_is_recorded_with_its_own_effect(
    roots: Roots, profile: AdapterProfile, reject_id: str, effect: TurnEffect
) -> None:
    offered = options(("exit-plan-auto", "allow_once"), (reject_id, "reject_once"))
    if profile is GEMINI:
        offered = options((reject_id, "reject_once"))
    supervision = Supervision(profile, profile.supervised_mode)
    request = _plan_request(profile, offered)
    decision = decide(request, roots.owned, supervision)
    assert decision.allow is False
    assert decision.leaving_plan is True
    reply = answer(decision, offered, supervision)
    assert (reply.option_id, reply.turn_effect) == (reject_id, effect)


def _persistent_entries() -> list[Any]:
    return [
        pytest.param(profile, option_id, id=f"{profile.family}-{option_id}")
        for profile in PROFILES
        for option_id in sorted(profile.persistent_allow_options)
    ]


@pytest.mark.parametrize(("profile", "option_id"), _persistent_entries())
def test_an_always_answer_that_writes_to_disk_is_the_last_allow_chosen(
    roots: Roots, profile: AdapterProfile, option_id: str
) -> None:
    supervision = Supervision(profile, profile.supervised_mode)
    decision = Decision(True, Rule.UNVERIFIABLE_OWNED_ROOT, "owned")
    persistent_first = options((option_id, "allow_always"), ("for-the-session", "allow_always"))
    assert answer(decision, persistent_first, supervision).option_id == "for-the-session"
    alone = options((option_id, "allow_always"), ("no", "reject_once"))
    assert answer(decision, alone, supervision).option_id == option_id


def test_the_real_agent_names_find_their_profiles() -> None:
    assert profile_for("@agentclientprotocol/claude-agent-acp") is CLAUDE
    assert profile_for("@zed-industries/claude-agent-acp") is CLAUDE_ZED
    assert profile_for("@zed-industries/claude-code-acp") is CLAUDE_CODE
    assert profile_for("@agentclientprotocol/codex-acp") is CODEX
    assert profile_for("codex-acp") is CODEX
    assert profile_for("gemini-cli") is GEMINI
    assert profile_for("@google/gemini-cli") is None  # the npm package, not the agentInfo
    assert profile_for("claude-but-not-really") is None
    assert profile_for(None) is None


# --- answer ------------------------------------------------------------------------------

ALLOW = Decision(True, Rule.READ_ONLY_KIND, "fine")
DENY = Decision(False, Rule.UNVERIFIABLE_HANDED_ROOT, "no")

ANSWERS = [
    pytest.param(
        ALLOW,
        CLAUDE_SUPERVISION,
        options(("a", "allow_always"), ("o", "allow_once"), ("r", "reject_once")),
        "o",
        id="allow-prefers-allow-once-wherever-it-is",
    ),
    pytest.param(
        ALLOW,
        CLAUDE_SUPERVISION,
        options(("r", "reject_once"), ("a", "allow_always")),
        "a",
        id="allow-takes-allow-always-when-alone",
    ),
    pytest.param(
        ALLOW,
        CLAUDE_SUPERVISION,
        options(("r", "reject_once"), ("rr", "reject_always")),
        None,
        id="allow-with-no-allow-option-is-cancelled",
    ),
    pytest.param(
        ALLOW,
        CLAUDE_SUPERVISION,
        options(("exit-plan-auto", "allow_once"), ("r", "reject_once")),
        None,
        id="allow-never-takes-an-option-known-to-elevate",
    ),
    pytest.param(
        DENY,
        CODEX_SUPERVISION,
        options(
            ("allow_once", "allow_once"), ("cancel", "reject_once"), ("decline", "reject_once")
        ),
        "decline",
        id="codex-deny-prefers-decline-over-cancel",
    ),
    pytest.param(
        DENY,
        CODEX_SUPERVISION,
        options(("approved", "allow_once"), ("abort", "reject_once"), ("denied", "reject_once")),
        "denied",
        id="codex-0.16-deny-prefers-denied-over-abort",
    ),
    pytest.param(
        DENY,
        Supervision(),
        options(("ok", "allow_once"), ("cancel", "reject_once"), ("decline", "reject_once")),
        "decline",
        id="unknown-agent-deny-still-prefers-decline",
    ),
    pytest.param(
        DENY,
        Supervision(),
        options(("abort", "reject_once"), ("no", "reject_once")),
        "no",
        id="unknown-agent-deny-avoids-abort",
    ),
    pytest.param(
        DENY,
        CLAUDE_SUPERVISION,
        options(("ra", "reject_always"), ("ro", "reject_once")),
        "ro",
        id="deny-prefers-reject-once-over-reject-always",
    ),
    pytest.param(
        DENY,
        CLAUDE_SUPERVISION,
        options(("ra", "reject_always"), ("a", "allow_once")),
        "ra",
        id="deny-takes-reject-always-when-alone",
    ),
    pytest.param(
        DENY,
        CLAUDE_SUPERVISION,
        options(("acceptEdits", "reject_once"), ("exit-plan-auto", "reject_always")),
        None,
        id="deny-never-answers-with-an-id-that-leaves-plan-mode-labelled-reject",
    ),
    pytest.param(
        DENY,
        CLAUDE_SUPERVISION,
        options(("a", "allow_once"), ("b", "allow_always")),
        None,
        id="deny-with-no-reject-option-is-cancelled",
    ),
    pytest.param(DENY, CLAUDE_SUPERVISION, (), None, id="nothing-offered-is-cancelled"),
    pytest.param(
        ALLOW,
        CLAUDE_SUPERVISION,
        (PermissionOption(None, "allow_once"),),
        None,
        id="malformed-a-missing-id-is-cancelled",
    ),
    pytest.param(
        ALLOW,
        CLAUDE_SUPERVISION,
        options(("", "allow_once")),
        None,
        id="malformed-an-empty-id-is-cancelled",
    ),
    pytest.param(
        ALLOW,
        CLAUDE_SUPERVISION,
        options(("a", "allow_once"), ("a", "reject_once")),
        None,
        id="malformed-a-duplicate-id-is-cancelled",
    ),
    pytest.param(
        DENY,
        CLAUDE_SUPERVISION,
        options(("a", "allow_once"), ("r", "refuse_politely")),
        None,
        id="malformed-an-unknown-kind-is-cancelled",
    ),
    pytest.param(
        DENY,
        CLAUDE_SUPERVISION,
        (PermissionOption("r", None),),
        None,
        id="malformed-a-missing-kind-is-cancelled",
    ),
    pytest.param(
        Decision(True, Rule.MODE_KEEPS_SUPERVISION, "k", preferred_option="exit-plan-default"),
        CLAUDE_SUPERVISION,
        options(("allow-once", "allow_once"), ("reject", "reject_once")),
        None,
        id="a-preferred-option-not-offered-is-cancelled-not-replaced",
    ),
]


@pytest.mark.parametrize(("decision", "supervision", "offered", "chosen"), ANSWERS)
def test_answer_picks_by_the_options_effect_and_never_invents(
    decision: Decision,
    supervision: Supervision,
    offered: tuple[PermissionOption, ...],
    chosen: str | None,
) -> None:
    reply: Answer = answer(decision, offered, supervision)
    assert reply.option_id == chosen
    if chosen is not None:
        assert chosen in [o.option_id for o in offered]
        assert reply.allows is decision.allow


def test_a_refusal_names_the_action_by_its_title_else_by_its_tool_call_id() -> None:
    offered = options(("allow", "allow_once"), ("no", "reject_once"))
    decision = Decision(False, Rule.UNVERIFIABLE_HANDED_ROOT, "not here")
    titled = PermissionRequest("call-7", "  rm  -rf\n build ", "execute", options=offered)
    untitled = PermissionRequest("call-8", None, "execute", ("x",), options=offered)
    for request, label in ((titled, "rm -rf build"), (untitled, "call-8")):
        reply = answer(decision, offered, CLAUDE_SUPERVISION)
        refusal = refusal_record(request, decision, reply)
        assert refusal.summary() == f"{label}: not here"
        assert (refusal.tool_call_id, refusal.kind, refusal.rule) == (
            request.tool_call_id,
            "execute",
            "unverifiable-handed-root",
        )
        assert refusal.offered == (("allow", "allow_once"), ("no", "reject_once"))
        assert (refusal.answer, refusal.turn_effect) == ("no", "continues")

"""The permission classifier: two pure functions that decide every session/request_permission.

`decide(request, boundary, supervision) -> Decision` says whether the action may run, with
the rule that fired and a reason for the caller. `answer(decision, options) -> Answer`
turns that into an ACP outcome: always an optionId from the offered list, or `cancelled`,
never an invented id. An external channel (a human, a declarative policy, a supervising
agent) can replace either function without the rest of the bridge noticing.

The rules, by the tool call's kind:

    read, search, think                  allow
    edit, delete, move with locations    allow only if every location resolves inside the root
    edit, delete, move without locations allow only if the root is owned
    switch_mode                          allow only the offered option that keeps supervision
    execute, fetch, other, or no kind    allow only if the root is owned, or allow_execute

No I/O except resolving paths against the filesystem (symlinks must be followed to know
where a path lands); no await; frozen values in and out.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from a2a_acp_bridge.adapters import (
    READ_ONLY_MODES,
    AdapterProfile,
    ExitEffect,
    TurnEffect,
    exit_plan_table,
    refusal_effect,
)
from a2a_acp_bridge.boundary import Boundary

READ_KINDS = frozenset({"read", "search", "think"})
CHANGE_KINDS = frozenset({"edit", "delete", "move"})
MODE_KIND = "switch_mode"
OPTION_KINDS = frozenset({"allow_once", "allow_always", "reject_once", "reject_always"})
ALLOW_KINDS = ("allow_once", "allow_always")
REJECT_KINDS = ("reject_once", "reject_always")
MODE_TARGET_KEYS = ("modeId", "mode", "currentModeId")


class Rule(enum.Enum):
    """Which line of the table decided. The value is the name logs and metrics carry."""

    READ_ONLY_KIND = "read-only-kind"
    CHANGE_INSIDE_ROOT = "change-inside-root"
    CHANGE_OUTSIDE_ROOT = "change-outside-root"
    UNLOCATED_CHANGE_OWNED_ROOT = "unlocated-change-owned-root"
    UNLOCATED_CHANGE_HANDED_ROOT = "unlocated-change-handed-root"
    MODE_KEEPS_SUPERVISION = "mode-keeps-supervision"
    MODE_DROPS_SUPERVISION = "mode-drops-supervision"
    MODE_UNKNOWN = "mode-unknown"
    UNVERIFIABLE_OWNED_ROOT = "unverifiable-owned-root"
    UNVERIFIABLE_ALLOWED_BY_OPERATOR = "unverifiable-allowed-by-operator"
    UNVERIFIABLE_HANDED_ROOT = "unverifiable-handed-root"
    TURN_CANCELLED = "turn-cancelled"


@dataclass(frozen=True)
class PermissionOption:
    """One option the adapter offered. Fields are raw: validity is checked by `answer`."""

    option_id: str | None
    kind: str | None
    name: str = ""


@dataclass(frozen=True)
class PermissionRequest:
    """A session/request_permission, reduced to what the classifier reads."""

    tool_call_id: str
    title: str | None = None
    kind: str | None = None
    locations: tuple[str, ...] = ()
    raw_input: Any = None
    options: tuple[PermissionOption, ...] = ()

    @property
    def label(self) -> str:
        """How the caller is told which action this was: its title, else its id."""
        return " ".join(self.title.split()) if self.title else self.tool_call_id


@dataclass(frozen=True)
class Supervision:
    """What the session must keep: the adapter's profile and its supervised mode."""

    profile: AdapterProfile | None = None
    supervised_mode: str | None = None


@dataclass(frozen=True)
class Decision:
    """The verdict on one request: allowed or not, by which rule, and why."""

    allow: bool
    rule: Rule
    reason: str
    # For a mode switch: the one offered option whose effect keeps supervision.
    preferred_option: str | None = None
    leaving_plan: bool = False


@dataclass(frozen=True)
class Answer:
    """The ACP outcome: a selected option id, or `cancelled` when `option_id` is None."""

    option_id: str | None
    option_kind: str | None = None
    turn_effect: TurnEffect = TurnEffect.UNKNOWN
    note: str = ""

    @property
    def cancelled(self) -> bool:
        return self.option_id is None

    @property
    def allows(self) -> bool:
        return self.option_kind in ALLOW_KINDS


@dataclass(frozen=True)
class Refusal:
    """A refused action, as the caller is told about it."""

    label: str
    tool_call_id: str
    kind: str | None
    rule: str
    reason: str
    offered: tuple[tuple[str | None, str | None], ...]
    answer: str | None  # the option id sent, or None for the outcome `cancelled`
    turn_effect: str = TurnEffect.UNKNOWN.value
    extra: Mapping[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        return f"{self.label}: {self.reason}"


# --- containment -------------------------------------------------------------------------


def resolve_location(path_text: object, root: Path) -> Path | None:
    """Where `path_text` lands: relative paths taken against the root, symlinks resolved as
    far as the path exists and the rest re-attached. None if the path cannot be read."""
    if not isinstance(path_text, str) or not path_text or "\x00" in path_text:
        return None
    try:
        candidate = Path(path_text)
        if not candidate.is_absolute():
            candidate = root / candidate
        # realpath walks component by component: existing symlinks are followed, '..' is
        # applied to what has been resolved so far, missing components are kept as text.
        return Path(os.path.realpath(candidate))
    except (OSError, ValueError, RuntimeError):
        return None


def is_inside(path_text: object, root: Path) -> bool:
    """True when the path lands on the root or below it (`..notes` is a child)."""
    resolved = resolve_location(path_text, root)
    if resolved is None:
        return False
    return resolved == root or root in resolved.parents


# --- decide ------------------------------------------------------------------------------


def decide(request: PermissionRequest, boundary: Boundary, supervision: Supervision) -> Decision:
    """The verdict on one permission request (see the table in the module docstring)."""
    kind = request.kind
    if kind == MODE_KIND or _is_plan_exit_tool(request, supervision):
        return _decide_mode_switch(request, supervision)
    if kind in READ_KINDS:
        return Decision(True, Rule.READ_ONLY_KIND, f"{_article(kind)} {kind} changes nothing")
    if kind in CHANGE_KINDS:
        return _decide_change(request, boundary, kind)
    return _decide_unverifiable(boundary, kind)


def _decide_change(request: PermissionRequest, boundary: Boundary, kind: str) -> Decision:
    if request.locations:
        outside = [p for p in request.locations if not is_inside(p, boundary.root)]
        if outside:
            shown = ", ".join(repr(p) for p in outside)
            return Decision(
                False,
                Rule.CHANGE_OUTSIDE_ROOT,
                f"the {kind} reaches outside the working directory {boundary.root}: {shown}",
            )
        return Decision(
            True, Rule.CHANGE_INSIDE_ROOT, f"every path of the {kind} is inside the root"
        )
    if boundary.owned:
        return Decision(
            True,
            Rule.UNLOCATED_CHANGE_OWNED_ROOT,
            f"the {kind} names no path, and the root is the bridge's own sandbox",
        )
    return Decision(
        False,
        Rule.UNLOCATED_CHANGE_HANDED_ROOT,
        f"the {kind} names no path to check, and the root {boundary.root} was handed to the bridge",
    )


def _decide_unverifiable(boundary: Boundary, kind: str | None) -> Decision:
    what = f"{_article(kind)} {kind}" if kind else "an action of no declared kind"
    if boundary.owned:
        return Decision(True, Rule.UNVERIFIABLE_OWNED_ROOT, f"{what} in the bridge's own sandbox")
    if boundary.allow_execute:
        return Decision(
            True,
            Rule.UNVERIFIABLE_ALLOWED_BY_OPERATOR,
            f"{what} is allowed in the handed root by ACP_ALLOW_EXECUTE",
        )
    return Decision(
        False,
        Rule.UNVERIFIABLE_HANDED_ROOT,
        f"{what} cannot be checked against the boundary, and the root {boundary.root} was "
        "handed to the bridge without ACP_ALLOW_EXECUTE",
    )


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _is_plan_exit_tool(request: PermissionRequest, supervision: Supervision) -> bool:
    profile = supervision.profile
    if profile is None or not profile.plan_exit_tool_prefixes:
        return False
    return request.tool_call_id.startswith(profile.plan_exit_tool_prefixes)


def _mode_target(raw_input: Any) -> str | None:
    if not isinstance(raw_input, Mapping):
        return None
    for key in MODE_TARGET_KEYS:
        value = raw_input.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _decide_mode_switch(request: PermissionRequest, supervision: Supervision) -> Decision:
    supervised = supervision.supervised_mode
    table = exit_plan_table(supervision.profile)
    target = _mode_target(request.raw_input)
    effects = {
        option.option_id: table.get(option.option_id)
        for option in request.options
        if isinstance(option.option_id, str)
    }
    leaving_plan = any(effect is not None for effect in effects.values())
    if supervised is None:
        return Decision(
            False,
            Rule.MODE_UNKNOWN,
            "the session's supervised mode is unknown, so no mode change can be judged",
            leaving_plan=leaving_plan,
        )
    if target is not None:
        if target == supervised or target in READ_ONLY_MODES:
            keeping = _first_with_effect(request, effects, ExitEffect.KEEPS_SUPERVISION)
            return Decision(
                True,
                Rule.MODE_KEEPS_SUPERVISION,
                f"the switch targets the mode {target!r}, which keeps supervision",
                preferred_option=keeping,
                leaving_plan=leaving_plan,
            )
        return Decision(
            False,
            Rule.MODE_DROPS_SUPERVISION,
            f"the switch targets the mode {target!r}, which would leave the supervised mode "
            f"{supervised!r}",
            leaving_plan=leaving_plan,
        )
    keeping = _first_with_effect(request, effects, ExitEffect.KEEPS_SUPERVISION)
    if keeping is not None:
        return Decision(
            True,
            Rule.MODE_KEEPS_SUPERVISION,
            f"leaving plan mode through {keeping!r} keeps the session supervised",
            preferred_option=keeping,
            leaving_plan=True,
        )
    dropping = [oid for oid, eff in effects.items() if eff is ExitEffect.DROPS_SUPERVISION]
    if dropping:
        return Decision(
            False,
            Rule.MODE_DROPS_SUPERVISION,
            "the mode switch offers only modes that drop supervision: " + ", ".join(dropping),
            leaving_plan=True,
        )
    offered = ", ".join(str(o.option_id) for o in request.options) or "nothing"
    return Decision(
        False,
        Rule.MODE_UNKNOWN,
        f"no offered option has a known effect on the mode (offered: {offered})",
        leaving_plan=leaving_plan,
    )


def _first_with_effect(
    request: PermissionRequest, effects: Mapping[str, ExitEffect | None], wanted: ExitEffect
) -> str | None:
    for option in request.options:
        if (
            isinstance(option.option_id, str)
            and option.kind in ALLOW_KINDS
            and effects.get(option.option_id) is wanted
        ):
            return option.option_id
    return None


# --- answer ------------------------------------------------------------------------------


def options_are_well_formed(options: Sequence[PermissionOption]) -> bool:
    """Every option has a non-empty string id, a known kind, and ids are unique."""
    seen: set[str] = set()
    for option in options:
        if not isinstance(option.option_id, str) or not option.option_id:
            return False
        if option.kind not in OPTION_KINDS:
            return False
        if option.option_id in seen:
            return False
        seen.add(option.option_id)
    return True


def answer(
    decision: Decision,
    options: Sequence[PermissionOption],
    supervision: Supervision | None = None,
) -> Answer:
    """The outcome for `decision` among the offered `options`: an offered id, or cancelled."""
    profile = supervision.profile if supervision is not None else None
    if not options_are_well_formed(options):
        return Answer(
            None,
            turn_effect=refusal_effect(profile, None, leaving_plan=decision.leaving_plan),
            note="the offered options are malformed (missing or duplicate ids, unknown kinds)",
        )
    if decision.allow:
        return _answer_allow(decision, options, profile)
    return _answer_deny(decision, options, profile)


def _answer_allow(
    decision: Decision, options: Sequence[PermissionOption], profile: AdapterProfile | None
) -> Answer:
    if decision.preferred_option is not None:
        for option in options:
            if option.option_id == decision.preferred_option and option.kind in ALLOW_KINDS:
                return Answer(option.option_id, option.kind, TurnEffect.CONTINUES)
    table = exit_plan_table(profile) if decision.leaving_plan else {}
    for kind in ALLOW_KINDS:
        for option in options:
            if option.kind != kind:
                continue
            # Never pick an allow option known to elevate the session.
            if table.get(str(option.option_id)) is ExitEffect.DROPS_SUPERVISION:
                continue
            return Answer(option.option_id, option.kind, TurnEffect.CONTINUES)
    return Answer(
        None,
        turn_effect=refusal_effect(profile, None, leaving_plan=decision.leaving_plan),
        note="allowed, but no acceptable allow option was offered",
    )


def _answer_deny(
    decision: Decision, options: Sequence[PermissionOption], profile: AdapterProfile | None
) -> Answer:
    candidates = [option for option in options if option.kind in REJECT_KINDS]
    if not candidates:
        return Answer(
            None,
            turn_effect=refusal_effect(profile, None, leaving_plan=decision.leaving_plan),
            note="no reject option was offered",
        )

    def rank(indexed: tuple[int, PermissionOption]) -> tuple[int, int, int]:
        index, option = indexed
        effect = refusal_effect(profile, option.option_id, leaving_plan=decision.leaving_plan)
        effect_rank = {TurnEffect.CONTINUES: 0, TurnEffect.UNKNOWN: 1, TurnEffect.ENDS: 2}[effect]
        return (effect_rank, REJECT_KINDS.index(str(option.kind)), index)

    _, chosen = min(enumerate(candidates), key=rank)
    return Answer(
        chosen.option_id,
        chosen.kind,
        refusal_effect(profile, chosen.option_id, leaving_plan=decision.leaving_plan),
    )


def refusal_record(request: PermissionRequest, decision: Decision, reply: Answer) -> Refusal:
    """What the caller is told about a refused action (or an allowed one that was cancelled)."""
    reason = decision.reason if not decision.allow else reply.note or decision.reason
    return Refusal(
        label=request.label,
        tool_call_id=request.tool_call_id,
        kind=request.kind,
        rule=decision.rule.value,
        reason=reason,
        offered=tuple((o.option_id, o.kind) for o in request.options),
        answer=reply.option_id,
        turn_effect=reply.turn_effect.value,
    )

"""The permission classifier: two pure functions that decide every session/request_permission.

`decide(request, boundary, supervision) -> Decision` says whether the action may run, with
the rule that fired and a reason for the caller. `answer(decision, options, supervision)
-> Answer` turns that into an ACP outcome: always an optionId from the offered list, or
`cancelled`, never an invented id. An external channel (a human, a declarative policy, a
supervising agent) can replace either function without the rest of the bridge noticing:
`BridgeClient` takes them as parameters.

The rules, by the tool call's kind:

    read, search, think                  allow
    edit, delete, move with locations    allow only if every location resolves inside the root
    edit, delete, move without locations allow only if the root is owned
    switch_mode                          allow only the offered option that keeps supervision;
                                         owning the directory grants nothing
    execute, fetch, other, or no kind    allow only if the root is owned, or allow_execute

A plan exit that an adapter sends with another kind (gemini's `exit_plan_mode`, kind
`other`) is a switch_mode. Where a switch lands is read from rawInput (`modeId`, `mode`,
`currentModeId`) when the agent names it, else from the adapter's table of plan-exit option
ids (`adapters.py`); an id the table does not know is never chosen.

Containment: relative paths are taken against the root; symlinks are resolved as far as the
path exists (the deepest existing ancestor is resolved and the rest re-attached), so an
alias of the root (`/var` and `/private/var`) still lands inside while a link pointing out is
caught; `..notes` is a child; a NUL byte, `~`, a URI or any path that cannot be read is
refused. An owned root must still be the directory the bridge made (resolving to itself):
a sandbox that was deleted or replaced by a link is owned no more.

No I/O except resolving paths against the filesystem (symlinks must be followed to know
where a path lands); no await; frozen values in and out.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from a2a_acp_bridge.adapters import (
    READ_ONLY_MODES,
    AdapterProfile,
    ExitEffect,
    TurnEffect,
    exit_plan_table,
    likely_refusal_effect,
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
# rawInput fields that name the files a change touches (claude: file_path, notebook_path;
# codex 0.16: `changes` keyed by path, with `move_path` for a rename). Checked on top of
# the locations, so they can only add refusals.
RAW_PATH_KEYS = ("file_path", "notebook_path")
RAW_CHANGES_KEY = "changes"
RAW_MOVE_KEY = "move_path"


class Rule(enum.Enum):
    """Which line of the table decided. The value is the name logs and reports carry."""

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
    SANDBOX_NOT_INTACT = "sandbox-not-intact"
    TURN_CANCELLED = "turn-cancelled"
    CLASSIFIER_FAILED = "classifier-failed"
    MALFORMED_REQUEST = "malformed-request"


@dataclass(frozen=True)
class PermissionOption:
    """One option the adapter offered. Fields are raw: validity is checked by `answer`."""

    option_id: str | None
    kind: str | None
    name: str = ""


@dataclass(frozen=True)
class PermissionRequest:
    """A session/request_permission, reduced to what the classifier reads.

    `locations` holds every path the request (or the earlier tool_call with the same id)
    names: its `locations` and the paths of its diffs.
    """

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
    # When set, the only option an allowed request may be answered with (a mode switch:
    # the one offered option known to keep supervision).
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
    # A tool may expand these itself (to $HOME, or as a URI): where they land is unknowable.
    if path_text.startswith(("~", "file:")):
        return None
    try:
        candidate = Path(path_text)
        if not candidate.is_absolute():
            candidate = root / candidate
        # realpath walks component by component: existing symlinks are followed, '..' is
        # applied to what has been resolved so far, missing components are kept as text.
        resolved = Path(os.path.realpath(candidate))
    except (OSError, ValueError, RuntimeError):
        return None
    # realpath gives up on a symlink loop and returns the rest unresolved: unreadable.
    if ".." in resolved.parts or not _settled(resolved):
        return None
    return resolved


def _settled(resolved: Path) -> bool:
    """False when a symlink is left in a resolved path: realpath could not follow it (a
    loop), so nobody can say where the path lands."""
    for candidate in (resolved, *resolved.parents):
        if os.path.lexists(candidate):
            return not os.path.islink(candidate)
    return True


def is_inside(path_text: object, root: Path) -> bool:
    """True when the path lands on the root or below it (`..notes` is a child)."""
    resolved = resolve_location(path_text, root)
    if resolved is None:
        return False
    return resolved == root or root in resolved.parents


def root_is_intact(root: Path) -> bool:
    """True while the root is still a directory that resolves to itself (not deleted, not
    replaced by a symlink): the condition for an owned root to count as owned."""
    try:
        return os.path.realpath(root) == str(root) and root.is_dir()
    except (OSError, ValueError):
        return False


def raw_input_paths(raw_input: Any) -> tuple[object, ...]:
    """The paths a change's rawInput names in the fields adapters are known to use."""
    if not isinstance(raw_input, Mapping):
        return ()
    paths: list[object] = [raw_input[key] for key in RAW_PATH_KEYS if raw_input.get(key)]
    changes = raw_input.get(RAW_CHANGES_KEY)
    if isinstance(changes, Mapping):
        for path, change in changes.items():
            paths.append(path)
            if isinstance(change, Mapping) and change.get(RAW_MOVE_KEY):
                paths.append(change[RAW_MOVE_KEY])
    return tuple(paths)


# --- decide ------------------------------------------------------------------------------


def decide(request: PermissionRequest, boundary: Boundary, supervision: Supervision) -> Decision:
    """The verdict on one permission request (see the table in the module docstring)."""
    kind = request.kind
    if kind == MODE_KIND or is_plan_exit_tool(request, supervision):
        return _decide_mode_switch(request, supervision)
    if kind in READ_KINDS:
        return Decision(True, Rule.READ_ONLY_KIND, f"{_article(kind)} {kind} changes nothing")
    if kind in CHANGE_KINDS:
        return _decide_change(request, boundary, kind)
    return _decide_unverifiable(boundary, kind)


def _decide_change(request: PermissionRequest, boundary: Boundary, kind: str) -> Decision:
    if request.locations:
        named = (*request.locations, *raw_input_paths(request.raw_input))
        outside = [p for p in named if not is_inside(p, boundary.root)]
        if outside:
            shown = ", ".join(repr(p) for p in dict.fromkeys(map(str, outside)))
            return Decision(
                False,
                Rule.CHANGE_OUTSIDE_ROOT,
                f"the {kind} reaches outside the working directory {boundary.root}: {shown}",
            )
        return Decision(
            True, Rule.CHANGE_INSIDE_ROOT, f"every path of the {kind} is inside the root"
        )
    if boundary.owned and root_is_intact(boundary.root):
        return Decision(
            True,
            Rule.UNLOCATED_CHANGE_OWNED_ROOT,
            f"the {kind} names no path, and the root is the bridge's own sandbox",
        )
    if boundary.owned:
        return _not_intact(boundary, f"the {kind} names no path to check")
    return Decision(
        False,
        Rule.UNLOCATED_CHANGE_HANDED_ROOT,
        f"the {kind} names no path to check, and the root {boundary.root} was handed to the bridge",
    )


def _decide_unverifiable(boundary: Boundary, kind: str | None) -> Decision:
    what = f"{_article(kind)} {kind}" if kind else "an action of no declared kind"
    owned = boundary.owned and root_is_intact(boundary.root)
    if owned:
        return Decision(True, Rule.UNVERIFIABLE_OWNED_ROOT, f"{what} in the bridge's own sandbox")
    if boundary.allow_execute:
        return Decision(
            True,
            Rule.UNVERIFIABLE_ALLOWED_BY_OPERATOR,
            f"{what} is allowed outside a sandbox of the bridge's own by ACP_ALLOW_EXECUTE",
        )
    if boundary.owned:
        return _not_intact(boundary, f"{what} cannot be checked against the boundary")
    return Decision(
        False,
        Rule.UNVERIFIABLE_HANDED_ROOT,
        f"{what} cannot be checked against the boundary, and the root {boundary.root} was "
        "handed to the bridge without ACP_ALLOW_EXECUTE",
    )


def _not_intact(boundary: Boundary, what: str) -> Decision:
    return Decision(
        False,
        Rule.SANDBOX_NOT_INTACT,
        f"{what}, and the sandbox {boundary.root} is no longer the directory the bridge made "
        "(deleted or replaced)",
    )


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def is_plan_exit_tool(request: PermissionRequest, supervision: Supervision) -> bool:
    """A plan exit sent with another kind: the adapter's plan-exit tool (by toolCallId), of
    kind other or none, offering nothing but ids of its plan-exit table."""
    profile = supervision.profile
    if profile is None or not profile.plan_exit_tool_prefixes:
        return False
    if request.kind not in (None, "other"):
        return False
    if not request.tool_call_id.startswith(profile.plan_exit_tool_prefixes):
        return False
    ids = [option.option_id for option in request.options]
    return bool(ids) and all(
        isinstance(oid, str) and oid in profile.exit_plan_options for oid in ids
    )


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
    allow_ids = [
        option.option_id
        for option in request.options
        if isinstance(option.option_id, str) and option.kind in ALLOW_KINDS
    ]
    known: dict[str, ExitEffect] = {
        option.option_id: table[option.option_id]
        for option in request.options
        if isinstance(option.option_id, str) and option.option_id in table
    }
    leaving_plan = bool(known) or is_plan_exit_tool(request, supervision)
    if supervised is None:
        return Decision(
            False,
            Rule.MODE_UNKNOWN,
            "the session's supervised mode is unknown, so no mode change can be judged",
            leaving_plan=leaving_plan,
        )
    keeping = next(
        (oid for oid in allow_ids if known.get(oid) is ExitEffect.KEEPS_SUPERVISION), None
    )
    target = _mode_target(request.raw_input)
    if target is not None:
        if target != supervised and target not in READ_ONLY_MODES:
            return Decision(
                False,
                Rule.MODE_DROPS_SUPERVISION,
                f"the switch targets the mode {target!r}, which would leave the supervised mode "
                f"{supervised!r}",
                leaving_plan=leaving_plan,
            )
        choice = keeping or _target_option(allow_ids, known, target)
        if choice is None:
            return Decision(
                False,
                Rule.MODE_UNKNOWN,
                f"the switch targets the mode {target!r}, but no offered option is known to "
                f"land there (offered: {_offered(request)})",
                leaving_plan=leaving_plan,
            )
        return Decision(
            True,
            Rule.MODE_KEEPS_SUPERVISION,
            f"the switch targets the mode {target!r}, which keeps supervision",
            preferred_option=choice,
            leaving_plan=leaving_plan,
        )
    if keeping is not None:
        return Decision(
            True,
            Rule.MODE_KEEPS_SUPERVISION,
            f"leaving plan mode through {keeping!r} keeps the session supervised",
            preferred_option=keeping,
            leaving_plan=True,
        )
    dropping = [oid for oid, effect in known.items() if effect is ExitEffect.DROPS_SUPERVISION]
    if dropping:
        return Decision(
            False,
            Rule.MODE_DROPS_SUPERVISION,
            "the mode switch offers only modes that drop supervision: " + ", ".join(dropping),
            leaving_plan=True,
        )
    return Decision(
        False,
        Rule.MODE_UNKNOWN,
        f"no offered option has a known effect on the mode (offered: {_offered(request)})",
        leaving_plan=leaving_plan,
    )


def _target_option(
    allow_ids: Sequence[str], known: Mapping[str, ExitEffect], target: str
) -> str | None:
    """The option that says yes to a switch whose target the agent named: one whose id is
    the target, else, when the offer knows nothing of plan exits, its one allow option
    (a yes/no question about a named mode can only land there). Never one known to drop."""
    if target in allow_ids and known.get(target) is not ExitEffect.DROPS_SUPERVISION:
        return target
    if not known and len(allow_ids) == 1:
        return allow_ids[0]
    return None


def _offered(request: PermissionRequest) -> str:
    return ", ".join(str(option.option_id) for option in request.options) or "nothing"


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
    """The outcome for `decision` among the offered `options`: an offered id, or cancelled.

    Allow: the decision's preferred option if it names one (and nothing else), else the
    first allow_once, else allow_always, never one known to drop supervision, and one that
    writes a rule to disk only when nothing else allows. Deny: an option that refuses only
    this call before one that ends the turn, then reject_once before reject_always. No
    option of the needed polarity, or malformed options: `cancelled`.
    """
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
        return Answer(
            None,
            turn_effect=refusal_effect(profile, None, leaving_plan=decision.leaving_plan),
            note=f"allowed only through {decision.preferred_option!r}, which was not offered",
        )
    table = exit_plan_table(profile)
    persistent = profile.persistent_allow_options if profile is not None else frozenset()
    candidates = [
        (ALLOW_KINDS.index(str(option.kind)), option.option_id in persistent, index, option)
        for index, option in enumerate(options)
        if option.kind in ALLOW_KINDS
        # Never an allow option known to elevate the session.
        and table.get(str(option.option_id)) is not ExitEffect.DROPS_SUPERVISION
    ]
    if candidates:
        chosen = min(candidates, key=lambda item: item[:3])[3]
        return Answer(chosen.option_id, chosen.kind, TurnEffect.CONTINUES)
    return Answer(
        None,
        turn_effect=refusal_effect(profile, None, leaving_plan=decision.leaving_plan),
        note="allowed, but no acceptable allow option was offered",
    )


_EFFECT_RANK = {TurnEffect.CONTINUES: 0, TurnEffect.UNKNOWN: 1, TurnEffect.ENDS: 2}


def _answer_deny(
    decision: Decision, options: Sequence[PermissionOption], profile: AdapterProfile | None
) -> Answer:
    leaving_plan = decision.leaving_plan
    table = exit_plan_table(profile)
    candidates = [
        (
            _EFFECT_RANK[
                likely_refusal_effect(profile, option.option_id, leaving_plan=leaving_plan)
            ],
            REJECT_KINDS.index(str(option.kind)),
            index,
            option,
        )
        for index, option in enumerate(options)
        if option.kind in REJECT_KINDS
        # An id known to leave plan mode is no refusal, whatever kind it is labelled with.
        and table.get(str(option.option_id), ExitEffect.STAYS_IN_PLAN) is ExitEffect.STAYS_IN_PLAN
    ]
    if not candidates:
        return Answer(
            None,
            turn_effect=refusal_effect(profile, None, leaving_plan=leaving_plan),
            note="no reject option was offered",
        )
    chosen = min(candidates, key=lambda item: item[:3])[3]
    return Answer(
        chosen.option_id,
        chosen.kind,
        refusal_effect(profile, chosen.option_id, leaving_plan=leaving_plan),
    )


# The seam: what replaces `decide` and `answer` (BridgeClient, SessionSpec and Bridge take them).
Decider = Callable[[PermissionRequest, Boundary, Supervision], Decision]
Answerer = Callable[[Decision, Sequence[PermissionOption], Supervision], Answer]


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

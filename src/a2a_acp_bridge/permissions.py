"""The permission classifier: two pure functions that decide every session/request_permission.

`decide(request, boundary, supervision) -> Decision` says whether the action may run, with
the rule that fired and a reason for the caller. `answer(decision, options, supervision)
-> Answer` turns that into an ACP outcome: always an optionId from the offered list, or
`cancelled`, never an invented id. An external channel (a human, a declarative policy, a
supervising agent) can replace either function without the rest of the bridge noticing:
`BridgeClient` takes them as parameters.

`decide` is the table below with the floor under it. The table, by the tool call's kind:

    read, search, think                  allow
    edit, delete, move with locations    allow only if every location resolves inside the root
    edit, delete, move without locations allow only if the root is owned
    switch_mode                          allow only the offered option that keeps supervision;
                                         owning the directory grants nothing
    execute, fetch, other, or no kind    allow only if the root is owned, or allow_execute

The kind is a label the agent chose, so the evidence decides more than the kind: a request
that carries a diff, or whose rawInput writes (a path with content, an edit's old and new
strings, codex's `changes`), is also checked as a change, whatever kind it declares.

The floor (`floor`) holds the refusals no decider may lift, checked whatever the table
says: a mode switch that would leave supervision; a path under /proc, /sys or /dev/fd,
whatever the kind; for changes and reads, paths that cannot be placed (a scheme, a
variable, a `~`, over 4096 bytes); for changes, protected paths inside the root
(protection.py), the bridge's own files and the root itself; for reads, the bridge's own
files, other conversations' sandboxes and the secrets under /proc. It only adds
refusals: when the table refuses too, the table's rule is the one reported.

A plan exit that an adapter sends with another kind (gemini's `exit_plan_mode`, kind
`other`) is a switch_mode when its toolCallId and its shape both say so. Where a switch
lands is read from rawInput (`modeId`, `mode`, `currentModeId`) when the agent names it,
else from the adapter's table of plan-exit option ids (`adapters.py`); an id the table
does not know is never chosen.

Containment: relative paths are taken against the root; symlinks are resolved as far as the
path exists (component by component, as the kernel does), so an alias of the root (`/var`
and `/private/var`) still lands inside while a link pointing out is caught; `..notes` is a
child. An owned root must still be the directory the bridge made (resolving to itself): a
sandbox that was deleted or replaced by a link is owned no more.

No I/O except resolving paths against the filesystem (symlinks must be followed to know
where a path lands); no await; frozen values in and out.
"""

from __future__ import annotations

import enum
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
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
from a2a_acp_bridge.protection import (
    PROC_SECRETS,
    SPECIAL_TREES,
    ProtectedName,
    Scope,
    protected_name,
)

READ_KINDS = frozenset({"read", "search", "think"})
CHANGE_KINDS = frozenset({"edit", "delete", "move"})
# Kinds that act on the path itself: deleting or moving the root is never allowed.
RELOCATING_KINDS = frozenset({"delete", "move"})
MODE_KIND = "switch_mode"
OPTION_KINDS = frozenset({"allow_once", "allow_always", "reject_once", "reject_always"})
ALLOW_KINDS = ("allow_once", "allow_always")
REJECT_KINDS = ("reject_once", "reject_always")
MODE_TARGET_KEYS = ("modeId", "mode", "currentModeId")
# rawInput fields that name the files a tool touches, under every name adapters use
# (claude: file_path, notebook_path; zed: path, source_path, destination_path; codex 0.16:
# `changes` keyed by path, with `move_path`; others: filePath, new_path, destination,
# target; gemini's read_many_files: paths). Checked on top of the locations: they only add
# refusals, never turn an unlocated change into a located one.
RAW_PATH_KEYS = (
    "file_path",
    "filePath",
    "notebook_path",
    "path",
    "paths",
    "source_path",
    "destination_path",
    "destination",
    "new_path",
    "move_path",
    "target",
)
RAW_CHANGES_KEY = "changes"
# rawInput fields that carry what is written: with a path beside them, the tool writes.
RAW_WRITE_KEYS = (
    "content",
    "old_string",
    "new_string",
    "new_source",
    "edits",
    "file_text",
    "old_str",
    "new_str",
)
# The longest path the kernel takes (PATH_MAX, bytes): a longer one means something else.
MAX_PATH_BYTES = 4096
# A symlink chain longer than this is a loop (the kernel gives up at 40 too).
MAX_SYMLINKS = 40
# Text a tool (or the shell it runs) may expand before it reaches the filesystem: where it
# lands cannot be known. A scheme in any case (`FILE:`, `x-y+z:`); `$VAR`, `${VAR}`,
# `$(cmd)`, backquotes, `%VAR%`; a `~` where a shell expands it (a word's start, after
# `=` or `:`).
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_EXPANSION = re.compile(r"\$[A-Za-z0-9_{(]|`|%[A-Za-z_][A-Za-z0-9_]*%")
_TILDE = re.compile(r"(^|[/=:])~")
# gemini's exit_plan_mode: the tool's name then its separator (0.61: "__"; older: "-").
# rawInput, when any, names only its plan.
PLAN_EXIT_RAW_KEYS = frozenset({"plan_path", "plan_filename", "plan"})


class Rule(enum.Enum):
    """Which line of the table (or of the floor) decided. The value is the name logs and
    reports carry."""

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
    # the floor
    PROTECTED_PATH = "protected-path"
    READ_PROTECTED = "read-protected"
    SPECIAL_PATH = "special-path"
    UNREADABLE_PATH = "unreadable-path"
    # the decision chain (decisions.py): the policy file, a supervisor, what went wrong
    POLICY = "policy"
    SUPERVISOR = "supervisor"
    NO_SUPERVISOR = "no-supervisor"
    SUPERVISOR_FAILED = "supervisor-failed"
    DECISION_TIMEOUT = "decision-timeout"
    LEDGER_FAILED = "ledger-failed"
    # decided before the classifier
    TURN_CANCELLED = "turn-cancelled"
    NO_TURN = "no-turn"
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

    `locations` holds every path the request (or the earlier tool_calls with the same id)
    names: its `locations` and the paths of its diffs; `diffs` the paths of the diffs alone
    (a request that carries one is a change, whatever its kind).
    """

    tool_call_id: str
    title: str | None = None
    kind: str | None = None
    locations: tuple[str, ...] = ()
    raw_input: Any = None
    options: tuple[PermissionOption, ...] = ()
    diffs: tuple[str, ...] = ()

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

    def summary(self) -> str:
        return f"{self.label}: {self.reason}"


# --- where a path lands -----------------------------------------------------------------


@dataclass(frozen=True)
class Location:
    """A path as named and where it lands. `resolved` is None when nobody can say where it
    lands (`problem` says why); `special` when it names or passes through /proc, /sys or a
    process's descriptors; `lexical` is the path made absolute without resolving links."""

    named: object
    resolved: Path | None
    lexical: Path | None = None
    problem: str | None = None
    special: bool = False


def unreadable_reason(path_text: object) -> str | None:
    """Why a path's text cannot be placed before the filesystem is asked, or None."""
    if not isinstance(path_text, str):
        return "it is not text"
    if not path_text:
        return "it is empty"
    if "\x00" in path_text:
        return "it holds a NUL byte"
    if len(path_text.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        return f"it is longer than {MAX_PATH_BYTES} bytes"
    if _SCHEME.match(path_text):
        return "it starts with a scheme, which a tool may read as a URI"
    if _EXPANSION.search(path_text):
        return "it holds a variable or a command a tool or its shell may expand"
    if _TILDE.search(path_text):
        return "it holds a ~ a tool or its shell may expand to a home directory"
    return None


def locate(path_text: object, root: Path) -> Location:
    """Where `path_text` lands: relative paths taken against the root, symlinks resolved
    component by component as far as the path exists, the rest kept as text."""
    problem = unreadable_reason(path_text)
    if problem is not None:
        return Location(path_text, None, problem=problem)
    assert isinstance(path_text, str)
    joined = os.path.join(root, path_text)
    lexical = Path(os.path.normpath(joined))
    try:
        walked = _walk(joined)
    except (OSError, ValueError):
        return Location(path_text, None, lexical, "it cannot be resolved")
    if walked is None:
        return Location(path_text, None, lexical, "its symlinks loop", _is_special(str(lexical)))
    resolved, special = walked
    return Location(path_text, Path(resolved), lexical, special=special or _is_special(lexical))


def _walk(path: str) -> tuple[str, bool] | None:
    """realpath (non-strict), also telling whether any step landed in a special tree. None
    for a symlink loop. A component that cannot be examined (missing, too long, no access)
    is kept as text, as realpath keeps it; the next ones are examined again (a `..` may
    climb back into what exists)."""
    pending = [part for part in reversed(path.split("/")) if part]
    resolved = "/"
    special = False
    links = 0
    while pending:
        name = pending.pop()
        if name == ".":
            continue
        if name == "..":
            resolved = os.path.dirname(resolved)
            continue
        candidate = os.path.join(resolved, name)
        special = special or _is_special(candidate)
        try:
            info = os.lstat(candidate)
        except OSError:
            resolved = candidate
            continue
        if not stat.S_ISLNK(info.st_mode):
            resolved = candidate
            continue
        links += 1
        if links > MAX_SYMLINKS:
            return None
        target = os.readlink(candidate)
        if target.startswith("/"):
            resolved = "/"
        pending.extend(part for part in reversed(target.split("/")) if part)
    return resolved, special


def _is_special(path: str | Path) -> bool:
    text = str(path)
    return any(text == tree or text.startswith(tree + "/") for tree in SPECIAL_TREES)


def resolve_location(path_text: object, root: Path) -> Path | None:
    """Where `path_text` lands, or None if that cannot be said (see `locate`)."""
    return locate(path_text, root).resolved


def _under(path: Path, base: Path) -> bool:
    return path == base or base in path.parents


def is_inside(path_text: object, root: Path) -> bool:
    """True when the path lands on the root or below it (`..notes` is a child), and means
    a file: a path through /proc is never inside."""
    found = locate(path_text, root)
    return found.resolved is not None and not found.special and _under(found.resolved, root)


def root_is_intact(root: Path) -> bool:
    """True while the root is still a directory that resolves to itself (not deleted, not
    replaced by a symlink): the condition for an owned root to count as owned."""
    try:
        return os.path.realpath(root) == str(root) and root.is_dir()
    except (OSError, ValueError):
        return False


def _path_values(value: Any) -> Iterator[object]:
    if isinstance(value, list | tuple):
        yield from (item for item in value if item)
    elif value:
        yield value


def raw_input_paths(raw_input: Any) -> tuple[object, ...]:
    """The paths a request's rawInput names in the fields adapters are known to use."""
    if not isinstance(raw_input, Mapping):
        return ()
    paths: list[object] = []
    for key in RAW_PATH_KEYS:
        paths.extend(_path_values(raw_input.get(key)))
    changes = raw_input.get(RAW_CHANGES_KEY)
    if isinstance(changes, Mapping):
        for path, change in changes.items():
            paths.append(path)
            if isinstance(change, Mapping):
                for key in RAW_PATH_KEYS:
                    paths.extend(_path_values(change.get(key)))
    return tuple(paths)


def raw_input_writes(raw_input: Any) -> bool:
    """Whether rawInput describes a write: a path beside written content, or codex's
    `changes`."""
    if not isinstance(raw_input, Mapping):
        return False
    changes = raw_input.get(RAW_CHANGES_KEY)
    if isinstance(changes, Mapping) and changes:
        return True
    names_path = any(isinstance(raw_input.get(key), str | list) for key in RAW_PATH_KEYS)
    return names_path and any(key in raw_input for key in RAW_WRITE_KEYS)


def is_change(request: PermissionRequest) -> bool:
    """A change by its kind, or by its evidence: a diff, or a rawInput that writes."""
    return (
        request.kind in CHANGE_KINDS or bool(request.diffs) or raw_input_writes(request.raw_input)
    )


def named_paths(request: PermissionRequest) -> tuple[object, ...]:
    """Every path the request names: locations, diffs, rawInput (once each, in order)."""
    found: dict[str, object] = {}
    for path in (*request.locations, *request.diffs, *raw_input_paths(request.raw_input)):
        found.setdefault(repr(path), path)
    return tuple(found.values())


def shown_path(path_text: object, root: Path) -> str:
    """A path as the caller is told it: relative to the root when it lands inside, else as
    the agent named it (never the bridge's own layout beyond the root)."""
    found = locate(path_text, root)
    if found.resolved is not None and not found.special and _under(found.resolved, root):
        relative = found.resolved.relative_to(root)
        return repr(str(relative)) if relative.parts else "the working directory itself"
    return repr(path_text if isinstance(path_text, str) else str(path_text))


# --- decide ------------------------------------------------------------------------------


def decide(request: PermissionRequest, boundary: Boundary, supervision: Supervision) -> Decision:
    """The verdict on one permission request: the table, then the floor under it (see the
    module docstring). The floor adds refusals; it never replaces one of the table's."""
    verdict = decide_by_table(request, boundary, supervision)
    if not verdict.allow:
        return verdict
    return floor(request, boundary, supervision) or verdict


def decide_by_table(
    request: PermissionRequest, boundary: Boundary, supervision: Supervision
) -> Decision:
    """The table alone: by the kind, and as a change whenever the evidence says so."""
    kind = request.kind
    mode_switch = kind == MODE_KIND or is_plan_exit_tool(request, supervision)
    if is_change(request):
        change = _decide_change(request, boundary)
        # A change of another kind must pass its own kind's row too (a switch, a command).
        if not change.allow or kind in CHANGE_KINDS or kind in READ_KINDS:
            return change
    if mode_switch:
        return _decide_mode_switch(request, supervision)
    if kind in READ_KINDS:
        return Decision(True, Rule.READ_ONLY_KIND, f"{_article(kind)} {kind} changes nothing")
    return _decide_unverifiable(boundary, kind)


def _change_noun(request: PermissionRequest) -> str:
    kind = request.kind
    if kind in CHANGE_KINDS:
        return str(kind)
    return f"{_article_noun(kind)} (it carries a change)"


def _decide_change(request: PermissionRequest, boundary: Boundary) -> Decision:
    what = _change_noun(request)
    located = (*request.locations, *request.diffs)
    named = named_paths(request)
    outside = [p for p in named if not is_inside(p, boundary.root)]
    if outside:
        shown = ", ".join(dict.fromkeys(shown_path(p, boundary.root) for p in outside))
        return Decision(
            False,
            Rule.CHANGE_OUTSIDE_ROOT,
            f"the {what} reaches outside the working directory: {shown}",
        )
    if located:
        return Decision(
            True, Rule.CHANGE_INSIDE_ROOT, f"every path of the {what} is inside the root"
        )
    if boundary.owned and root_is_intact(boundary.root):
        return Decision(
            True,
            Rule.UNLOCATED_CHANGE_OWNED_ROOT,
            f"the {what} names no path, and the root is the bridge's own sandbox",
        )
    if boundary.owned:
        return _not_intact(f"the {what} names no path to check")
    return Decision(
        False,
        Rule.UNLOCATED_CHANGE_HANDED_ROOT,
        f"the {what} names no path to check, and the working directory was handed to the bridge",
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
        return _not_intact(f"{what} cannot be checked against the boundary")
    return Decision(
        False,
        Rule.UNVERIFIABLE_HANDED_ROOT,
        f"{what} cannot be checked against the boundary, and the working directory was "
        "handed to the bridge without ACP_ALLOW_EXECUTE",
    )


def _not_intact(what: str) -> Decision:
    return Decision(
        False,
        Rule.SANDBOX_NOT_INTACT,
        f"{what}, and the sandbox is no longer the directory the bridge made (deleted or replaced)",
    )


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


# --- the floor ---------------------------------------------------------------------------
#
# The refusals no decider may lift: `floor` is meant to run before any other decider (an
# external channel's policy included), and `decide` runs it under the table.


def floor(
    request: PermissionRequest, boundary: Boundary, supervision: Supervision
) -> Decision | None:
    """The refusal the floor makes, or None when it has nothing against the request:

    - a mode switch that would leave supervision (or that cannot be judged);
    - whatever the kind: a path under /proc, /sys or a process's descriptors;
    - for a change: a path that cannot be placed, a protected path inside the root, one
      of the bridge's own files, the root itself deleted or moved;
    - for a read, search or think: a path that cannot be placed, the bridge's own files,
      another conversation's sandbox, a process's environment or memory.
    """
    if request.kind == MODE_KIND or is_plan_exit_tool(request, supervision):
        switch = _decide_mode_switch(request, supervision)
        if not switch.allow:
            return switch
    changing = is_change(request)
    reading = request.kind in READ_KINDS
    what = _change_noun(request) if changing else str(request.kind or "request")
    for path in named_paths(request):
        found = locate(path, boundary.root)
        if changing:
            refusal = _floor_of_change(request, found, boundary, what)
        elif reading:
            refusal = _floor_of_read(found, boundary, what)
        elif found.special:
            refusal = _special(what, shown_path(found.named, boundary.root))
        else:
            refusal = None
        if refusal is not None:
            return refusal
    return None


def _article_noun(kind: str | None) -> str:
    return f"{kind} request" if kind else "request of no declared kind"


def _floor_of_change(
    request: PermissionRequest, found: Location, boundary: Boundary, what: str
) -> Decision | None:
    root = boundary.root
    shown = shown_path(found.named, root)
    if found.special:
        return _special(what, shown)
    if found.resolved is None:
        return _unreadable(what, shown, found.problem)
    if found.resolved == root and request.kind in RELOCATING_KINDS:
        return Decision(
            False,
            Rule.PROTECTED_PATH,
            f"the {what} would remove or move the working directory itself",
        )
    if _bridge_file(found.resolved, boundary) is not None:
        return Decision(
            False,
            Rule.PROTECTED_PATH,
            f"the {what} touches the bridge's own files ({shown}): its settings, state and "
            "other conversations' sandboxes are never an agent's to change",
        )
    entry = _protected_entry(found, boundary)
    if entry is not None:
        return Decision(
            False,
            Rule.PROTECTED_PATH,
            f"the {what} touches {shown}, inside {entry.name}, which is protected in "
            f"{entry.scope.value} ({entry.why}); the operator can open it with "
            "ACP_WRITABLE_PROTECTED",
        )
    return None


def _floor_of_read(found: Location, boundary: Boundary, what: str) -> Decision | None:
    shown = shown_path(found.named, boundary.root)
    if _proc_secret(found):
        return Decision(
            False,
            Rule.READ_PROTECTED,
            f"the {what} names {shown}, a process's environment or memory (the bridge's "
            "secrets among them)",
        )
    if found.special:
        return _special(what, shown)
    if found.resolved is None:
        return _unreadable(what, shown, found.problem)
    if _bridge_file(found.resolved, boundary) is not None:
        return Decision(
            False,
            Rule.READ_PROTECTED,
            f"the {what} names {shown}, among the bridge's own files (its settings, state "
            "and other conversations' sandboxes)",
        )
    return None


def _special(what: str, shown: str) -> Decision:
    return Decision(
        False,
        Rule.SPECIAL_PATH,
        f"the {what} names {shown}, under /proc, /sys or a process's descriptors: such a "
        "path means the process that opens it, not a file",
    )


def _unreadable(what: str, shown: str, problem: str | None) -> Decision:
    return Decision(
        False,
        Rule.UNREADABLE_PATH,
        f"the {what} names {shown}, which cannot be placed: {problem or 'unreadable'}",
    )


def _bridge_file(resolved: Path, boundary: Boundary) -> Path | None:
    """The bridge's own file or directory `resolved` lands in, if any. A root inside one
    (an owned sandbox in the sandboxes parent) is the conversation's own, not the bridge's."""
    root = boundary.root
    for own in boundary.protection.bridge_files:
        if _under(resolved, own) and not (_under(root, own) and _under(resolved, root)):
            return own
    return None


def _protected_entry(found: Location, boundary: Boundary) -> ProtectedName | None:
    """The entry of PROTECTED_NAMES a path inside the root falls under, as named or as
    resolved (a `.git` that is a link is still where git looks), unless opened."""
    root = boundary.root
    for path in (found.lexical, found.resolved):
        if path is None or not _under(path, root):
            continue
        for part in path.relative_to(root).parts:
            entry = protected_name(part)
            if entry is None or entry.name.casefold() in boundary.protection.writable:
                continue
            if entry.scope is Scope.EVERY_ROOT or not boundary.owned:
                return entry
    return None


def _proc_secret(found: Location) -> bool:
    for path in (found.lexical, found.resolved):
        if path is not None and path.parts[:2] == ("/", "proc") and path.name in PROC_SECRETS:
            return True
    return False


# --- mode switches -----------------------------------------------------------------------


def is_plan_exit_tool(request: PermissionRequest, supervision: Supervision) -> bool:
    """A plan exit sent with another kind: the adapter's plan-exit tool by its toolCallId
    (the tool's exact name and separator), of kind other or none, with a plan exit's shape
    (no diff, no locations, a rawInput naming at most its plan), offering nothing but ids
    of its plan-exit table."""
    profile = supervision.profile
    if profile is None or not profile.plan_exit_tool_prefixes:
        return False
    if request.kind not in (None, "other"):
        return False
    if not request.tool_call_id.startswith(profile.plan_exit_tool_prefixes):
        return False
    if request.locations or request.diffs:
        return False
    raw = request.raw_input
    if raw is not None and not (isinstance(raw, Mapping) and set(raw) <= PLAN_EXIT_RAW_KEYS):
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
        # The target is the model's word: it unlocks only an option the adapter's table
        # knows to keep supervision, never an unknown "yes".
        if keeping is None:
            return Decision(
                False,
                Rule.MODE_UNKNOWN,
                f"the switch targets the mode {target!r}, but no offered option is known to "
                f"land in a supervised mode (offered: {_offered(request)})",
                leaving_plan=leaving_plan,
            )
        return Decision(
            True,
            Rule.MODE_KEEPS_SUPERVISION,
            f"the switch targets the mode {target!r}, which keeps supervision",
            preferred_option=keeping,
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

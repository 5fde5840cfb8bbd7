"""The floor under the table: properties that hold for any request (hypothesis), and the
data and small pieces the floor rests on.

- a request that carries a diff outside the root is never allowed, whatever its kind;
- no protected path is ever allowed unless the operator opened it, and the floor alone
  (what a later policy chain puts first) refuses it;
- no path under /proc, /sys or a process's descriptors is ever allowed, however it is
  reached (directly, through /dev/fd, through a link planted in the root).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from a2a_acp_bridge.acp.client import mode_from_config_options
from a2a_acp_bridge.adapters import PROFILES
from a2a_acp_bridge.boundary import Boundary, Sandboxes, handed_boundary, relative_text
from a2a_acp_bridge.config import Settings
from a2a_acp_bridge.errors import ConfigError
from a2a_acp_bridge.permissions import (
    OPTION_KINDS,
    PermissionOption,
    PermissionRequest,
    Rule,
    Supervision,
    answer,
    decide,
    floor,
    locate,
)
from a2a_acp_bridge.protection import (
    PROTECTED_NAMES,
    Protection,
    Scope,
    bridge_protection,
    parse_writable,
)

KINDS = [
    "read",
    "search",
    "think",
    "edit",
    "delete",
    "move",
    "execute",
    "fetch",
    "other",
    "switch_mode",
    None,
]
kinds = st.sampled_from(KINDS)
supervisions = st.one_of(
    st.just(Supervision()),
    st.sampled_from(PROFILES).map(lambda p: Supervision(p, p.supervised_mode)),
)
option_ids = st.sampled_from(
    ["allow-once", "allow_once", "proceed_once", "exit-plan-default", "implement_plan", "x"]
)
offers = st.lists(
    st.tuples(option_ids, st.sampled_from(sorted(OPTION_KINDS))),
    min_size=1,
    max_size=5,
    unique_by=lambda pair: pair[0],
).map(lambda pairs: tuple(PermissionOption(oid, kind) for oid, kind in pairs))
call_ids = st.sampled_from(["call_1", "exit_plan_mode__1", "exit_plan_mode-2", "toolu_x"])
names = st.lists(st.sampled_from(["a", "src", "deep", "x y", "ü", "..notes"]), max_size=3)


@dataclass(frozen=True)
class Tree:
    owned: Boundary
    handed: Boundary
    handed_execute: Boundary
    outside: Path

    @property
    def all(self) -> list[Boundary]:
        return [self.owned, self.handed, self.handed_execute]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    base = tmp_path_factory.mktemp("floor")
    outside = base / "outside"
    outside.mkdir()
    project = base / "project"
    project.mkdir()
    protection = bridge_protection(base, sandbox_parent=base / "sandboxes")
    owned = Sandboxes(base / "sandboxes", protection=protection).create("floor")
    for root in (project, owned.root):
        (root / "proc-link").symlink_to("/proc/self")
        (root / "fd-link").symlink_to("/dev/fd")
    return Tree(
        owned=owned,
        handed=handed_boundary(project, allow_execute=False, protection=protection),
        handed_execute=handed_boundary(project, allow_execute=True, protection=protection),
        outside=outside,
    )


def never_allowed(request: PermissionRequest, boundary: Boundary, supervision: Supervision) -> None:
    decision = decide(request, boundary, supervision)
    assert decision.allow is False, decision
    assert not answer(decision, request.options, supervision).allows


# --- a diff outside the root --------------------------------------------------------------


@settings(max_examples=300)
@given(
    data=st.data(),
    kind=kinds,
    call_id=call_ids,
    offered=offers,
    supervision=supervisions,
    tail=names,
)
def test_a_request_with_a_diff_outside_the_root_is_never_allowed_whatever_its_kind(
    tree: Tree,
    data: st.DataObject,
    kind: str | None,
    call_id: str,
    offered: tuple[PermissionOption, ...],
    supervision: Supervision,
    tail: list[str],
) -> None:
    boundary = data.draw(st.sampled_from(tree.all))
    target = data.draw(
        st.sampled_from(
            [
                str(Path(tree.outside, *tail, "f.txt")),
                str(Path(boundary.root.parent, "elsewhere", *tail)),
                "../" + "/".join([*tail, "up.txt"]),
                "/etc/cron.d/planted",
            ]
        )
    )
    listed = data.draw(st.booleans())  # the client lists a diff's path among the locations
    request = PermissionRequest(
        call_id,
        "Save memory",
        kind,
        locations=(target,) if listed else (),
        raw_input=data.draw(st.sampled_from([None, {"fact": "x"}, {"modeId": "default"}])),
        options=offered,
        diffs=(target,),
    )
    never_allowed(request, boundary, supervision)


# --- protected paths ----------------------------------------------------------------------


@st.composite
def protected_paths(draw: st.DrawFn, root: Path, owned: bool) -> tuple[str, str]:
    """A path inside `root` through a protected name (any case, any depth): (path, name)."""
    candidates = [e for e in PROTECTED_NAMES if e.scope is Scope.EVERY_ROOT or not owned]
    entry = draw(st.sampled_from(candidates))
    spelled = "".join(
        c.upper() if draw(st.booleans()) else c for c in entry.name
    )  # a case-insensitive filesystem makes these one
    above, below = draw(names), draw(names)
    relative = "/".join([*above, spelled, *below])
    path = str(root / relative) if draw(st.booleans()) else relative
    return path, entry.name


@settings(max_examples=300)
@given(data=st.data(), supervision=supervisions, offered=offers)
def test_no_protected_path_is_ever_allowed_without_the_operators_list(
    tree: Tree, data: st.DataObject, supervision: Supervision, offered: tuple[PermissionOption, ...]
) -> None:
    boundary = data.draw(st.sampled_from(tree.all))
    path, name = data.draw(protected_paths(boundary.root, boundary.owned))
    shape = data.draw(st.sampled_from(["edit", "delete", "move", "read+diff", "think+raw"]))
    if shape == "read+diff":
        request = PermissionRequest("c", "t", "read", (path,), None, offered, diffs=(path,))
    elif shape == "think+raw":
        raw = {"file_path": path, "content": "x"}
        request = PermissionRequest("c", "t", "think", (path,), raw, offered)
    else:
        request = PermissionRequest("c", "t", shape, (path,), None, offered)
    never_allowed(request, boundary, supervision)
    # The floor alone refuses it: a decider put in front of the table cannot lift it.
    refusal = floor(request, boundary, supervision)
    assert refusal is not None
    assert refusal.rule is Rule.PROTECTED_PATH

    opened = dataclasses.replace(
        boundary,
        protection=dataclasses.replace(boundary.protection, writable=frozenset({name.casefold()})),
    )
    if shape == "edit":  # opened, it is an ordinary path inside the root again
        assert decide(request, opened, supervision).rule is Rule.CHANGE_INSIDE_ROOT


# --- /proc and its kin ----------------------------------------------------------------------


SPECIAL_BASES = [
    "/proc/self/cwd",
    "/proc/self/root",
    "/proc/1/environ",
    "/proc/thread-self/fd/0",
    "/proc",
    "/sys/kernel",
    "/dev/fd/0",
    "/dev/stdin",
    "/dev/stderr",
    "proc-link/cwd",
    "fd-link/1",
    "//proc/self/cwd",
    "/proc/../proc/self/cwd",
]


@settings(max_examples=300)
@given(
    data=st.data(),
    kind=kinds,
    call_id=call_ids,
    offered=offers,
    supervision=supervisions,
    base=st.sampled_from(SPECIAL_BASES),
    tail=names,
    where=st.sampled_from(["locations", "diffs", "path", "file_path"]),
)
def test_no_path_under_proc_is_ever_allowed(
    tree: Tree,
    data: st.DataObject,
    kind: str | None,
    call_id: str,
    offered: tuple[PermissionOption, ...],
    supervision: Supervision,
    base: str,
    tail: list[str],
    where: str,
) -> None:
    boundary = data.draw(st.sampled_from(tree.all))
    path = "/".join([base, *tail])
    fields: dict[str, Any] = {}
    if where == "locations":
        fields["locations"] = (path,)
    elif where == "diffs":
        fields["locations"] = (path,)
        fields["diffs"] = (path,)
    else:
        fields["raw_input"] = {where: path}
    request = PermissionRequest(call_id, "t", kind, options=offered, **fields)
    never_allowed(request, boundary, supervision)


# --- the pieces -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("FILE:x", "scheme"),
        ("x-y+z:thing", "scheme"),
        ("$HOME", "variable"),
        ("a/${X}/b", "variable"),
        ("%APPDATA%\\x", "variable"),
        ("`id`", "variable"),
        ("~", "~"),
        ("a/~b", "~"),
        ("X=~/y", "~"),
        ("x" * 4097, "4096 bytes"),
        ("é" * 2049, "4096 bytes"),
    ],
)
def test_text_a_tool_may_expand_cannot_be_placed(tmp_path: Path, text: str, problem: str) -> None:
    found = locate(text, tmp_path)
    assert found.resolved is None
    assert problem in (found.problem or "")


@pytest.mark.parametrize("text", ["cost$.txt", "50%.txt", "a~b", "x" * 4096, "back~"])
def test_ordinary_names_with_those_characters_still_resolve(tmp_path: Path, text: str) -> None:
    assert locate(text, tmp_path).resolved == tmp_path / text


def test_a_symlink_loop_cannot_be_placed(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    found = locate("a/x", tmp_path)
    assert (found.resolved, found.problem) == (None, "its symlinks loop")


def test_a_climb_through_a_missing_directory_still_follows_a_link(tmp_path: Path) -> None:
    """`missing/../out` is `out` once `missing` is made (mkdir -p): the link is followed."""
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "out").symlink_to(tmp_path)
    found = locate("missing/../out/x", tmp_path / "root")
    assert found.resolved == tmp_path / "x"


def test_the_bridges_own_files_are_read_protected_and_its_token_file_too(tmp_path: Path) -> None:
    tokens = tmp_path / "secrets" / "tokens"
    protection = bridge_protection(tmp_path, sandbox_parent=tmp_path / "sb", token_file=tokens)
    assert protection.bridge_files == (
        tmp_path / ".env",
        tmp_path / ".a2a-acp-bridge",
        tokens,
        tmp_path / "sb",
    )
    project = tmp_path / "project"
    project.mkdir()
    boundary = handed_boundary(project, allow_execute=False, protection=protection)
    read = PermissionRequest("r", "Read", "read", (str(tokens),))
    decision = decide(read, boundary, Supervision())
    assert (decision.allow, decision.rule) == (False, Rule.READ_PROTECTED)


def test_settings_carry_the_protection_of_the_bridges_directory(tmp_path: Path) -> None:
    (tmp_path / "tokens").write_text("a" * 32 + "\n")
    settings = Settings.from_env(
        {"A2A_TOKEN_FILE": "tokens", "ACP_WRITABLE_PROTECTED": "./.vscode/, .GIT"}, cwd=tmp_path
    )
    protection = settings.protection()
    assert tmp_path / ".env" in protection.bridge_files
    assert tmp_path / "tokens" in protection.bridge_files
    assert tmp_path / ".acp-sandboxes" in protection.bridge_files
    assert protection.writable == frozenset({".vscode", ".git"})


@pytest.mark.parametrize("value", [".env", "src", ".github", "/etc/passwd"])
def test_only_a_protected_name_can_be_opened(tmp_path: Path, value: str) -> None:
    with pytest.raises(ValueError, match="is not a protected name"):
        parse_writable(value)
    with pytest.raises(ConfigError, match="ACP_WRITABLE_PROTECTED"):
        Settings.from_env({"ACP_WRITABLE_PROTECTED": value}, cwd=tmp_path)


def test_every_protected_name_says_why() -> None:
    assert all(len(entry.why) > 20 for entry in PROTECTED_NAMES)
    assert {e.name for e in PROTECTED_NAMES if e.scope is Scope.HANDED_ROOT} == {
        ".git",
        ".gitmodules",
        ".hg",
    }


def test_a_boundary_made_without_settings_still_protects_the_names() -> None:
    assert Boundary(Path("/srv/x"), owned=False).protection == Protection()


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("Write {R}/a.txt", "Write a.txt"),
        ("cd {R} && ls", "cd . && ls"),
        ("Write {R}2/a.txt", "Write {R}2/a.txt"),
        ("Write {R}.bak", "Write {R}.bak"),
        ("two {R}/a {R}/b", "two a b"),
    ],
)
def test_the_root_is_written_relative_to_itself(text: str, shown: str) -> None:
    root = Path("/srv/.acp-sandboxes/ctx-1234")
    assert relative_text(text.replace("{R}", str(root)), root) == shown.replace("{R}", str(root))


class Option:
    def __init__(self, option_id: str, value: str, category: str | None = "mode") -> None:
        self.id, self.current_value, self.category, self.type = option_id, value, category, "select"


@pytest.mark.parametrize(
    ("options", "known", "selected"),
    [
        pytest.param(
            [Option("other", "default"), Option("mode", "bypassPermissions")],
            "mode",
            ("mode", "bypassPermissions"),
            id="the-option-the-bridge-set-wins",
        ),
        pytest.param(
            [Option("a", "default"), Option("b", "yolo")],
            None,
            ("b", "yolo"),
            id="among-unknown-ones-the-one-that-drops-supervision",
        ),
        pytest.param(
            [Option("mode", "acceptEdits", category=None)],
            "mode",
            ("mode", "acceptEdits"),
            id="known-by-id-when-the-sdk-dropped-its-category",
        ),
        pytest.param([Option("model", "fast", category="model")], None, None, id="no-mode"),
    ],
)
def test_a_mode_update_is_judged_by_the_mode_it_selects(
    options: list[Option], known: str | None, selected: tuple[str, str] | None
) -> None:
    assert mode_from_config_options(options, known) == selected

"""Properties of the classifier that must hold for any request (hypothesis).

- `answer` never returns an id that was not offered;
- an edit, delete or move with any location outside the root is never allowed;
- in a handed root without allow_execute, execute, fetch, other and no kind are never
  allowed (a recognised plan exit aside, which is a switch that keeps supervision);
- a mode switch never picks an option known to drop supervision.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from a2a_acp_bridge.adapters import PROFILES, ExitEffect, exit_plan_table
from a2a_acp_bridge.boundary import Boundary, Sandboxes, handed_boundary
from a2a_acp_bridge.permissions import (
    ALLOW_KINDS,
    OPTION_KINDS,
    Decision,
    PermissionOption,
    PermissionRequest,
    Rule,
    Supervision,
    answer,
    decide,
    is_plan_exit_tool,
    resolve_location,
)

KNOWN_IDS = sorted(
    {oid for profile in PROFILES for oid in profile.exit_plan_options}
    | {oid for profile in PROFILES for oid in profile.reject_effects if oid != "*"}
    | {"allow-once", "allow-with-updates", "allow_once", "allow_for_session", "proceed_always"}
)
option_ids = st.one_of(st.sampled_from(KNOWN_IDS), st.text(max_size=12))
option_kinds = st.one_of(
    st.sampled_from(sorted(OPTION_KINDS)), st.sampled_from(["allow", "reject", "", None])
)
raw_options = st.lists(
    st.builds(PermissionOption, st.one_of(option_ids, st.none()), option_kinds), max_size=6
)
well_formed_options = st.lists(
    st.tuples(option_ids.filter(bool), st.sampled_from(sorted(OPTION_KINDS))),
    max_size=6,
    unique_by=lambda pair: pair[0],
).map(lambda pairs: tuple(PermissionOption(oid, kind) for oid, kind in pairs))
supervisions = st.one_of(
    st.just(Supervision()),
    st.sampled_from(PROFILES).map(lambda p: Supervision(p, p.supervised_mode)),
    st.sampled_from(PROFILES).map(lambda p: Supervision(p, None)),
)
decisions = st.builds(
    Decision,
    st.booleans(),
    st.sampled_from(list(Rule)),
    st.just("because"),
    st.one_of(st.none(), option_ids),
    st.booleans(),
)


@given(decisions, raw_options, supervisions)
def test_answer_never_returns_an_id_that_was_not_offered(
    decision: Decision, offered: list[PermissionOption], supervision: Supervision
) -> None:
    reply = answer(decision, offered, supervision)
    if reply.option_id is not None:
        chosen = [o for o in offered if o.option_id == reply.option_id]
        assert len(chosen) == 1
        assert (chosen[0].kind in ALLOW_KINDS) is decision.allow
        assert reply.option_kind == chosen[0].kind


# --- the filesystem the path properties run in -------------------------------------------


@dataclass(frozen=True)
class Tree:
    owned: Boundary
    handed: Boundary
    handed_execute: Boundary
    outside: Path


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    base = tmp_path_factory.mktemp("properties")
    outside = base / "outside"
    outside.mkdir()
    project = base / "project"
    (project / "src").mkdir(parents=True)
    owned = Sandboxes(base / "sandboxes").create("prop")
    for root in (project, owned.root):
        (root / "src").mkdir(exist_ok=True)
        (root / "out").symlink_to(outside)  # a link planted inside, pointing out
        (root / "etc").symlink_to("/etc")
    return Tree(
        owned=owned,
        handed=handed_boundary(project, allow_execute=False),
        handed_execute=handed_boundary(project, allow_execute=True),
        outside=outside,
    )


NAMES = st.sampled_from(["a", "b", "src", "..notes", "x y", "ü", ".hidden", "new"])
names = st.lists(NAMES, max_size=4)


@st.composite
def outside_paths(draw: st.DrawFn, root: Path, outside: Path) -> str:
    """A path outside `root` by construction: from an outside base, or a climb above it."""
    tail = draw(names)
    base = draw(st.sampled_from(["outside", "link", "etc", "climb", "parent", "slash"]))
    if base == "outside":
        return str(Path(outside, *tail))
    if base == "link":
        return str(Path("out", *tail)) if draw(st.booleans()) else str(Path(root, "out", *tail))
    if base == "etc":
        return str(Path("etc", "cron.d", *tail))
    if base == "parent":
        return str(Path(root.parent, *tail)) if tail else str(root.parent)
    if base == "slash":
        return str(Path("/", "tmp", *tail))
    down = draw(names)
    up = [".."] * (len(down) + 1)
    return str(Path(*down, *up, "escaped", *tail))


@st.composite
def inside_paths(draw: st.DrawFn, root: Path) -> str:
    """A path inside `root` by construction: names only, no climb, no planted link."""
    tail = draw(names)
    return str(Path(root, *tail)) if draw(st.booleans()) else str(Path(*tail) if tail else ".")


@settings(max_examples=200)
@given(data=st.data(), kind=st.sampled_from(["edit", "delete", "move"]))
def test_a_change_with_any_location_outside_the_root_is_never_allowed(
    tree: Tree, data: st.DataObject, kind: str
) -> None:
    boundary = data.draw(st.sampled_from([tree.owned, tree.handed, tree.handed_execute]))
    inside = data.draw(st.lists(inside_paths(boundary.root), max_size=3))
    outside = data.draw(st.lists(outside_paths(boundary.root, tree.outside), min_size=1))
    locations = data.draw(st.permutations(inside + outside))
    request = PermissionRequest("call", "Edit", kind, tuple(locations))
    supervision = data.draw(supervisions)
    decision = decide(request, boundary, supervision)
    assert decision.allow is False
    assert decision.rule is Rule.CHANGE_OUTSIDE_ROOT
    reply = answer(decision, data.draw(well_formed_options), supervision)
    assert not reply.allows


@given(data=st.data(), kind=st.sampled_from(["edit", "delete", "move"]))
def test_a_change_whose_every_location_is_inside_the_root_is_allowed(
    tree: Tree, data: st.DataObject, kind: str
) -> None:
    boundary = data.draw(st.sampled_from([tree.owned, tree.handed]))
    locations = data.draw(st.lists(inside_paths(boundary.root), min_size=1, max_size=4))
    request = PermissionRequest("call", "Edit", kind, tuple(locations))
    decision = decide(request, boundary, data.draw(supervisions))
    if kind != "edit" and any(
        resolve_location(p, boundary.root) == boundary.root for p in locations
    ):
        # Deleting or moving the root itself is never allowed.
        assert (decision.allow, decision.rule) == (False, Rule.PROTECTED_PATH)
        return
    assert (decision.allow, decision.rule) == (True, Rule.CHANGE_INSIDE_ROOT)


call_ids = st.one_of(st.text(max_size=20), st.text(max_size=8).map(lambda s: "exit_plan_mode" + s))
raw_inputs: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(["command", "modeId", "mode", "plan", "file_path", "url"]),
        st.text(max_size=10),
        max_size=3,
    ),
)


@settings(max_examples=300)
@given(
    data=st.data(),
    kind=st.one_of(st.sampled_from(["execute", "fetch", "other"]), st.none()),
    call_id=call_ids,
    raw_input=raw_inputs,
    offered=well_formed_options,
    supervision=supervisions,
)
def test_in_a_handed_root_without_allow_execute_unverifiable_actions_are_never_allowed(
    tree: Tree,
    data: st.DataObject,
    kind: str | None,
    call_id: str,
    raw_input: Any,
    offered: tuple[PermissionOption, ...],
    supervision: Supervision,
) -> None:
    locations = data.draw(
        st.lists(st.one_of(inside_paths(tree.handed.root), st.text(max_size=10)), max_size=3)
    )
    request = PermissionRequest(call_id, "t", kind, tuple(locations), raw_input, offered)
    decision = decide(request, tree.handed, supervision)
    reply = answer(decision, offered, supervision)
    if is_plan_exit_tool(request, supervision):
        # gemini's exit_plan_mode (kind other) is a switch: only its supervision-keeping yes.
        assert supervision.profile is not None
        table = supervision.profile.exit_plan_options
        assert not reply.allows or table[str(reply.option_id)] is ExitEffect.KEEPS_SUPERVISION
        return
    assert decision.allow is False
    assert not reply.allows


mode_options = st.lists(
    st.tuples(
        st.one_of(st.sampled_from(KNOWN_IDS), st.text(min_size=1, max_size=8)),
        st.sampled_from(sorted(OPTION_KINDS)),
    ),
    min_size=1,
    max_size=7,
    unique_by=lambda pair: pair[0],
).map(lambda pairs: tuple(PermissionOption(oid, kind) for oid, kind in pairs))
targets = st.one_of(
    st.none(),
    st.builds(
        lambda key, value: {key: value, "plan": "1. do it"},
        st.sampled_from(["modeId", "mode", "currentModeId"]),
        st.sampled_from(
            ["default", "plan", "read-only", "auto", "acceptEdits", "yolo", "bypass", ""]
        ),
    ),
)


@settings(max_examples=300)
@given(offered=mode_options, raw_input=targets, supervision=supervisions, data=st.data())
def test_a_mode_switch_never_picks_an_option_known_to_drop_supervision(
    tree: Tree,
    offered: tuple[PermissionOption, ...],
    raw_input: Any,
    supervision: Supervision,
    data: st.DataObject,
) -> None:
    boundary = data.draw(st.sampled_from([tree.owned, tree.handed, tree.handed_execute]))
    request = PermissionRequest("toolu", "Approve Plan", "switch_mode", (), raw_input, offered)
    decision = decide(request, boundary, supervision)
    reply = answer(decision, offered, supervision)
    table = exit_plan_table(supervision.profile)
    if reply.option_id is not None:
        assert table.get(reply.option_id) is not ExitEffect.DROPS_SUPERVISION
    if reply.allows and raw_input is None:
        assert table.get(str(reply.option_id)) is ExitEffect.KEEPS_SUPERVISION

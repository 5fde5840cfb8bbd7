"""The boundary under attack: hostile contextIds, planted directories, symlinks, aliases.

Real directories and real symlinks under the test's tmp_path; nothing is mocked.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from a2a_acp_bridge.adapters import CLAUDE
from a2a_acp_bridge.boundary import (
    Boundary,
    Sandboxes,
    handed_boundary,
    sandbox_label,
)
from a2a_acp_bridge.errors import SandboxError
from a2a_acp_bridge.permissions import (
    PermissionRequest,
    Rule,
    Supervision,
    decide,
    is_inside,
)

SUPERVISION = Supervision(CLAUDE, "default")

HOSTILE_CONTEXT_IDS = [
    pytest.param("..", "ctx", id="dotdot"),
    pytest.param("../..", "ctx", id="dotdot-dotdot"),
    pytest.param("/etc", "etc", id="absolute-etc"),
    pytest.param("../../etc/passwd", "etcpassw", id="climb-to-etc-passwd"),
    pytest.param(".", "ctx", id="dot"),
    pytest.param("", "ctx", id="empty"),
    pytest.param("x" * 10_000, "xxxxxxxx", id="ten-kilobytes"),
    pytest.param("日本語の会話🙂", "ctx", id="unicode"),
    pytest.param("ab\x00cd/../..", "abcd", id="nul-byte"),
    pytest.param("sandboxes", "sandboxe", id="the-parents-own-name"),
]


@pytest.mark.parametrize(("context_id", "label"), HOSTILE_CONTEXT_IDS)
def test_a_hostile_context_id_lands_in_a_fresh_directory_inside_the_parent(
    tmp_path: Path, context_id: str, label: str
) -> None:
    sandboxes = Sandboxes(tmp_path / "sandboxes")
    parent = sandboxes.parent
    before = set(parent.iterdir())
    boundary = sandboxes.for_context(context_id)
    assert boundary.owned is True
    assert boundary.root.parent == parent
    assert boundary.root not in before
    assert boundary.root.is_dir()
    assert not boundary.root.is_symlink()
    assert list(boundary.root.iterdir()) == []
    assert boundary.root.name.startswith(f"{label}-")
    assert sandbox_label(context_id) == label
    # The same conversation comes back to the same directory.
    assert sandboxes.for_context(context_id) == boundary


def test_every_conversation_gets_its_own_directory_even_with_the_same_label(
    tmp_path: Path,
) -> None:
    sandboxes = Sandboxes(tmp_path / "sandboxes")
    ids = ["..", "../..", ".", "", "日本", "/"]  # all labelled "ctx"
    roots = {sandboxes.for_context(i).root for i in ids}
    assert len(roots) == len(ids)
    assert {r.name.split("-")[0] for r in roots} == {"ctx"}


def test_a_planted_directory_or_symlink_wearing_a_sandbox_name_is_never_adopted(
    tmp_path: Path,
) -> None:
    sandboxes = Sandboxes(tmp_path / "sandboxes")
    parent = sandboxes.parent
    planted = parent / "ctx-planted"
    planted.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    link = parent / "ctx-link"
    link.symlink_to(outside)
    for context_id in ("", "..", "ctx"):
        root = sandboxes.for_context(context_id).root
        assert root not in (planted, link, outside)
    for impostor in (planted, link):
        with pytest.raises(SandboxError, match="not a sandbox this bridge made"):
            sandboxes.adopt("someone", Boundary(root=impostor, owned=True))
    made = sandboxes.create()
    with pytest.raises(SandboxError):
        sandboxes.adopt("someone", Boundary(root=made.root, owned=False))
    sandboxes.adopt("someone", made)
    assert sandboxes.for_context("someone") == made


def test_another_bridges_sandboxes_are_not_this_ones(tmp_path: Path) -> None:
    mine = Sandboxes(tmp_path / "sandboxes")
    theirs = Sandboxes(tmp_path / "sandboxes")
    foreign = theirs.create("them")
    with pytest.raises(SandboxError):
        mine.adopt("me", foreign)


def test_a_deleted_sandbox_is_replaced_by_a_new_one(tmp_path: Path) -> None:
    sandboxes = Sandboxes(tmp_path / "sandboxes")
    first = sandboxes.for_context("conversation")
    first.root.rmdir()
    assert not sandboxes.is_current("conversation", first)
    second = sandboxes.for_context("conversation")
    assert second.root != first.root
    assert second.root.is_dir()
    assert sandboxes.is_current("conversation", second)


def test_a_sandbox_replaced_by_a_symlink_is_not_reused(tmp_path: Path) -> None:
    sandboxes = Sandboxes(tmp_path / "sandboxes")
    target = tmp_path / "target"
    target.mkdir()
    first = sandboxes.for_context("conversation")
    first.root.rmdir()
    first.root.symlink_to(target)
    second = sandboxes.for_context("conversation")
    assert second.root not in (first.root, target)
    assert second.root.parent == sandboxes.parent


def test_a_sandbox_moved_aside_and_replaced_by_a_link_to_itself_is_not_reused(
    tmp_path: Path,
) -> None:
    sandboxes = Sandboxes(tmp_path / "sandboxes")
    first = sandboxes.for_context("conversation")
    aside = first.root.with_name(first.root.name + "-aside")
    first.root.rename(aside)  # the very directory mkdtemp made, same inode
    first.root.symlink_to(aside)
    assert not sandboxes.is_current("conversation", first)
    second = sandboxes.for_context("conversation")
    assert second.root not in (first.root, aside)


def test_a_sandbox_replaced_by_another_directory_of_the_same_name_is_not_reused(
    tmp_path: Path,
) -> None:
    sandboxes = Sandboxes(tmp_path / "sandboxes")
    first = sandboxes.for_context("conversation")
    impostor = tmp_path / "impostor"
    impostor.mkdir()  # exists alongside the sandbox, so it cannot share its inode
    (impostor / "planted.txt").write_text("hello")
    first.root.rmdir()
    impostor.rename(first.root)
    assert first.root.is_dir()
    assert not first.root.is_symlink()
    assert not sandboxes.is_current("conversation", first)
    second = sandboxes.for_context("conversation")
    assert second.root != first.root
    assert list(second.root.iterdir()) == []


def test_a_sandbox_parent_that_cannot_be_a_directory_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "sandboxes"
    blocker.write_text("a file where the sandboxes should go")
    with pytest.raises(SandboxError, match="cannot create the sandbox directory"):
        Sandboxes(blocker).for_context("c")


def test_a_symlinked_sandbox_parent_gives_resolved_roots_that_its_alias_reaches(
    tmp_path: Path,
) -> None:
    real = tmp_path / "private" / "var" / "sandboxes"
    real.mkdir(parents=True)
    alias = tmp_path / "var"
    alias.symlink_to(tmp_path / "private" / "var")
    sandboxes = Sandboxes(alias / "sandboxes")
    boundary = sandboxes.for_context("c1")
    assert boundary.root.parent == real
    via_alias = alias / "sandboxes" / boundary.root.name / "notes.txt"
    assert is_inside(str(via_alias), boundary.root)
    request = PermissionRequest("t", None, "edit", (str(via_alias),))
    assert decide(request, boundary, SUPERVISION).rule is Rule.CHANGE_INSIDE_ROOT
    assert sandboxes.for_context("c1") == boundary


def test_a_handed_root_reached_through_an_alias_is_resolved_once(tmp_path: Path) -> None:
    real = tmp_path / "private" / "project"
    real.mkdir(parents=True)
    alias = tmp_path / "project"
    alias.symlink_to(real)
    boundary = handed_boundary(alias, allow_execute=False)
    assert boundary.root == real
    assert boundary.owned is False
    assert is_inside(str(alias / "src" / "main.py"), boundary.root)
    assert is_inside(str(real / "src" / "main.py"), boundary.root)


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        pytest.param("missing", "does not exist", id="a-missing-path"),
        pytest.param("file", "is not a directory", id="a-file"),
        pytest.param("link-to-file", "is not a directory", id="a-link-to-a-file"),
        pytest.param("dangling", "does not exist", id="a-dangling-link"),
    ],
)
def test_acp_cwd_must_be_an_existing_directory(tmp_path: Path, setup: str, message: str) -> None:
    path = tmp_path / "root"
    if setup == "file":
        path.write_text("x")
    elif setup == "link-to-file":
        (tmp_path / "f").write_text("x")
        path.symlink_to(tmp_path / "f")
    elif setup == "dangling":
        path.symlink_to(tmp_path / "nowhere")
    with pytest.raises(SandboxError, match=message):
        handed_boundary(path, allow_execute=False)


@pytest.mark.parametrize("root", ["relative/root", "/abs/../escape"], ids=repr)
def test_a_boundary_root_must_be_absolute_and_normalised(root: str) -> None:
    with pytest.raises(ValueError, match="absolute and normalised"):
        Boundary(root=Path(root), owned=False)


# --- symlinks in and out of the root ---------------------------------------------------


@pytest.fixture
def sandbox(tmp_path: Path) -> Boundary:
    return Sandboxes(tmp_path / "sandboxes").create("links")


def edit_allowed(boundary: Boundary, path: Path | str) -> bool:
    request = PermissionRequest("t", None, "edit", (str(path),))
    return decide(request, boundary, SUPERVISION).allow


def test_a_link_inside_the_root_pointing_out_is_caught(sandbox: Boundary, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (sandbox.root / "escape").symlink_to(outside)
    (sandbox.root / "passwd").symlink_to("/etc/passwd")
    assert not edit_allowed(sandbox, sandbox.root / "escape" / "x.txt")
    assert not edit_allowed(sandbox, "escape/new/deeper.txt")
    assert not edit_allowed(sandbox, sandbox.root / "passwd")
    assert not edit_allowed(sandbox, "passwd")


def test_a_dangling_link_pointing_out_is_caught(sandbox: Boundary, tmp_path: Path) -> None:
    (sandbox.root / "later").symlink_to(tmp_path / "not-yet" / "file.txt")
    assert not edit_allowed(sandbox, "later")


def test_a_link_inside_the_root_pointing_inside_is_fine(sandbox: Boundary) -> None:
    (sandbox.root / "real").mkdir()
    (sandbox.root / "alias").symlink_to(sandbox.root / "real")
    (sandbox.root / "relative").symlink_to("real")
    assert edit_allowed(sandbox, "alias/x.txt")
    assert edit_allowed(sandbox, sandbox.root / "relative" / "x.txt")


def test_a_link_outside_the_root_pointing_in_lands_inside(
    sandbox: Boundary, tmp_path: Path
) -> None:
    door = tmp_path / "door"
    door.symlink_to(sandbox.root)
    assert edit_allowed(sandbox, door / "x.txt")
    assert not edit_allowed(sandbox, door / ".." / "x.txt")


def test_a_link_whose_climb_leaves_the_root_is_caught(sandbox: Boundary, tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    (sandbox.root / "jump").symlink_to(deep)
    # jump/.. is tmp/a, not the root: '..' applies to where the link leads.
    assert not edit_allowed(sandbox, "jump/../x.txt")


def test_a_symlink_loop_is_refused(sandbox: Boundary) -> None:
    (sandbox.root / "ping").symlink_to(sandbox.root / "pong")
    (sandbox.root / "pong").symlink_to(sandbox.root / "ping")
    assert not edit_allowed(sandbox, "ping/x.txt")
    assert not edit_allowed(sandbox, "ping/../../x.txt")


def test_a_link_to_the_root_itself_is_the_root(sandbox: Boundary) -> None:
    (sandbox.root / "self").symlink_to(".")
    assert edit_allowed(sandbox, "self/self/self/x.txt")


def test_the_parent_of_a_sandbox_and_its_siblings_are_outside(sandbox: Boundary) -> None:
    sibling = sandbox.root.parent / (sandbox.root.name + "-sibling")
    sibling.mkdir()
    assert not edit_allowed(sandbox, sandbox.root.parent)
    assert not edit_allowed(sandbox, sibling / "x.txt")
    assert not edit_allowed(sandbox, os.path.join(sandbox.root, "..", sibling.name, "x.txt"))

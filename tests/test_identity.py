"""A directory's identity tells it from a new one made under the same name, also when the
file system hands the new one the old inode number (it does, soon after a delete): the
inode's generation is part of the identity where the file system keeps one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from a2a_acp_bridge.boundary import directory_identity

# Deletes and re-creations tried until the inode number comes back.
ATTEMPTS = 500


def test_a_directory_remade_on_the_same_inode_has_another_identity(tmp_path: Path) -> None:
    path = tmp_path / "sandbox"
    path.mkdir()
    first = directory_identity(path)
    assert first is not None
    for _ in range(ATTEMPTS):
        path.rmdir()
        path.mkdir()
        if os.stat(path).st_ino == first[1]:
            break
    else:
        pytest.skip("this file system did not reuse the inode number")
    again = directory_identity(path)
    assert again is not None
    assert again[:2] == first[:2]  # same device, same inode number ...
    assert again != first  # ... and still told apart


def test_a_symlink_and_a_file_have_no_directory_identity(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "file").write_text("x")
    assert directory_identity(tmp_path / "link") is None
    assert directory_identity(tmp_path / "file") is None
    assert directory_identity(tmp_path / "missing") is None

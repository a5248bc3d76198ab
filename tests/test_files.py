"""shared.service.files: a file is replaced whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shared.service.files import create_whole, replacing, write_whole


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text("the last good export\n")
    with pytest.raises(RuntimeError), replacing(path, text=True) as out:
        out.write("a,b\n" * 10_000)  # beyond any buffer: on disk in the temporary file
        raise RuntimeError("killed midway")
    assert path.read_text() == "the last good export\n"
    assert [p.name for p in tmp_path.iterdir()] == ["export.csv"]


def test_a_whole_write_replaces_it_with_exactly_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "ca.pem"
    path.write_text("old")
    os.chmod(path, 0o600)
    old_umask = os.umask(0o077)  # the umask does not decide the mode
    try:
        write_whole(path, b"new", mode=0o644)
    finally:
        os.umask(old_umask)
    assert path.read_bytes() == b"new" and path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["ca.pem"]


def test_a_folder_is_refused_as_opening_it_would_be(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError):
        write_whole(Path(""), b"x")
    with pytest.raises(IsADirectoryError):
        write_whole(tmp_path, b"x")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("links", [True, False], ids=["hard links", "no hard links"])
def test_create_whole_creates_only_once_with_exactly_the_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, links: bool
) -> None:
    """The first writer wins; a second gets False and changes nothing (replicas sharing a key
    file start at once); no temporary file is left either way."""
    if not links:

        def refuse(*_args: object) -> None:
            raise PermissionError(1, "Operation not permitted")

        monkeypatch.setattr(os, "link", refuse)
    path = tmp_path / "signing-key.pem"
    old_umask = os.umask(0o000)
    try:
        assert create_whole(path, b"first", mode=0o600)
        assert not create_whole(path, b"second", mode=0o600)
    finally:
        os.umask(old_umask)
    assert path.read_bytes() == b"first" and path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["signing-key.pem"]

"""Files the services and commands write beside the database: whole, or not at all."""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


@contextmanager
def _temporary_beside(path: Path, mode: int, text: bool) -> Iterator[tuple[Path, IO[Any]]]:
    """A new temporary file beside ``path`` (a random name: replicas in containers may all be
    pid 1; exactly ``mode``) and a file object on it, flushed and fsynced on a clean exit; the
    file is deleted on an error (the caller renames or links it, then deletes what is left)."""
    if not path.name:  # "" or "/": a folder, as opening it for writing would say
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)  # the umask does not decide a key's or an export's mode
        with open(
            fd, "w" if text else "wb", **({"encoding": "utf-8", "newline": ""} if text else {})
        ) as handle:
            yield temporary, handle
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


@contextmanager
def replacing(path: Path, *, mode: int = 0o600, text: bool = False) -> Iterator[IO[Any]]:
    """A file object on a new temporary file beside ``path`` (a random name, exactly ``mode``):
    on a clean exit it is flushed, fsynced and renamed over ``path``; on an error it is deleted.
    A reader, or a crash at any moment, sees the old file or the new one whole, never a part
    (a kill truncated a ledger export into a shorter-looking ledger, and left an empty CA
    certificate that kept TLS down: found by a crash audit)."""
    with _temporary_beside(path, mode, text) as (temporary, handle):
        yield handle
    try:
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _sync_folder(path.parent)


def write_whole(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """``data`` into ``path`` by :func:`replacing`."""
    with replacing(path, mode=mode) as handle:
        handle.write(data)


def create_whole(path: Path, data: bytes, *, mode: int = 0o600) -> bool:
    """``data`` into ``path`` only if it does not exist yet: False if it does (another process
    created it first: replicas sharing a key file start at once). The complete temporary file is
    hard-linked to ``path``, so no reader ever sees a part; where hard links fail (EPERM,
    ENOTSUP), ``path`` is created exclusively and written, and a reader at that moment may see
    a part (a replica's start then fails naming the file, and its next start reads it whole)."""
    with _temporary_beside(path, mode, False) as (temporary, handle):
        handle.write(data)
    try:
        os.link(temporary, path)
    except FileExistsError:
        return False
    except OSError:
        return _create_exclusive(path, data, mode)
    finally:
        temporary.unlink(missing_ok=True)
    _sync_folder(path.parent)
    return True


def _create_exclusive(path: Path, data: bytes, mode: int) -> bool:
    """:func:`create_whole`'s fallback where hard links fail: O_EXCL, then write and fsync."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, mode)
        with open(fd, "wb", closefd=False) as handle:
            handle.write(data)
        os.fsync(fd)
    finally:
        os.close(fd)
    _sync_folder(path.parent)
    return True


def _sync_folder(folder: Path) -> None:
    """fsync a folder, so that a rename in it survives a power loss (where the OS allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

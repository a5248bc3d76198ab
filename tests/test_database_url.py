"""shared.service.database_url: where a database is, and a SQLite file only its owner can read."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from features_party.db.engine import make_engine as features_engine
from labels_party.db.engine import make_engine as labels_engine
from shared.service.database_url import create_private_sqlite, sqlite_path, sqlite_url


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("make_engine", [labels_engine, features_engine])
def test_a_new_database_and_its_wal_are_readable_by_their_owner_only(tmp_path, make_engine):
    """Issue 24.7: the labels party's SQLite file (raw labels, the ledger) was 0644."""
    path = tmp_path / "service.db"
    engine = make_engine(sqlite_url(path))
    with engine.connect() as conn:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
        wal = path.with_name(path.name + "-wal")
        assert wal.exists() and mode(wal) == 0o600
    engine.dispose()
    assert mode(path) == 0o600


@pytest.mark.parametrize("name", ["a?b.db", "x%41.db", "é.db", "a#b c.db"])
@pytest.mark.parametrize("make_engine", [labels_engine, features_engine])
def test_a_file_name_with_url_syntax_is_that_file(tmp_path, make_engine, name):
    """Found by an audit: --db 'a?b.db' opened (and created) 'a', '%41' was decoded, and 'é.db'
    was pre-created as '%C3%A9.db' so SQLite made the real file with the umask's mode (0644)."""
    path = tmp_path / name
    url = sqlite_url(path)
    assert sqlite_path(url) == path.resolve()
    engine = make_engine(url)
    with engine.connect() as conn:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
    engine.dispose()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [
            name,
            *(f"{name}-{end}" for end in ("wal", "shm") if (tmp_path / f"{name}-{end}").exists()),
        ]
    )
    assert mode(path) == 0o600


def test_an_existing_file_keeps_the_mode_its_owner_gave_it(tmp_path):
    path = tmp_path / "shared.db"
    path.touch(mode=0o640)
    path.chmod(0o640)
    create_private_sqlite(sqlite_url(path))
    assert mode(path) == 0o640


def test_a_missing_folder_is_not_created(tmp_path):
    """A typo in --db stays a one-line error from the service (tests/labels_party/test_defects)."""
    create_private_sqlite(sqlite_url(tmp_path / "no" / "such" / "x.db"))
    assert not (tmp_path / "no").exists()


def test_other_databases_are_left_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    create_private_sqlite("postgresql+psycopg://u@localhost/db")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("make_engine", [labels_engine, features_engine])
def test_a_new_database_named_by_a_uri_filename_is_private_too(tmp_path, make_engine):
    """A ``file:PATH?...&uri=true`` URL used to skip the private creation (SQLite made it 0644)."""
    path = tmp_path / "uri.db"
    engine = make_engine(f"sqlite:///file:{path}?mode=rwc&uri=true")
    with engine.connect() as conn:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
    engine.dispose()
    assert mode(path) == 0o600


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:////srv/f.db", Path("/srv/f.db")),
        ("sqlite:///rel/f.db", Path("rel/f.db")),
        ("sqlite:///file:/srv/f.db?mode=ro&uri=true", Path("/srv/f.db")),
        ("sqlite:///file:/srv/a%20b.db?uri=true", Path("/srv/a b.db")),
        ("sqlite:///file::memory:?uri=true", None),
        ("sqlite://", None),
        ("postgresql+psycopg://u@h/db", None),
    ],
)
def test_sqlite_path_reads_plain_paths_and_uri_filenames(url: str, expected: Path | None):
    assert sqlite_path(url) == expected


def test_a_read_only_uri_creates_no_file(tmp_path):
    path = tmp_path / "missing.db"
    create_private_sqlite(f"sqlite:///file:{path}?mode=ro&uri=true")
    assert not path.exists()

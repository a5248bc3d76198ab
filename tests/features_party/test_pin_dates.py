"""A pin without dates stops the features party at START, not at every pull (issue 24, item 4).

A key the pin gives no validity (a bare PEM block, base64 lines) cannot date-check a receipt, so
the pull refuses every release it signs (``UndatedKeyError``). The service used to start with
such a pin and fail each pull; now it refuses to start, naming the option and the dated pins
to use, unless the operator waives the date check with ``--no-date-check`` /
``LABELDP_NO_DATE_CHECK`` (then a warning at start names the keys). No labels party is needed:
tests/features_party/test_receipts.py pulls with real receipts.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from features_party.config import NO_DATE_CHECK_ENV, Settings
from shared.errors import InvalidParameterError
from shared.service import receipt as rc

KEY = Ed25519PrivateKey.generate().public_key()
OTHER = Ed25519PrivateKey.generate().public_key()


def _base(tmp_path: Path) -> dict[str, Any]:
    return {"db_path": tmp_path / "f.db", "labels_url": "http://127.0.0.1:9", "labels_token": "t"}


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("form", ["pem", "base64", "one of two"])
def test_an_undated_pin_is_refused_at_start_naming_the_option_and_the_dated_pins(
    tmp_path: Path, form: str
) -> None:
    text = {
        "pem": rc.public_pem(KEY),
        "base64": rc.public_b64(KEY) + "\n",
        "one of two": rc.pem_with_validity(OTHER, "2000-01-01T00:00:00Z", None)
        + rc.public_pem(KEY),
    }[form]
    pin = _write(tmp_path / "labels.pub", text)
    with pytest.raises(InvalidParameterError) as refused:
        Settings(**_base(tmp_path), labels_public_key=pin)
    message = str(refused.value)
    for part in (
        "--labels-public-key", "LABELDP_LABELS_PUBLIC_KEY", str(pin), rc.key_id(KEY),
        "labeldp keys public --all", "GET /v1/keys", "--no-date-check", NO_DATE_CHECK_ENV,
    ):  # fmt: skip
        assert part in message, (part, message)
    assert rc.key_id(OTHER) not in message  # the dated key is not the problem


def test_a_dated_pin_starts(tmp_path: Path) -> None:
    dated = rc.pem_with_validity(KEY, "2000-01-01T00:00:00Z", None)
    retired = rc.pem_with_validity(OTHER, None, "2001-01-01T00:00:00Z")
    pin = _write(tmp_path / "labels.pub", dated + retired)
    assert Settings(**_base(tmp_path), labels_public_key=pin).no_date_check is False


def test_no_date_check_admits_an_undated_pin_and_needs_a_pin(tmp_path: Path) -> None:
    pin = _write(tmp_path / "labels.pub", rc.public_pem(KEY))
    assert Settings(**_base(tmp_path), labels_public_key=pin, no_date_check=True).no_date_check
    with pytest.raises(InvalidParameterError, match="needs --labels-public-key"):
        Settings(**_base(tmp_path), no_date_check=True)


def test_the_environment_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pin = _write(tmp_path / "labels.pub", rc.public_pem(KEY))
    given = {"database_url": "", "db_path": tmp_path / "f.db", "labels_url": "http://127.0.0.1:9"}
    monkeypatch.setenv("LABELDP_LABELS_PUBLIC_KEY", str(pin))
    monkeypatch.delenv(NO_DATE_CHECK_ENV, raising=False)
    with pytest.raises(InvalidParameterError, match="states no validity"):
        Settings.from_env(labels_token="t", **given)
    for value in ("1", "true", "YES"):
        monkeypatch.setenv(NO_DATE_CHECK_ENV, value)
        assert Settings.from_env(labels_token="t", **given).no_date_check
    for value in ("0", "no", ""):
        monkeypatch.setenv(NO_DATE_CHECK_ENV, value)
        with pytest.raises(InvalidParameterError, match="states no validity"):
            Settings.from_env(labels_token="t", **given)
    monkeypatch.setenv(NO_DATE_CHECK_ENV, "maybe")
    with pytest.raises(InvalidParameterError, match=f"{NO_DATE_CHECK_ENV} must be 1 or 0"):
        Settings.from_env(labels_token="t", **given)


def test_serve_features_refuses_an_undated_pin_unless_told(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``labeldp serve features``: exit 2 with one line naming the option and the dated pins;
    with ``--no-date-check`` it serves, and its start logs which keys go undated."""
    import features_party.cli
    from features_party.main import _warn_undated
    from labeldp.cli import main as labeldp

    for name in ("LABELDP_LABELS_PUBLIC_KEY", NO_DATE_CHECK_ENV, "LABELDP_FEATURES_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    served: list[Settings] = []
    monkeypatch.setattr(
        features_party.cli, "serve_app", lambda _app, settings, **_kw: served.append(settings)
    )
    pin = _write(tmp_path / "labels.pub", rc.public_pem(KEY))
    argv = [
        "serve", "features", "--db", str(tmp_path / "f.db"), "--labels-url", "http://127.0.0.1:9",
        "--token", "t", "--labels-public-key", str(pin),
    ]  # fmt: skip
    assert labeldp(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("labeldp serve features: --labels-public-key"), err
    assert "labeldp keys public --all" in err and "--no-date-check" in err
    assert not served
    assert labeldp([*argv, "--no-date-check"]) == 0
    (settings,) = served
    assert settings.no_date_check and settings.labels_public_key == pin
    with caplog.at_level(logging.WARNING, logger="features_party"):
        _warn_undated(settings)
    assert f"states no validity for key {rc.key_id(KEY)}" in caplog.text
    # A pin dated a day that does not exist: one line naming it (found by the CLI audit: a
    # traceback).
    _write(pin, rc.pem_with_validity(KEY, "2025-02-30T00:00:00Z", None))
    assert labeldp(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"labeldp serve features: public key file {pin}: Created"), err
    assert "without checking their date" in caplog.text

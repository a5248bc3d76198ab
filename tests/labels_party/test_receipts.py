"""Signed release receipts through the real app: content, tampering, the CLI, key rotation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from labels_party.config import DEFAULT_KEY_FILE
from shared.errors import InvalidParameterError
from shared.message import BINARY_MEDIA_TYPE
from shared.service import receipt as rc
from shared.service.receipt_cli import check_message_file
from tests.commands import labeldp
from tests.labels_party.conftest import (
    ADV,
    OPS,
    PUB,
    create_dataset,
    ledger_rows,
    put_labels,
    register,
    release,
)

IDS = [f"e{i:03d}" for i in range(60)]


def released(client: Any, name: str = "ds", **body: Any) -> dict[str, Any]:
    if client.get(f"/v1/datasets/{name}", headers=OPS).status_code == 404:
        create_dataset(client, name)
        register(client, name, IDS)
        assert (
            put_labels(client, name, [(i, float(k)) for k, i in enumerate(IDS)]).status_code == 200
        )
    response = release(client, name, **body)
    assert response.status_code == 201, response.text
    return response.json()


def keys_of(client: Any) -> dict[str, Any]:
    listed = client.get("/v1/keys", headers=PUB)
    assert listed.status_code == 200
    return {item["key_id"]: rc.from_b64(item["public_key"]) for item in listed.json()["keys"]}


def pin_of(client: Any, path: Path) -> Path:
    """The keys as a publisher pins them: every ``public_key_pem`` of ``GET /v1/keys`` (each
    block under its Key-Id / Created / Retired lines), written to ``path``."""
    listed = client.get("/v1/keys", headers=PUB).json()["keys"]
    path.write_text("".join(item["public_key_pem"] for item in listed))
    return path


def test_receipt_states_the_release_and_its_ledger_entries(client: Any, db_path: Path) -> None:
    meta = released(client, epsilon="0.7", epsilon_histogram="0.2")
    answer = client.get(f"/v1/releases/{meta['id']}/receipt", headers=PUB)
    assert answer.status_code == 200
    receipt = answer.json()
    body = rc.verify(receipt, keys_of(client))
    assert body["release_id"] == meta["id"] and body["dataset"] == "ds"
    assert (body["epsilon1"], body["epsilon2"], body["epsilon"]) == ("0.2", "0.5", "0.7")
    assert body["delta"] == "0" and body["n"] == len(IDS)
    assert body["mechanism"] == meta["mechanism"] and body["params"] == meta["params"]
    assert body["message_sha256"] == meta["message_sha256"]
    assert body["binary_sha256"] == meta["binary_sha256"]
    entries = [e for e in ledger_rows(db_path) if e["release_id"] == meta["id"]]
    assert body["ledger_entries"] == [
        {"seq": e["seq"], "kind": e["kind"], "entry_hash": e["entry_hash"]} for e in entries
    ]
    assert body["product"] == "labeldp" and body["product_version"]
    # Signed once (right after the release): every request returns the same bytes.
    again = client.get(f"/v1/releases/{meta['id']}/receipt", headers=ADV).json()
    assert again == receipt
    # The message the publisher pulls is the one the receipt names.
    pulled = client.get(
        f"/v1/releases/{meta['id']}/message", headers={**PUB, "Accept": BINARY_MEDIA_TYPE}
    )
    message = db_path.parent / "message.bin"
    message.write_bytes(pulled.content)
    check_message_file(body, message)


def test_receipts_need_a_token_and_a_known_release(client: Any) -> None:
    meta = released(client)
    assert client.get(f"/v1/releases/{meta['id']}/receipt").status_code == 401
    assert client.get("/v1/keys").status_code == 401
    missing = client.get("/v1/releases/rel_" + "0" * 24 + "/receipt", headers=OPS)
    assert missing.status_code == 404 and missing.json()["errors"][0]["field"] == "release_id"
    malformed = client.get("/v1/releases/nope/receipt", headers=OPS)
    assert malformed.status_code == 404 and malformed.json()["errors"][0]["field"] == "release_id"


def test_tampered_message_body_fails_against_the_receipt(client: Any, tmp_path: Path) -> None:
    meta = released(client)
    body = rc.verify(
        client.get(f"/v1/releases/{meta['id']}/receipt", headers=PUB).json(), keys_of(client)
    )
    for accept in (BINARY_MEDIA_TYPE, "application/json"):
        raw = bytearray(
            client.get(
                f"/v1/releases/{meta['id']}/message", headers={**PUB, "Accept": accept}
            ).content
        )
        path = tmp_path / "m"
        path.write_bytes(bytes(raw))
        check_message_file(body, path)
        raw[-5] ^= 0x01  # inside the last noisy label / its last digits
        path.write_bytes(bytes(raw))
        with pytest.raises(rc.IntegrityError):
            check_message_file(body, path)


def test_cli_verify_exit_codes(client: Any, db_path: Path, tmp_path: Path) -> None:
    meta = released(client)
    receipt = client.get(f"/v1/releases/{meta['id']}/receipt", headers=PUB).json()
    ((kid, _),) = keys_of(client).items()
    pin = pin_of(client, tmp_path / "labels.pub")
    good = tmp_path / "receipt.json"
    good.write_text(json.dumps(receipt))
    message = tmp_path / "message.bin"
    message.write_bytes(
        client.get(
            f"/v1/releases/{meta['id']}/message", headers={**PUB, "Accept": BINARY_MEDIA_TYPE}
        ).content
    )
    ok = labeldp(
        "receipt", "verify", str(good), "--public-key", str(pin), "--message", str(message)
    )
    assert ok.returncode == 0, ok.stderr
    assert meta["id"] in ok.stdout and kid in ok.stdout

    bad = tmp_path / "tampered.json"
    bad.write_text(json.dumps({**receipt, "epsilon": "0.5"}))
    tampered = labeldp("receipt", "verify", str(bad), "--public-key", str(pin))
    assert tampered.returncode == 1 and "INVALID" in tampered.stderr

    other = tmp_path / "other.pub"
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    other.write_text(rc.public_pem(Ed25519PrivateKey.generate().public_key()))
    assert labeldp("receipt", "verify", str(good), "--public-key", str(other)).returncode == 1

    changed = bytearray(message.read_bytes())
    changed[-5] ^= 1
    message.write_bytes(bytes(changed))
    args = ("receipt", "verify", str(good), "--public-key", str(pin), "--message", str(message))
    assert labeldp(*args).returncode == 1
    assert (
        labeldp(
            "receipt", "verify", str(tmp_path / "nope.json"), "--public-key", str(pin)
        ).returncode
        == 2
    )


def test_cli_refuses_the_issues_tampered_json_message(client: Any, tmp_path: Path) -> None:
    """Issue 24's attack as the user ran it: a JSON message whose noisy histogram is reversed
    and whose default_label changed (the body untouched) no longer verifies with `labeldp
    receipt verify --message`, and the output names both fields; the untouched JSON does."""
    meta = released(client)
    receipt = client.get(f"/v1/releases/{meta['id']}/receipt", headers=PUB).json()
    pin = pin_of(client, tmp_path / "labels.pub")
    (tmp_path / "receipt.json").write_text(json.dumps(receipt))
    message = client.get(f"/v1/releases/{meta['id']}/message", headers=PUB).json()
    (tmp_path / "message.json").write_text(json.dumps(message))
    args = ["receipt", "verify", str(tmp_path / "receipt.json"), "--public-key", str(pin)]
    assert labeldp(*args, "--message", str(tmp_path / "message.json")).returncode == 0
    header = message["header"]
    header["histogram"]["probs"] = header["histogram"]["probs"][::-1]
    header["default_label"] = header["default_label"] + 1.0
    (tmp_path / "tampered.json").write_text(json.dumps(message))
    tampered = labeldp(*args, "--message", str(tmp_path / "tampered.json"))
    assert tampered.returncode == 1, tampered.stdout
    said = tampered.stdout + tampered.stderr
    assert "histogram" in said and "default_label" in said, said


def test_a_retired_key_restored_into_the_key_file_never_signs_again(
    make_client: Callable[..., Any], db_path: Path, tmp_path: Path
) -> None:
    """Restoring an old key file (a backup) made its retired key current again: ``GET
    /v1/keys`` showed it current with no retirement, so a pin taken from it trusted the key at
    any date. The service now refuses to start, or to sign, with a key its database retired."""
    import shutil

    from labels_party.releasing.receipts import RetiredKeyError

    client = make_client()
    first = released(client)
    old_id = client.get(f"/v1/releases/{first['id']}/receipt", headers=PUB).json()["key_id"]
    key_file = db_path.parent / DEFAULT_KEY_FILE
    backup = tmp_path / "backup.pem"
    shutil.copy(key_file, backup)
    assert labeldp("keys", "rotate", "--db", str(db_path)).returncode == 0
    shutil.copy(backup, key_file)  # the old (retired) key is back in the file
    with pytest.raises(RetiredKeyError, match=f"{old_id} .* was retired"):
        make_client()
    second = released(client)  # the running service: the release stands, no receipt is signed
    assert client.get(f"/v1/releases/{second['id']}/receipt", headers=PUB).status_code == 500
    listed = {k["key_id"]: k for k in client.get("/v1/keys", headers=OPS).json()["keys"]}
    assert listed[old_id]["status"] == "retired" and listed[old_id]["retired"] is not None
    assert labeldp("keys", "rotate", "--db", str(db_path)).returncode == 0  # the way out
    receipt = client.get(f"/v1/releases/{second['id']}/receipt", headers=PUB).json()
    assert receipt["key_id"] not in (old_id, *[k for k, v in listed.items() if v["retired"]])
    rc.verify(receipt, keys_of(client))


def test_rotation_keeps_old_receipts_verifiable(
    make_client: Callable[..., Any], db_path: Path, tmp_path: Path
) -> None:
    client = make_client()
    first = released(client)
    old_receipt = client.get(f"/v1/releases/{first['id']}/receipt", headers=PUB).json()
    key_file = db_path.parent / DEFAULT_KEY_FILE
    rotated = labeldp("keys", "rotate", "--db", str(db_path))
    assert rotated.returncode == 0, rotated.stderr
    assert old_receipt["key_id"] in rotated.stdout
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    # The running service signs its next receipt with the new key.
    second = released(client)
    new_receipt = client.get(f"/v1/releases/{second['id']}/receipt", headers=PUB).json()
    assert new_receipt["key_id"] != old_receipt["key_id"]
    listed = client.get("/v1/keys", headers=OPS).json()["keys"]
    assert [(k["key_id"], k["status"]) for k in listed] == [
        (new_receipt["key_id"], "current"),
        (old_receipt["key_id"], "retired"),
    ]
    published = keys_of(client)
    for receipt in (old_receipt, new_receipt):
        rc.verify(receipt, published)
    # The stored receipt is served unchanged after the rotation.
    assert client.get(f"/v1/releases/{first['id']}/receipt", headers=PUB).json() == old_receipt
    # A publisher pinned only to the new key refuses the old receipt, and vice versa.
    with pytest.raises(rc.ReceiptError, match="not a pinned key"):
        rc.verify(old_receipt, {new_receipt["key_id"]: published[new_receipt["key_id"]]})
    # `keys public` prints the current key, the one to pin.
    pem = labeldp("keys", "public", "--db", str(db_path))
    pin = tmp_path / "pin.pem"
    pin.write_text(pem.stdout)
    assert list(rc.load_public_keys(pin)) == [new_receipt["key_id"]]
    # A mistyped --signing-key is an error that writes nothing (found by an audit: it created a
    # new key there and retired the service's, whose next receipts were 500s).
    typo = tmp_path / "typo" / "key.pem"
    refused = labeldp("keys", "public", "--db", str(db_path), "--signing-key", str(typo))
    assert refused.returncode == 2 and "no signing key at" in refused.stderr
    assert not typo.parent.exists()
    stranger = tmp_path / "stranger.pem"
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from labels_party.releasing.receipts import _write_private

    _write_private(stranger, Ed25519PrivateKey.generate())  # a key file of another service
    refused = labeldp("keys", "public", "--db", str(db_path), "--signing-key", str(stranger))
    assert refused.returncode == 2 and "not registered" in refused.stderr
    assert [
        (k["key_id"], k["status"]) for k in client.get("/v1/keys", headers=OPS).json()["keys"]
    ] == [
        (new_receipt["key_id"], "current"),
        (old_receipt["key_id"], "retired"),
    ]
    assert (
        client.get(f"/v1/releases/{released(client)['id']}/receipt", headers=PUB).status_code == 200
    )


def test_a_release_made_before_keys_existed_is_signed_on_first_request(
    make_client: Callable[..., Any], db_path: Path
) -> None:
    """A database written by the release before receipts (the committed fixture): its first
    start creates the key and the tables, and its old releases get receipts on request."""
    import shutil

    shutil.copy(Path(__file__).resolve().parents[1] / "fixtures" / "prev_release.db", db_path)
    upgraded = make_client()
    entries = upgraded.get("/v1/ledger", headers=OPS).json()["entries"]
    release_id = next(e["release_id"] for e in entries if e["release_id"])
    meta = upgraded.get(f"/v1/releases/{release_id}", headers=PUB).json()
    receipt = upgraded.get(f"/v1/releases/{release_id}/receipt", headers=PUB)
    assert receipt.status_code == 200
    body = rc.verify(receipt.json(), keys_of(upgraded))
    assert (
        body["message_sha256"] == meta["message_sha256"] and body["released_at"] == meta["created"]
    )
    assert body["signed_at"] > body["released_at"]


def test_key_file_is_owner_only_and_a_readable_one_is_refused(
    make_client: Callable[..., Any], db_path: Path
) -> None:
    make_client()
    key_file = db_path.parent / DEFAULT_KEY_FILE
    assert key_file.stat().st_mode & 0o777 == 0o600
    os.chmod(key_file, 0o644)
    with pytest.raises(InvalidParameterError, match="chmod 600"):
        make_client()


def test_a_key_folder_it_creates_is_owner_only(tmp_path: Path) -> None:
    """A named key file in a folder that does not exist yet: the folder is created 0700."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from labels_party.releasing.receipts import _write_private

    key_file = tmp_path / "keys" / "signing.pem"
    _write_private(key_file, Ed25519PrivateKey.generate())
    assert key_file.parent.stat().st_mode & 0o777 == 0o700
    assert key_file.stat().st_mode & 0o777 == 0o600


def test_a_database_without_a_directory_needs_the_key_file_named(tmp_path: Path) -> None:
    """Regression: with PostgreSQL the key went to the working directory (and into git)."""
    from labels_party.config import Settings, default_key_path, resolve_signing_key
    from tests.labels_party.conftest import TOKENS_ENV

    url = "postgresql+psycopg://postgres@/labels?host=/tmp"
    with pytest.raises(InvalidParameterError, match="LABELDP_SIGNING_KEY or --signing-key"):
        default_key_path(url)
    with pytest.raises(InvalidParameterError, match="LABELDP_SIGNING_KEY"):
        Settings.from_env(database_url=url, environ={"LABELDP_TOKENS": TOKENS_ENV})
    named = tmp_path / "k.pem"
    assert resolve_signing_key(None, url, {"LABELDP_SIGNING_KEY": str(named)}) == named
    assert resolve_signing_key(named, url, {}) == named
    assert default_key_path(f"sqlite:///{tmp_path}/a.db") == tmp_path / DEFAULT_KEY_FILE
    served = subprocess.run(
        [sys.executable, "-m", "labeldp", "serve", "labels", "--database-url", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "LABELDP_TOKENS": TOKENS_ENV, "LABELDP_SIGNING_KEY": ""},
    )
    assert served.returncode == 2 and "--signing-key" in served.stderr
    rotated = labeldp("keys", "rotate", "--database-url", url)
    assert rotated.returncode == 2 and "--signing-key" in rotated.stderr


def test_no_private_key_is_tracked_by_git() -> None:
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(
        ["git", "ls-files", "*.pem", "*.key"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    assert tracked == [], f"private key material committed: {tracked}"


HEADER_TAMPERING = {
    "default_label": lambda h: {"default_label": h["default_label"] + 1.0},
    "histogram": lambda h: {
        "histogram": {**h["histogram"], "probs": h["histogram"]["probs"][::-1]}
    },
    "params": lambda h: {"params": {**h["params"], next(iter(h["params"])): 0.5}},
    "label_max": lambda h: {"label_max": h["label_max"] * 2},
    "created": lambda h: {"created": "2020-01-01T00:00:00Z"},
    "model_dim": lambda h: {"model_dim": 3},
    "label_min": lambda h: {"label_min": h["label_min"] - 1.0},
    "recommended_transform": lambda h: {
        "recommended_transform": "raw" if h["recommended_transform"] == "debiased" else "debiased"
    },
    # Named too although the body no longer matches them: the header is checked first.
    "n": lambda h: {"n": h["n"] + 1},
    "body_sha256": lambda h: {"body_sha256": "0" * 64},
}


@pytest.mark.parametrize("field", sorted(HEADER_TAMPERING))
def test_any_changed_header_field_fails_and_is_named_in_every_format(
    client: Any, tmp_path: Path, field: str
) -> None:
    """Issue 24, item 1: the receipt binds the WHOLE header, so a message with any one header
    field changed (and its body intact) fails verification, naming the field, in each format:
    JSON, binary, and a Parquet message directory (its header.json; the body in the Spark job's
    layout). The Parquet format of a Spark job's real output: tests/spark_release/."""
    from shared.message import MessageHeader, encode_binary, from_json_message

    meta = released(client, mechanism="rr_on_bins", epsilon=1.0)
    body = rc.verify(
        client.get(f"/v1/releases/{meta['id']}/receipt", headers=PUB).json(), keys_of(client)
    )
    assert body["receipt_version"] == 2 and body["header"]["release_id"] == meta["id"]
    raw = client.get(
        f"/v1/releases/{meta['id']}/message", headers={**PUB, "Accept": "application/json"}
    ).content
    header, ids, labels = from_json_message(raw)
    changed = rc.header_json(header) | HEADER_TAMPERING[field](rc.header_json(header))
    tampered = MessageHeader.model_validate(changed)  # still a valid header
    document = json.loads(raw)
    document["header"] = json.loads(tampered.model_dump_json())
    for name, data in (
        ("json", json.dumps(document).encode()),
        ("binary", b"".join(encode_binary(tampered, ids, labels))),
    ):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(rc.ReceiptError, match=f"differs from the receipt's in: {field}$"):
            check_message_file(body, path)
    directory = parquet_message(tmp_path / "parquet", tampered, ids, labels)
    with pytest.raises(rc.ReceiptError, match=f"differs from the receipt's in: {field}$"):
        check_message_file(body, directory)


def parquet_message(root: Path, header: Any, ids: list[str], labels: Any) -> Path:
    """A Parquet message directory in the Spark job's layout (``shared.parquet_message``):
    header.json and body/part-*.parquet (example_id, noisy_label), two parts in id order."""
    import numpy as np

    pa = pytest.importorskip("pyarrow", reason="pyarrow comes with the spark extra")
    import pyarrow.parquet as pq

    from shared.parquet_message import BODY, HEADER

    (root / BODY).mkdir(parents=True)
    for k, part in enumerate(np.array_split(np.arange(len(ids)), 2)):
        table = pa.table(
            {
                "example_id": pa.array([ids[i] for i in part], pa.string()),
                "noisy_label": pa.array(np.asarray(labels)[part], pa.float64()),
            }
        )
        pq.write_table(table, root / BODY / f"part-{k:05d}-x.snappy.parquet")
    (root / HEADER).write_text(header.model_dump_json())
    return root


def test_a_retired_key_signs_nothing_dated_after_its_retirement(
    make_client: Callable[..., Any], db_path: Path, tmp_path: Path
) -> None:
    """Issue 24, item 1: keys carry their validity (``GET /v1/keys``: created, retired); with
    that file, a receipt signed outside its key's period does not verify, in the library and
    the CLI, while the key's own receipts still do."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    client = make_client()
    first = released(client)
    old_receipt = client.get(f"/v1/releases/{first['id']}/receipt", headers=PUB).json()
    leaked = load_pem_private_key((db_path.parent / DEFAULT_KEY_FILE).read_bytes(), None)
    assert labeldp("keys", "rotate", "--db", str(db_path)).returncode == 0
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(client.get("/v1/keys", headers=PUB).text)
    validity = rc.load_key_validity(keys_file)
    created, retired = validity[old_receipt["key_id"]]
    assert created is not None and retired is not None and created <= old_receipt["signed_at"]
    keys = rc.load_public_keys(keys_file)
    rc.verify(old_receipt, keys, validity=validity)
    # Someone holding the retired private key signs a receipt dated after its retirement.
    body = {k: v for k, v in old_receipt.items() if k not in ("signature", "algorithm", "key_id")}
    forged = rc.sign({**body, "signed_at": "2999-01-01T00:00:00.000000Z"}, leaked)  # type: ignore[arg-type]
    rc.verify(forged, keys)  # the signature itself is fine ...
    with pytest.raises(rc.ReceiptError, match="outside key"):
        rc.verify(forged, keys, validity=validity)  # ... its date is not
    for receipt, code in ((old_receipt, 0), (forged, 1)):
        path = tmp_path / "receipt.json"
        path.write_text(json.dumps(receipt))
        done = labeldp("receipt", "verify", str(path), "--public-key", str(keys_file))
        assert done.returncode == code, done.stderr
    assert rc.load_key_validity(tmp_path / "keys.json") and not rc.load_key_validity(
        _pem_file(tmp_path, keys)
    )


def test_a_pem_pin_from_keys_public_carries_the_keys_validity(
    make_client: Callable[..., Any], db_path: Path, tmp_path: Path
) -> None:
    """Issue 24, item 1, for the PEM pin: ``labeldp keys public`` writes each key's Created (and,
    with ``--all``, a retired key's Retired) above its PEM block, so a PEM pin dates its keys as
    the JSON of ``GET /v1/keys`` does: a receipt a leaked retired key signs after its retirement
    does not verify (library and CLI), the key's own receipts still do."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    client = make_client()
    first = released(client)
    old_receipt = client.get(f"/v1/releases/{first['id']}/receipt", headers=PUB).json()
    leaked = load_pem_private_key((db_path.parent / DEFAULT_KEY_FILE).read_bytes(), None)
    assert labeldp("keys", "rotate", "--db", str(db_path)).returncode == 0
    listed = {k["key_id"]: k for k in client.get("/v1/keys", headers=PUB).json()["keys"]}
    old = listed[old_receipt["key_id"]]

    current = labeldp("keys", "public", "--db", str(db_path))
    assert current.returncode == 0, current.stderr
    (new_id,) = [kid for kid, k in listed.items() if k["status"] == "current"]
    assert f"Key-Id: {new_id}\nCreated: {listed[new_id]['created']}\n" in current.stdout
    assert "Retired:" not in current.stdout and old["key_id"] not in current.stdout

    every = labeldp("keys", "public", "--all", "--db", str(db_path))
    assert every.returncode == 0, every.stderr
    pin = tmp_path / "labels.pem"
    pin.write_text(every.stdout)
    assert set(rc.load_public_keys(pin)) == set(listed)
    validity = rc.load_key_validity(pin)
    assert validity == {kid: (k["created"], k["retired"]) for kid, k in listed.items()}

    body = {k: v for k, v in old_receipt.items() if k not in ("signature", "algorithm", "key_id")}
    forged = rc.sign({**body, "signed_at": "2999-01-01T00:00:00.000000Z"}, leaked)  # type: ignore[arg-type]
    with pytest.raises(rc.ReceiptError, match="outside key"):
        rc.verify(forged, rc.load_public_keys(pin), validity=validity)
    for receipt, code in ((old_receipt, 0), (forged, 1)):
        path = tmp_path / "receipt.json"
        path.write_text(json.dumps(receipt))
        done = labeldp("receipt", "verify", str(path), "--public-key", str(pin))
        assert done.returncode == code, done.stderr
        assert code == 0 or "outside key" in done.stderr


def test_the_served_pem_dates_its_key_and_a_bare_pem_checks_no_date_silently(
    make_client: Callable[..., Any], db_path: Path, tmp_path: Path
) -> None:
    """Issue 24, item 4: ``public_key_pem`` of ``GET /v1/keys`` is the block under its Key-Id,
    Created and (once retired) Retired lines, so the PEM a publisher copies from the API dates
    its key as the JSON does; a bare PEM block of the same key (no dates) makes ``labeldp
    receipt verify`` exit 1 UNCHECKED instead of accepting the receipt at any date."""
    client = make_client()
    first = released(client)
    receipt = client.get(f"/v1/releases/{first['id']}/receipt", headers=PUB).json()
    (tmp_path / "receipt.json").write_text(json.dumps(receipt))
    args = ["receipt", "verify", str(tmp_path / "receipt.json"), "--public-key"]
    bare = tmp_path / "bare.pem"
    bare.write_text("".join(rc.public_pem(key) for key in keys_of(client).values()))
    unchecked = labeldp(*args, str(bare))
    assert unchecked.returncode == 1 and "UNCHECKED" in unchecked.stderr, unchecked.stderr
    assert receipt["key_id"] in unchecked.stderr
    ok = labeldp(*args, str(pin_of(client, tmp_path / "served.pem")))
    assert ok.returncode == 0 and "inside its validity" in ok.stdout, ok.stderr

    assert labeldp("keys", "rotate", "--db", str(db_path)).returncode == 0
    listed = client.get("/v1/keys", headers=PUB).json()["keys"]
    for item in listed:
        dates = f"Created: {item['created']}\n"
        if item["retired"] is not None:
            dates += f"Retired: {item['retired']}\n"
        assert item["public_key_pem"].startswith(f"Key-Id: {item['key_id']}\n{dates}-----BEGIN")
    served = pin_of(client, tmp_path / "rotated.pem")
    assert rc.load_key_validity(served) == {
        item["key_id"]: (item["created"], item["retired"]) for item in listed
    }
    assert labeldp(*args, str(served)).returncode == 0  # signed before its key's retirement


def _pem_file(tmp_path: Path, keys: dict[str, Any]) -> Path:
    path = tmp_path / "keys.pem"
    path.write_text("".join(rc.public_pem(key) for key in keys.values()))
    return path


def test_model_releases_have_signed_receipts_binding_their_whole_header(
    client: Any, db_path: Path
) -> None:
    """Issue 22, item 2 / issue 24, item 1: a model release is signed right after it is made;
    its receipt states the whole model header, the charge and the ledger entry that paid it, the
    same bytes on every request; a changed header field fails and is named."""
    from tests.labels_party.test_model_releases import model_release, setup_dataset

    setup_dataset(client)
    made = model_release(client, estimator="ols", privacy="label", epsilon="1")
    assert made.status_code == 201, made.text
    model_id = made.json()["id"]
    answer = client.get(f"/v1/model-releases/{model_id}/receipt", headers=PUB)
    assert answer.status_code == 200, answer.text
    body = rc.verify(answer.json(), keys_of(client))
    message = json.loads(client.get(f"/v1/model-releases/{model_id}", headers=PUB).text)
    assert body["kind"] == "model" and body["model_release_id"] == model_id
    assert body["header"] == message["header"] and body["epsilon"] == "1"
    (entry,) = [row for row in ledger_rows(db_path) if row["kind"] == "model"]
    assert body["ledger_entries"] == [
        {"seq": entry["seq"], "kind": "model", "entry_hash": entry["entry_hash"]}
    ]
    assert client.get(f"/v1/model-releases/{model_id}/receipt", headers=PUB).json() == answer.json()
    rc.check_model_header(body, message["header"])
    with pytest.raises(rc.ReceiptError, match="differs from the receipt's in: epsilon"):
        rc.check_model_header(body, {**message["header"], "epsilon": "2"})
    missing = client.get(f"/v1/model-releases/mrel_{'0' * 24}/receipt", headers=PUB)
    assert missing.status_code == 404


def test_cli_verifies_a_model_message_and_names_a_changed_field(
    client: Any, tmp_path: Path
) -> None:
    """``labeldp receipt verify --message`` on a model release's JSON message: exit 0 as served,
    1 naming the field when a header field changed, 1 when a released number changed."""
    from tests.labels_party.test_model_releases import model_release, setup_dataset

    setup_dataset(client)
    made = model_release(client, estimator="ols", privacy="label", epsilon="1")
    assert made.status_code == 201, made.text
    model_id = made.json()["id"]
    receipt = client.get(f"/v1/model-releases/{model_id}/receipt", headers=PUB).json()
    pin = pin_of(client, tmp_path / "labels.pub")
    (tmp_path / "receipt.json").write_text(json.dumps(receipt))
    message = json.loads(client.get(f"/v1/model-releases/{model_id}", headers=PUB).text)
    args = ["receipt", "verify", str(tmp_path / "receipt.json"), "--public-key", str(pin)]
    (tmp_path / "model.json").write_text(json.dumps(message))
    assert labeldp(*args, "--message", str(tmp_path / "model.json")).returncode == 0
    changed = {**message, "header": {**message["header"], "epsilon": "2"}}
    (tmp_path / "header.json").write_text(json.dumps(changed))
    tampered = labeldp(*args, "--message", str(tmp_path / "header.json"))
    assert tampered.returncode == 1 and "epsilon" in tampered.stdout + tampered.stderr
    body = message["body"]
    key_name = next(k for k, v in body.items() if isinstance(v, list) and v)
    numbers = [*body[key_name]]
    assert isinstance(numbers[0], float), body  # the released coefficients
    numbers[0] += 1.0
    (tmp_path / "body.json").write_text(
        json.dumps({**message, "body": {**body, key_name: numbers}})
    )
    assert labeldp(*args, "--message", str(tmp_path / "body.json")).returncode == 1


def _replica_start(db_url: str, key_path: str, start: float, results: Any) -> None:
    """A replica's first start: schema, then the signing key (a process of its own)."""
    import time

    from labels_party.db.engine import Database, create_schema, make_engine
    from labels_party.releasing.receipts import KeyStore

    engine = make_engine(db_url)
    while time.time() < start:
        time.sleep(0.001)
    try:
        create_schema(engine)
        results.put(KeyStore(Database(engine), Path(key_path)).ensure())
    except Exception as exc:  # noqa: BLE001 - reported to the test
        results.put(f"{type(exc).__name__}: {exc}"[:300])
    finally:
        engine.dispose()


def test_replicas_starting_at_once_share_one_signing_key(tmp_path: Path) -> None:
    """Found by an audit: replicas sharing a key file that did not exist yet each wrote a key
    (the last rename won, the other key was registered then retired), and in containers, where
    each replica is pid 1, the temporary file's name collided. The key file is now created only
    if absent (a hard link): every replica signs with the same key, and one key is current."""
    import multiprocessing
    import sqlite3
    import time

    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    db_url = f"sqlite:///{tmp_path / 'labels.db'}"
    key = tmp_path / "keys" / "signing.pem"
    start = time.time() + 4.0
    replicas = [
        context.Process(target=_replica_start, args=(db_url, str(key), start, results))
        for _ in range(3)
    ]
    for replica in replicas:
        replica.start()
    for replica in replicas:
        replica.join(120)
    ids = [results.get(timeout=10) for _ in replicas]
    assert len(set(ids)) == 1 and len(ids[0]) == 16, ids  # a key id, not an error
    with sqlite3.connect(tmp_path / "labels.db") as conn:
        rows = conn.execute("SELECT key_id, retired FROM signing_keys").fetchall()
    assert rows == [(ids[0], None)]
    assert not [p for p in key.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_key_file_another_replica_created_first_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deterministic half of the test above: a replica that found no key file, while
    another created it since, keeps the other's key (it overwrote it before)."""
    from labels_party.db.engine import Database, create_schema, make_engine
    from labels_party.releasing.receipts import KeyStore

    engine = make_engine(f"sqlite:///{tmp_path / 'labels.db'}")
    create_schema(engine)
    store = KeyStore(Database(engine), tmp_path / "signing.pem")
    first = store.ensure()
    written = store.path.read_bytes()
    monkeypatch.setattr(Path, "exists", lambda self: False)  # the check came before its creation
    assert store.ensure() == first
    assert store.path.read_bytes() == written
    engine.dispose()


def test_without_hard_links_the_key_file_is_still_created_only_if_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a filesystem without hard links (os.link: EPERM) the key file is created exclusively
    instead: a second writer keeps the first key, and no temporary file is left."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from labels_party.releasing.receipts import _read_private, _write_private

    def no_links(source: object, target: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    key_file = tmp_path / "signing.pem"
    first = Ed25519PrivateKey.generate()
    assert _write_private(key_file, first, replace=False)
    assert not _write_private(key_file, Ed25519PrivateKey.generate(), replace=False)
    assert rc.key_id(_read_private(key_file).public_key()) == rc.key_id(first.public_key())
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["signing.pem"]


@pytest.mark.parametrize("kind", ["not PEM", "empty", "a folder"])
def test_a_bad_key_file_is_one_line_naming_it(
    make_client: Callable[..., Any], db_path: Path, tmp_path: Path, kind: str
) -> None:
    """Found by the CLI audit: a key file that is not PEM, is empty or is a folder was a
    traceback (keys) or "cannot open the database" (serve); now every door names the file."""
    from labels_party.db.engine import Database, make_engine
    from labels_party.releasing.receipts import KeyStore

    make_client()
    bad = tmp_path / "bad.pem"
    if kind == "a folder":
        bad.mkdir(mode=0o700)
    else:
        bad.write_text("" if kind == "empty" else "x\n")
        bad.chmod(0o600)
    for action in ("public", "rotate"):
        refused = labeldp("keys", action, "--db", str(db_path), "--signing-key", str(bad))
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.startswith(f"labeldp keys {action}: signing key {bad}")
        assert "Traceback" not in refused.stderr and refused.stderr.count("\n") == 1
    engine = make_engine(f"sqlite:///{db_path}")
    with pytest.raises(InvalidParameterError, match=f"signing key {bad}"):
        KeyStore(Database(engine), bad).ensure()
    engine.dispose()
    from tests.labels_party.conftest import TOKENS_ENV

    serve = subprocess.run(
        [sys.executable, "-m", "labeldp", "serve", "labels", "--db", str(db_path),
         "--signing-key", str(bad), "--port", "0"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "LABELDP_TOKENS": TOKENS_ENV},
    )  # fmt: skip
    assert serve.returncode == 2
    assert serve.stderr.splitlines()[-1].startswith(f"labeldp serve labels: signing key {bad}")

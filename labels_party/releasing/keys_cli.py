"""``labeldp keys rotate|public``: the labels party's receipt-signing key
(labels_party.releasing.receipts).

``rotate`` writes a new private key (0600) over the key file and retires the old public key,
which ``GET /v1/keys`` keeps publishing; a running service signs with the new key from its next
receipt on (it reads the key file at each signature). ``public`` prints the current public key
(``--all``: every key) as PEM with its validity above it, the file the features party pins
(``--labels-public-key``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from shared.service import database_url


def register_commands(commands: Any) -> None:
    """Add ``labeldp keys rotate`` and ``labeldp keys public``."""
    parser = commands.add_parser("keys", help="the labels party's receipt-signing key")
    sub = parser.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    for name, text, func in (
        ("rotate", "replace the signing key (old public keys stay published)", rotate_command),
        ("public", "print the current public key (PEM) for the features party to pin", public),
    ):
        action = sub.add_parser(name, help=text)
        database_url.add_arguments(action, what="labels party")
        action.add_argument(
            "--signing-key",
            type=Path,
            help="key file (default: LABELDP_SIGNING_KEY, else next to the SQLite database)",
        )
        action.set_defaults(func=func)
        if name == "public":
            action.add_argument(
                "--all",
                action="store_true",
                help="every key that ever signed (retired ones with their Retired: date), "
                "to pin after a rotation",
            )


def _store(args: argparse.Namespace) -> Any:
    import os

    from labels_party.config import resolve_signing_key
    from labels_party.db.engine import open_for_admin
    from labels_party.releasing.receipts import KeyStore

    url = database_url.resolve(db=args.db, database_url=args.database_url)
    key_file = resolve_signing_key(args.signing_key, url, os.environ)
    return KeyStore(open_for_admin(url), key_file)


@database_url.command("keys rotate")
def rotate_command(args: argparse.Namespace) -> int:
    keys = _store(args)
    old, new = keys.rotate()
    print(f"signing key {keys.path}: now {new}" + (f" (retired {old})" if old else ""))
    return 0


@database_url.command("keys public")
def public(args: argparse.Namespace) -> int:
    """Print the current public key (``--all``: every published key) as PEM, each block under
    its ``Key-Id:``, ``Created:`` and, if retired, ``Retired:`` lines: a pin that carries the
    keys' validity (``shared.service.receipt.load_key_validity``)."""
    from shared.service import receipt as rc

    keys = _store(args)
    current = keys.current_id()  # reads only: a key file is created by the service alone
    listed = [k for k in keys.published() if args.all or k["key_id"] == current]
    for key in listed:
        pem = rc.pem_with_validity(rc.from_b64(key["public_key"]), key["created"], key["retired"])
        print(pem, end="")
    return 0

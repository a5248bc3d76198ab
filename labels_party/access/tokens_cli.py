"""``labeldp tokens add|list|revoke``: named principals and their bearer tokens
(``labels_party.access.principals``).

``add NAME --role ROLE`` prints the new token ONCE (only its sha256 is stored); ``list`` shows
every principal (name, role, created, revoked), never a token; ``revoke NAME`` stops its token
within ``principals.CACHE_SECONDS`` on every running replica. They work on the database the
service uses (``--db`` / ``--database-url``), upgrading its schema like the service's start.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from labels_party.config import ROLES
from shared.service import database_url


def register_commands(commands: Any) -> None:
    """Add ``labeldp tokens add``, ``list`` and ``revoke``."""
    parser = commands.add_parser("tokens", help="named principals and their bearer tokens")
    sub = parser.add_subparsers(dest="tokens_command", required=True, metavar="ACTION")
    add = sub.add_parser("add", help="issue a token for a new principal (printed once)")
    add.add_argument("name", help="a person or an integration: 1-64 of A-Z a-z 0-9 . _ @ -")
    add.add_argument("--role", required=True, choices=ROLES)
    add.set_defaults(func=add_command)
    listing = sub.add_parser("list", help="every principal (no tokens)")
    listing.add_argument("--json", action="store_true", help="one JSON document")
    listing.set_defaults(func=list_command)
    revoke = sub.add_parser("revoke", help="revoke a principal's token")
    revoke.add_argument("name")
    revoke.set_defaults(func=revoke_command)
    for action in (add, listing, revoke):
        database_url.add_arguments(action, what="labels party")


def _database(args: argparse.Namespace) -> Any:
    from labels_party.db.engine import open_for_admin

    return open_for_admin(database_url.resolve(db=args.db, database_url=args.database_url))


@database_url.command("tokens add")
def add_command(args: argparse.Namespace) -> int:
    from labels_party.access import principals

    principal, token = principals.issue(_database(args), name=args.name, role=args.role)
    print(f"principal {principal.name} ({principal.role}); its token, shown only now:")
    print(token)
    return 0


@database_url.command("tokens list")
def list_command(args: argparse.Namespace) -> int:
    from labels_party.access import principals

    found = principals.listing(_database(args))
    if args.json:
        print(json.dumps({"principals": [p.public() for p in found]}, indent=2))
        return 0
    for p in found:
        state = f"revoked {p.revoked}" if p.revoked else "active"
        print(f"{p.name}\t{p.role}\tcreated {p.created}\t{state}")
    return 0


@database_url.command("tokens revoke")
def revoke_command(args: argparse.Namespace) -> int:
    from labels_party.access import principals

    principal = principals.revoke(_database(args), args.name)
    print(f"principal {principal.name} ({principal.role}) revoked at {principal.revoked}")
    return 0

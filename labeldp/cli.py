"""The ``labeldp`` command: one entry point, each party registers its own subcommands.

It lives in its own package, above everything it registers, so that ``shared/``, the engine
both parties import, depends on neither of them.

labeldp serve labels ...     (labels_party.cli)
labeldp ledger verify|export (labels_party.cli)
labeldp keys rotate|public   (labels_party.releasing.keys_cli)
labeldp tokens add|list|revoke (labels_party.access.tokens_cli)
labeldp receipt verify       (shared.service.receipt_cli)
labeldp serve features ...   (features_party.cli)
labeldp demo ...             (demo.cli)
labeldp release --engine spark ... (spark_release.cli)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (each party adds its subcommands to it)."""
    from demo import cli as demo_cli
    from features_party import cli as features_cli
    from labels_party import cli as labels_cli
    from shared.service import receipt_cli
    from spark_release import cli as release_cli

    parser = argparse.ArgumentParser(
        prog="labeldp", description="Feature-oblivious label differential privacy, two parties."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="run one party's HTTP service")
    services = serve.add_subparsers(dest="service", required=True, metavar="SERVICE")
    labels_cli.register_serve(services)
    features_cli.register_serve(services)
    labels_cli.register_commands(commands)
    receipt_cli.register_commands(commands)
    demo_cli.register_commands(commands)
    release_cli.register_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen subcommand's handler (its ``func`` default)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.func
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())

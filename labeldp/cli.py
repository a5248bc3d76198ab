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
import importlib
import sys
from collections.abc import Callable, Sequence

Handler = Callable[[argparse.Namespace], int]

# Each top-level command and the functions that add it, "module:function" (``serve`` gets one
# service per party; labels_party.cli adds ``ledger``, ``keys`` and ``tokens`` together). A
# command imports only its own modules: ``labeldp receipt verify`` starts without the services,
# SQLAlchemy or httpx (bench/results/cli_start.md); the full parser (``labeldp
# --help``) imports them all.
COMMANDS: dict[str, tuple[str, ...]] = {
    "serve": ("labels_party.cli:register_serve", "features_party.cli:register_serve"),
    "ledger": ("labels_party.cli:register_commands",),
    "keys": ("labels_party.cli:register_commands",),
    "tokens": ("labels_party.cli:register_commands",),
    "receipt": ("shared.service.receipt_cli:register_commands",),
    "demo": ("demo.cli:register_commands",),
    "release": ("spark_release.cli:register_commands",),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser (each party adds its subcommands to it): only ``command``'s part
    when it is one of :data:`COMMANDS`, else every command."""
    parser = argparse.ArgumentParser(
        prog="labeldp", description="Feature-oblivious label differential privacy, two parties."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    services: argparse._SubParsersAction | None = None  # type: ignore[type-arg]
    added: set[str] = set()
    for name in [command] if command in COMMANDS else list(COMMANDS):
        for target in COMMANDS[name]:
            if target in added:
                continue
            added.add(target)
            module, function = target.split(":")
            register = getattr(importlib.import_module(module), function)
            if function == "register_serve":
                if services is None:
                    serve = commands.add_parser("serve", help="run one party's HTTP service")
                    services = serve.add_subparsers(
                        dest="service", required=True, metavar="SERVICE"
                    )
                register(services)
            else:
                register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen subcommand's handler (its ``func`` default)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    command = args_list[0] if args_list and not args_list[0].startswith("-") else None
    args = build_parser(command).parse_args(args_list)
    handler: Handler = args.func
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())

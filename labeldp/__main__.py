"""``python -m labeldp``: the ``labeldp`` command."""

from labeldp.cli import main

raise SystemExit(main())

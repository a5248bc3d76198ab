"""``python -m labels_party ...``: the labels party's commands without the full dispatcher."""

import sys

from labels_party.cli import main

sys.exit(main())

#!/usr/bin/env bash
# The project's one test command (README "Run the tests"; .ci/run calls exactly this).
# Creates .venv if needed, installs the package with its test extras, then lints and tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test,bench,postgres,spark]'
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m pytest "$@"

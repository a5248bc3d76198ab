#!/usr/bin/env bash
# The project's one test command (README "Run the tests"; .ci/run calls exactly this).
# Creates .venv if needed, installs the package with its test extras, then lints and tests.
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian's Chromium and its chromedriver for the console's browser tests (tests/labels_party/
# console); installed only when missing, so this is quick when present.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq chromium chromium-driver >/dev/null; } ||
            echo "tests/run.sh: could not install chromium; the console's browser tests will skip" >&2
    else
        echo "tests/run.sh: chromium/chromedriver missing; the console's browser tests will skip" >&2
    fi
fi
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test,bench,postgres,spark]'
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m pytest "$@"

#!/usr/bin/env bash
# The project's one test command (README "Run the tests"; .ci/run calls exactly this).
# Installs what the tests run for real (Debian's PostgreSQL, Chromium + chromedriver, Java 17
# for Spark) when missing, creates .venv, installs the package with its extras, then lints and
# tests. Docker for the compose test is set up by services/build_base_image.sh, from the test;
# a dockerd it starts is stopped when the session ends (tests/compose/conftest.py).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null ||
    missing+=(postgresql)
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq "${missing[@]}" >/dev/null; } ||
            echo "tests/run.sh: could not install ${missing[*]}; their tests will skip" >&2
    else
        echo "tests/run.sh: missing ${missing[*]} (apt-get install them); their tests will skip" >&2
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
# The 25 slowest tests close the log: where CI time goes (keep CI under 30 minutes).
.venv/bin/python -m pytest -n 3 --durations=25 "$@"

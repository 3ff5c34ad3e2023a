#!/usr/bin/env bash
# Run the test suite and the linter, setting the machine up first if needed.
# Extra arguments go to pytest, e.g.: scripts/test.sh -k cache -x
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh --no-run

status=0
echo "==> pytest"
.venv/bin/python -m pytest -q "$@" || status=$?
# Lint even when tests fail, so one run reports both.
echo "==> ruff"
.venv/bin/ruff check tilelab tests || status=$?
exit "$status"

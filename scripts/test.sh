#!/usr/bin/env bash
# Run the test suite and the linter, setting the machine up first if needed.
# Extra arguments go to pytest, e.g.: scripts/test.sh -k cache -x
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh --no-run

status=0
# pytest runs the JupyterLab extension's tests too (tests/test_extension.py): its unit
# tests (`npm test` in extension/) and the browser test (extension/ui-tests/e2e.mjs:
# JupyterLab headless, Chromium; screenshots in extension/ui-tests/artifacts/).
echo "==> pytest"
.venv/bin/python -m pytest -q "$@" || status=$?
# Lint even when tests fail, so one run reports both.
echo "==> ruff"
.venv/bin/ruff check tilelab tests scripts bench || status=$?
exit "$status"

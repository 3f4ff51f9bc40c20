#!/usr/bin/env bash
# The whole test suite: services, install, lint, types, tests.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash infra/bootstrap.sh
echo "== ruff"; .venv/bin/ruff check . && .venv/bin/ruff format --check .
echo "== mypy"; .venv/bin/mypy
echo "== drift"; .venv/bin/mesh schemas export --check; .venv/bin/mesh topology export --check
echo "== pytest"; .venv/bin/python -m pytest -q "$@"

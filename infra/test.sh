#!/usr/bin/env bash
# The whole test suite: services, install, lint, types, tests.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash infra/bootstrap.sh
echo "== ruff"; .venv/bin/ruff check . && .venv/bin/ruff format --check .
echo "== mypy"; .venv/bin/mypy
echo "== drift"; .venv/bin/mesh schemas export --check --out schemas/json; .venv/bin/mesh topology export --check --out infra/definitions.json; .venv/bin/mesh asyncapi --check --out schemas/asyncapi.json; .venv/bin/mesh settings --readme README.md --check
if [ "$#" -gt 0 ]; then # the tests you name, as you name them
  echo "== pytest"; .venv/bin/python -m pytest -q "$@"
  exit
fi
# test files run in parallel (MESH_TEST_WORKERS processes, each file in one; every test
# uses names of its own), then the few that restart or stall the shared broker or Redis
workers=(-n "${MESH_TEST_WORKERS:-3}" --dist loadfile)
echo "== pytest"; .venv/bin/python -m pytest -q -m "not cluster and not exclusive" "${workers[@]}" --durations=20
echo "== pytest exclusive"; .venv/bin/python -m pytest -q -m exclusive || [ $? -eq 5 ] # 5: none here
# the same mesh tests again, each component under its own provisioned broker and Redis
# user with access control on (tests/access_mode.py lists the modules and says how)
echo "== pytest access control on"
mapfile -t access_modules < <(.venv/bin/python -c 'from tests.access_mode import MODULES; print("\n".join(MODULES))')
MESH_TEST_ACCESS_CONTROL=1 .venv/bin/python -m pytest -q -m "not cluster and not exclusive" "${workers[@]}" "${access_modules[@]}"
MESH_TEST_ACCESS_CONTROL=1 .venv/bin/python -m pytest -q -m exclusive "${access_modules[@]}" || [ $? -eq 5 ]
if [ "${MESH_SKIP_CLUSTER:-0}" = 1 ]; then
  echo "== pytest cluster: skipped (MESH_SKIP_CLUSTER=1)"
else
  # its session fixture starts a three-node RabbitMQ cluster (infra/cluster.sh, ports
  # 5681-5683) unless one runs, and stops it again at the end
  echo "== pytest cluster"; .venv/bin/python -m pytest -q -m cluster tests/cluster
fi

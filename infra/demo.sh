#!/usr/bin/env bash
# The demo: services, router, registry and a small team of agents; routes a few requests.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/infra/bootstrap.sh"
exec "$root/.venv/bin/mesh" demo "$@"

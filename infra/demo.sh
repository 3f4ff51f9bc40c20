#!/usr/bin/env bash
# The demo: services and venv (bootstrap.sh), then `mesh demo`: a customer-service team as
# separate processes (a Node.js agent too when node and npm are installed), ~50 requests.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/infra/bootstrap.sh"
exec "$root/.venv/bin/mesh" demo "$@"

#!/usr/bin/env bash
# Run a benchmark from a clean clone: `bash infra/bench.sh NAME [ARGS...]` runs
# bench/NAME.py with ARGS after bootstrapping (services up, .venv, model), e.g.
#   bash infra/bench.sh load                 # the load benchmark (bench/load.py)
#   bash infra/bench.sh load --tiny          # its smoke size
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -lt 1 ]]; then
  echo "usage: bash infra/bench.sh NAME [ARGS...]   (runs bench/NAME.py)" >&2
  exit 2
fi
name="$1"
shift
if [[ ! -f "bench/${name}.py" ]]; then
  echo "bench.sh: no bench/${name}.py (have: $(cd bench && ls *.py | sed 's/\.py$//' | tr '\n' ' '))" >&2
  exit 2
fi
bash infra/bootstrap.sh
exec .venv/bin/python "bench/${name}.py" "$@"

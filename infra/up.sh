#!/usr/bin/env bash
# Bring up RabbitMQ (with the management plugin) and Redis on loopback; idempotent.
# Installs the Debian packages when they are absent. Safe to run when both already run: a
# broker it did not start keeps its configuration (it prints what it would change, and how);
# only the management plugin is enabled on it (MESH_KEEP_PLUGINS=1 leaves plugins alone).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi

say() { printf 'infra: %s\n' "$*"; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local limit=$1 what=$2; shift 2
  local end=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$end" ]; then say "$what did not come up within ${limit}s"; return 1; fi
    sleep 0.5
  done
}

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v rabbitmq-server >/dev/null 2>&1 || missing+=(rabbitmq-server)
command -v curl >/dev/null 2>&1 || missing+=(curl)
if [ "${#missing[@]}" -gt 0 ]; then
  say "installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# --- Redis --------------------------------------------------------------------------------
if redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  say "redis already running on 127.0.0.1:6379"
else
  say "starting redis on 127.0.0.1:6379"
  $SUDO mkdir -p /var/lib/redis /var/log/redis
  # a memory cap that refuses writes instead of evicting a claim (README "Redis settings")
  $SUDO redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" \
    --appendonly no --maxmemory 1gb --maxmemory-policy noeviction \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  wait_for 30 redis redis-cli -h 127.0.0.1 -p 6379 ping
fi

# --- RabbitMQ -----------------------------------------------------------------------------
# A broker this script did not start keeps its configuration: we only say what we would
# change, and how. Ours is started with rabbitmq.conf (loopback, consumer_timeout).
started_rabbit=0
if $SUDO rabbitmq-diagnostics -q check_running >/dev/null 2>&1; then
  say "rabbitmq already running (left as it is configured)"
else
  say "starting rabbitmq with $here/rabbitmq.conf"
  $SUDO env RABBITMQ_CONFIG_FILE="$here/rabbitmq.conf" rabbitmq-server -detached
  wait_for 120 rabbitmq $SUDO rabbitmq-diagnostics -q check_running
  started_rabbit=1
fi

# The management plugin is additive (an HTTP API beside AMQP): it is enabled on any broker,
# ours or not, unless MESH_KEEP_PLUGINS=1 asks to leave the plugins as they are.
management=1
if ! $SUDO rabbitmq-plugins -q is_enabled rabbitmq_management >/dev/null 2>&1; then
  if [ "$started_rabbit" -eq 1 ] || [ "${MESH_KEEP_PLUGINS:-0}" != "1" ]; then
    say "enabling the management plugin"
    $SUDO rabbitmq-plugins -q enable rabbitmq_management >/dev/null
  else
    management=0
    say "would enable the management plugin (mesh views and the tests use its API):"
    say "  sudo rabbitmq-plugins enable rabbitmq_management"
  fi
fi

# Agent calls are long: the consumer timeout must stay well above the mesh's maximum task
# lifetime (rabbitmq.conf sets 7200000 ms). Only read it on a broker we did not start.
wanted_timeout=7200000
if [ "$started_rabbit" -eq 0 ]; then
  current=$($SUDO rabbitmqctl -q eval 'application:get_env(rabbit, consumer_timeout).' 2>/dev/null \
    | tr -d '\r' || true)
  timeout_ms=$(printf '%s' "$current" | sed -n 's/^{ok,\([0-9]*\)}$/\1/p')
  if [ "$current" = "undefined" ]; then
    : # no timeout at all: nothing to raise
  elif [ -z "$timeout_ms" ]; then
    say "could not read rabbitmq's consumer_timeout (got '${current:-nothing}'); the mesh wants"
    say "  at least ${wanted_timeout} ms: consumer_timeout = ${wanted_timeout} in its rabbitmq.conf"
  elif [ "$timeout_ms" -lt "$wanted_timeout" ]; then
    say "would raise rabbitmq's consumer_timeout from ${timeout_ms} to ${wanted_timeout} ms (a task"
    say "  held longer is redelivered); for the running broker:"
    say "  sudo rabbitmqctl eval 'application:set_env(rabbit, consumer_timeout, ${wanted_timeout}).'"
    say "  and, to keep it, consumer_timeout = ${wanted_timeout} in its rabbitmq.conf"
  fi
fi

if [ "$management" -eq 1 ]; then
  wait_for 60 "rabbitmq management API" curl -fsS -u guest:guest http://127.0.0.1:15672/api/overview
  say "ready: amqp://127.0.0.1:5672  redis://127.0.0.1:6379  http://127.0.0.1:15672 (guest/guest)"
else
  say "ready: amqp://127.0.0.1:5672  redis://127.0.0.1:6379  (no management API)"
fi

#!/usr/bin/env bash
# Bring up RabbitMQ (with the management plugin) and Redis on loopback; idempotent.
# Installs the Debian packages when they are absent. Safe to run when both already run.
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
  $SUDO redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" \
    --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
  wait_for 30 redis redis-cli -h 127.0.0.1 -p 6379 ping
fi

# --- RabbitMQ -----------------------------------------------------------------------------
if $SUDO rabbitmq-diagnostics -q check_running >/dev/null 2>&1; then
  say "rabbitmq already running"
else
  say "starting rabbitmq with $here/rabbitmq.conf"
  $SUDO env RABBITMQ_CONFIG_FILE="$here/rabbitmq.conf" rabbitmq-server -detached
  wait_for 120 rabbitmq $SUDO rabbitmq-diagnostics -q check_running
fi
if ! $SUDO rabbitmq-plugins -q is_enabled rabbitmq_management >/dev/null 2>&1; then
  say "enabling the management plugin"
  $SUDO rabbitmq-plugins -q enable rabbitmq_management >/dev/null
fi
# a broker started by someone else keeps its own config: raise the consumer timeout anyway
$SUDO rabbitmqctl -q eval 'application:set_env(rabbit, consumer_timeout, 7200000).' >/dev/null
wait_for 60 "rabbitmq management API" curl -fsS -u guest:guest http://127.0.0.1:15672/api/overview
say "ready: amqp://127.0.0.1:5672  redis://127.0.0.1:6379  http://127.0.0.1:15672 (guest/guest)"

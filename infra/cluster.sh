#!/usr/bin/env bash
# A throw-away three-node RabbitMQ cluster on this machine, for quorum-queue and failover
# tests. It never touches a broker it did not start: it acts only on a VM whose pid file
# is in its own folder and whose environment names that pid file (what it started), and it
# refuses ports somebody else listens on.
#
#   bash infra/cluster.sh start       # idempotent; prints `export MESH_AMQP_URL=...` lines
#   bash infra/cluster.sh status      # exit 0 when all three nodes run in one cluster
#   bash infra/cluster.sh stop        # stops the three nodes and forgets the cluster
#   bash infra/cluster.sh urls        # the export lines again
#   bash infra/cluster.sh kill N      # SIGKILL node N (1-3): a crash
#   bash infra/cluster.sh stop-app N  # rabbitmqctl stop_app on node N: the VM stays up
#   bash infra/cluster.sh restart N   # bring node N back (after kill or stop-app)
#   bash infra/cluster.sh queues [N]  # each queue's type, leader, consumers and messages, as
#                                     # node N (default: the first that answers) sees them
#
#   eval "$(bash infra/cluster.sh start)"   # then every `mesh` command uses the cluster
#
# Node N is mesh-cN@localhost, AMQP on 127.0.0.1:$((BASE+N)) (5681-5683), Erlang
# distribution on +20000 (25681-25683), management on +10000 (15681-15683). Data, logs,
# pid files and the shared Erlang cookie live in ${MESH_CLUSTER_DIR:-/tmp/agent-reach-cluster}.
# Settings: MESH_CLUSTER_DIR, MESH_CLUSTER_BASE_PORT (5680), MESH_CLUSTER_TIMEOUT_S (90),
# MESH_RABBITMQ_SBIN (the folder holding rabbitmq-server and rabbitmqctl).
set -euo pipefail

DIR=${MESH_CLUSTER_DIR:-/tmp/agent-reach-cluster}
BASE=${MESH_CLUSTER_BASE_PORT:-5680}
TIMEOUT_S=${MESH_CLUSTER_TIMEOUT_S:-90}
NODES=(1 2 3)

say() { echo "cluster: $*" >&2; }
die() {
  say "$*"
  exit 1
}

find_sbin() {
  local candidate
  for candidate in "${MESH_RABBITMQ_SBIN:-}" /usr/lib/rabbitmq/bin; do
    if [ -n "$candidate" ] && [ -x "$candidate/rabbitmq-server" ] && [ -x "$candidate/rabbitmqctl" ]; then
      echo "$candidate"
      return
    fi
  done
  # a generic-unix install puts the real scripts on the PATH (Debian's /usr/sbin ones are
  # a wrapper that switches to the rabbitmq user and its cookie: not usable here)
  candidate=$(command -v rabbitmq-server 2>/dev/null || true)
  if [ -n "$candidate" ] && ! grep -q "rabbitmq-script-wrapper\|su rabbitmq" "$candidate" 2>/dev/null; then
    echo "$(dirname "$candidate")"
    return
  fi
  die "rabbitmq-server is not installed: apt-get install rabbitmq-server (3.10+), or set MESH_RABBITMQ_SBIN to the folder holding rabbitmq-server and rabbitmqctl"
}

node_name() { # another base port is another cluster: other names (one epmd serves all)
  if [ "$BASE" = 5680 ]; then echo "mesh-c$1@localhost"; else echo "mesh-$BASE-c$1@localhost"; fi
}
amqp_port() { echo $((BASE + $1)); }
mgmt_port() { echo $((BASE + 10000 + $1)); }
dist_port() { echo $((BASE + 20000 + $1)); }
node_dir() { echo "$DIR/c$1"; }
pid_file() { echo "$(node_dir "$1")/pid"; }

check_node_arg() {
  case "${1:-}" in
    1 | 2 | 3) ;;
    *) die "name a node: 1, 2 or 3 (got '${1:-}')" ;;
  esac
}

# the pid of node N when its pid file names a live beam of that very node, else nothing
node_pid() {
  local file pid
  file=$(pid_file "$1")
  [ -f "$file" ] || return 0
  pid=$(tr -dc 0-9 <"$file")
  [ -n "$pid" ] || return 0
  # ours: the VM was started with this very pid file (its environment says so)
  if [ -r "/proc/$pid/environ" ] && tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qxF "RABBITMQ_PID_FILE=$file"; then
    echo "$pid"
  fi
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# every variable the Debian scripts read, pointed at our folder (never /etc/rabbitmq)
node_env() {
  local n=$1 d
  d=$(node_dir "$n")
  export HOME="$DIR/home" # the shared Erlang cookie: $HOME/.erlang.cookie, server and CLI
  export RABBITMQ_CONF_ENV_FILE="$d/rabbitmq-env.conf"
  export RABBITMQ_CONFIG_FILE="$d/rabbitmq.conf"
  export RABBITMQ_ADVANCED_CONFIG_FILE="$d/advanced.config"
  export RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins"
  export RABBITMQ_NODENAME
  RABBITMQ_NODENAME=$(node_name "$n")
  export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
  export RABBITMQ_NODE_PORT
  RABBITMQ_NODE_PORT=$(amqp_port "$n")
  export RABBITMQ_DIST_PORT
  RABBITMQ_DIST_PORT=$(dist_port "$n")
  export RABBITMQ_MNESIA_BASE="$d/mnesia"
  export RABBITMQ_LOG_BASE="$d/log"
  export RABBITMQ_PID_FILE="$d/pid"
  export ERL_EPMD_ADDRESS=127.0.0.1
  export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
  export RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
}

ctl() { # ctl N ARGS...: rabbitmqctl against node N with the cluster's cookie
  local n=$1
  shift
  (node_env "$n" && "$SBIN/rabbitmqctl" -q -n "$(node_name "$n")" "$@")
}

prepare() {
  mkdir -p "$DIR/home"
  if [ ! -s "$DIR/home/.erlang.cookie" ]; then
    (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -dc 0-9a-f | tr a-f A-Z >"$DIR/home/.erlang.cookie")
  fi
  chmod 400 "$DIR/home/.erlang.cookie"
  local n d
  for n in "${NODES[@]}"; do
    d=$(node_dir "$n")
    mkdir -p "$d/mnesia" "$d/log"
    : >"$d/rabbitmq-env.conf"
    echo "[rabbitmq_management]." >"$d/enabled_plugins"
    cat >"$d/rabbitmq.conf" <<EOF
listeners.tcp.1 = 127.0.0.1:$(amqp_port "$n")
management.tcp.ip = 127.0.0.1
management.tcp.port = $(mgmt_port "$n")
# a killed node is down, not partitioned; a real partition stops the minority side
cluster_partition_handling = pause_minority
log.console = false
log.file.level = info
EOF
  done
}

start_node() { # start the VM of node N in the background unless it runs; no waiting
  local n=$1 d port
  d=$(node_dir "$n")
  if [ -n "$(node_pid "$n")" ]; then
    return
  fi
  for port in "$(amqp_port "$n")" "$(mgmt_port "$n")" "$(dist_port "$n")"; do
    if port_open "$port"; then
      die "port $port is taken by a process this script did not start: stop it, or pick other ports with MESH_CLUSTER_BASE_PORT"
    fi
  done
  rm -f "$(pid_file "$n")"
  say "starting $(node_name "$n") on 127.0.0.1:$(amqp_port "$n")"
  (
    node_env "$n"
    cd "$d"
    exec setsid "$SBIN/rabbitmq-server" >>"$d/log/stdout.log" 2>&1 </dev/null
  ) &
  disown
}

# wait until node N's VM wrote its pid file and its AMQP listener is up (it opens last)
wait_node() {
  local n=$1 deadline=$2
  until [ -n "$(node_pid "$n")" ] && port_open "$(amqp_port "$n")"; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      die "$(node_name "$n") not ready within ${TIMEOUT_S}s; see $(node_dir "$n")/log/"
    fi
    sleep 0.25
  done
}

running_nodes() { # how many nodes node N sees running in its cluster
  ctl "$1" eval 'length(rabbit_nodes:all_running()).' 2>/dev/null | tr -dc 0-9
}

join_node() {
  local n=$1
  [ -f "$(node_dir "$n")/joined" ] && return
  say "joining $(node_name "$n") to $(node_name 1)"
  ctl "$n" stop_app
  ctl "$n" join_cluster "$(node_name 1)"
  ctl "$n" start_app
  touch "$(node_dir "$n")/joined"
}

wait_cluster() { # wait_cluster N COUNT DEADLINE: until node N sees COUNT nodes running
  local n=$1 want=$2 deadline=$3 seen
  until seen=$(running_nodes "$n") && [ -n "$seen" ] && [ "$seen" -ge "$want" ]; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      die "$(node_name "$n") sees ${seen:-?}/${#NODES[@]} nodes running after ${TIMEOUT_S}s (want $want); see $DIR/c*/log/"
    fi
    sleep 0.5
  done
}

urls() {
  local n list=""
  for n in "${NODES[@]}"; do
    list+="${list:+,}amqp://guest:guest@127.0.0.1:$(amqp_port "$n")/"
  done
  echo "export MESH_AMQP_URL=$list"
  echo "export MESH_MANAGEMENT_URL=http://guest:guest@127.0.0.1:$(mgmt_port 1)/"
}

cmd_start() {
  local deadline n
  deadline=$(($(date +%s) + TIMEOUT_S))
  prepare
  # node 1 first: the others join it; all three boot at once to save time
  for n in "${NODES[@]}"; do
    start_node "$n"
  done
  for n in "${NODES[@]}"; do
    wait_node "$n" "$deadline"
  done
  for n in "${NODES[@]:1}"; do
    join_node "$n"
  done
  for n in "${NODES[@]}"; do
    wait_node "$n" "$deadline"
  done
  wait_cluster 1 "${#NODES[@]}" "$deadline"
  say "three nodes running in one cluster (data in $DIR)"
  urls
}

stop_node() { # gracefully, then SIGKILL at the deadline; only a node we started
  local n=$1 pid deadline
  pid=$(node_pid "$n")
  if [ -z "$pid" ]; then
    rm -f "$(pid_file "$n")"
    return
  fi
  say "stopping $(node_name "$n") (pid $pid)"
  ctl "$n" stop >/dev/null 2>&1 &
  deadline=$(($(date +%s) + 30))
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      kill -9 "$pid" 2>/dev/null || true
    fi
    sleep 0.2
  done
  wait || true
  rm -f "$(pid_file "$n")"
}

cmd_stop() {
  local n
  for n in "${NODES[@]}"; do
    stop_node "$n" &
  done
  wait
  # the cluster is a throw-away: the next start forms a fresh one (logs are kept)
  for n in "${NODES[@]}"; do
    rm -rf "$(node_dir "$n")/mnesia" "$(node_dir "$n")/joined"
  done
  say "stopped"
}

cmd_status() {
  local n pid ok=0 state seen
  for n in "${NODES[@]}"; do
    pid=$(node_pid "$n")
    if [ -z "$pid" ]; then
      state="down"
      ok=1
    elif ! port_open "$(amqp_port "$n")"; then
      state="VM up (pid $pid), AMQP listener closed (app stopped or booting)"
      ok=1
    else
      state="running (pid $pid)"
    fi
    echo "$(node_name "$n") amqp://127.0.0.1:$(amqp_port "$n")/ $state"
  done
  if [ -n "$(node_pid 1)" ]; then
    seen=$(running_nodes 1 || true)
    echo "cluster: ${seen:-?}/${#NODES[@]} nodes running as seen from $(node_name 1)"
    [ "$seen" = "${#NODES[@]}" ] || ok=1
  fi
  return "$ok"
}

cmd_kill() {
  local n=$1 pid
  pid=$(node_pid "$n")
  [ -n "$pid" ] || die "$(node_name "$n") is not running (no live pid in $(pid_file "$n"))"
  kill -9 "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  say "killed $(node_name "$n") (pid $pid)"
}

cmd_stop_app() {
  local n=$1
  [ -n "$(node_pid "$n")" ] || die "$(node_name "$n") is not running"
  ctl "$n" stop_app
  say "stopped the app of $(node_name "$n") (the VM stays up)"
}

cmd_restart() {
  local n=$1 deadline
  deadline=$(($(date +%s) + TIMEOUT_S))
  [ -f "$(node_dir "$n")/joined" ] || [ "$n" = 1 ] || die "$(node_name "$n") never joined: run start"
  if [ -n "$(node_pid "$n")" ]; then
    port_open "$(amqp_port "$n")" || ctl "$n" start_app
  else
    start_node "$n"
  fi
  wait_node "$n" "$deadline"
  # back in the cluster: it sees itself and at least one peer (another may be down)
  wait_cluster "$n" 2 "$deadline"
  say "$(node_name "$n") is back"
}

cmd_queues() { # cmd_queues [N]: list_queues as node N (or the first node that answers)
  local n candidates=("${1:-1}")
  [ -n "${1:-}" ] || candidates=("${NODES[@]}")
  for n in "${candidates[@]}"; do
    if ctl "$n" list_queues name type leader consumers messages_ready messages_unacknowledged 2>/dev/null; then
      return
    fi
  done
  die "no node answered list_queues"
}

SBIN=$(find_sbin)
case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  urls) urls ;;
  kill)
    check_node_arg "${2:-}"
    cmd_kill "$2"
    ;;
  stop-app)
    check_node_arg "${2:-}"
    cmd_stop_app "$2"
    ;;
  restart)
    check_node_arg "${2:-}"
    cmd_restart "$2"
    ;;
  queues)
    cmd_queues "${2:-}"
    ;;
  *)
    echo "usage: $0 start|stop|status|urls|kill N|stop-app N|restart N|queues [N]" >&2
    exit 2
    ;;
esac

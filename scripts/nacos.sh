#!/usr/bin/env bash
# Local Nacos 3.x test server: a plain Java process on 127.0.0.1, embedded Derby, auth off.
#
#   scripts/nacos.sh start [--clean]   install (first run), start, wait until it answers
#   scripts/nacos.sh stop              TERM (then KILL), wait until the ports are free
#   scripts/nacos.sh status            exit 0 when running and answering
#   scripts/nacos.sh logs [-f] [N]     tail the server log
#   scripts/nacos.sh install           only download/build into the cache
#
#   scripts/nacos.sh cluster start [--clean] [N...]   three nodes in cluster mode (or nodes N),
#                                      embedded storage (Derby replicated by JRaft); waits
#                                      until every node answers and a config round trip passes
#   scripts/nacos.sh cluster stop [N...] | kill [N...]   TERM (then KILL) | KILL at once
#   scripts/nacos.sh cluster status    each node, and the raft leader of the config group
#   scripts/nacos.sh cluster leader    host:port (HTTP) of that leader
#   scripts/nacos.sh cluster addr      the nodes as nacos.server_addr takes them
#
# Environment (defaults):
#   NACOS_PORT=8848            HTTP port; gRPC client port = +1000, gRPC cluster = +1001,
#                              JRaft = -1000 (all on 127.0.0.1)
#   NACOS_CONSOLE=1            1: also start the console (merged mode), 0: server only
#   NACOS_CONSOLE_PORT=8080    console port when NACOS_CONSOLE=1
#   NACOS_API_COMPAT=0         1: re-enable the legacy v1/v2 admin+console HTTP APIs that
#                              Nacos 3.x switches off by default (e.g. v1 config search,
#                              v2 /cs/config). Off by default to behave like a stock server.
#   NACOS_CACHE_DIR=<repo>/.cache/nacos   jars, compiled launcher, install stamp
#   NACOS_HOME=$NACOS_CACHE_DIR/home      data (Derby), conf, logs, nacos.pid, nacos.log
#   NACOS_START_TIMEOUT=180    seconds to wait for the server to answer
#   NACOS_STOP_TIMEOUT=30      seconds between TERM and KILL
#   NACOS_JAVA_OPTS            extra/override JVM flags
#   JAVA, MVN                  java / mvn executables (default: from PATH)
#   NACOS_CLUSTER_PORTS="8858 8868 8878"   the cluster nodes' HTTP ports (each also uses
#                              +1000, +1001 and -1000, like the single server; no console)
#   NACOS_CLUSTER_HOME=$NACOS_CACHE_DIR/cluster   node homes: node1, node2, node3
#   NACOS_CLUSTER_HEAP=320m    each node's -Xmx (three JVMs on a small machine)
#   NACOS_CLUSTER_ELECTION_MS=5000   raft election timeout (Nacos's default)
#   NACOS_CLUSTER_RESPAWNS=12  how often the nodes are started again while the cluster forms
#
# The server version is pinned only in scripts/nacos/pom.xml (property nacos.version).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
POM="$SCRIPT_DIR/nacos/pom.xml"

NACOS_PORT="${NACOS_PORT:-8848}"
NACOS_CONSOLE="${NACOS_CONSOLE:-1}"
NACOS_CONSOLE_PORT="${NACOS_CONSOLE_PORT:-8080}"
NACOS_API_COMPAT="${NACOS_API_COMPAT:-0}"
NACOS_CACHE_DIR="$(realpath -m "${NACOS_CACHE_DIR:-$REPO_ROOT/.cache/nacos}")"
NACOS_HOME="$(realpath -m "${NACOS_HOME:-$NACOS_CACHE_DIR/home}")"
NACOS_START_TIMEOUT="${NACOS_START_TIMEOUT:-180}"
NACOS_STOP_TIMEOUT="${NACOS_STOP_TIMEOUT:-30}"
NACOS_CLUSTER_PORTS="${NACOS_CLUSTER_PORTS:-8858 8868 8878}"
NACOS_CLUSTER_HOME="$(realpath -m "${NACOS_CLUSTER_HOME:-$NACOS_CACHE_DIR/cluster}")"
NACOS_CLUSTER_HEAP="${NACOS_CLUSTER_HEAP:-320m}"
NACOS_CLUSTER_ELECTION_MS="${NACOS_CLUSTER_ELECTION_MS:-5000}"
NACOS_CLUSTER_RESPAWNS="${NACOS_CLUSTER_RESPAWNS:-12}"
JAVA="${JAVA:-java}"
MVN="${MVN:-mvn}"

HOST=127.0.0.1
PID_FILE="$NACOS_HOME/nacos.pid"
LOG_FILE="$NACOS_HOME/nacos.log"
HOME_MARKER="$NACOS_HOME/.nacos-sh-home"
RUN_INFO="$NACOS_HOME/nacos.run"  # ports of the running server, so stop/status need no env
MAIN_CLASS=dynagent.nacos.NacosTestServer

LIB_DIR="$NACOS_CACHE_DIR/lib"
CLASSES_DIR="$NACOS_CACHE_DIR/build/classes"
CP_FILE="$NACOS_CACHE_DIR/classpath.txt"
STAMP_FILE="$NACOS_CACHE_DIR/install.stamp"

log() { echo "nacos.sh: $*" >&2; }


set_ports() {
  GRPC_PORT=$((NACOS_PORT + 1000))
  GRPC_CLUSTER_PORT=$((NACOS_PORT + 1001))
  RAFT_PORT=$((NACOS_PORT - 1000))
  BASE_URL="http://$HOST:$NACOS_PORT/nacos"
}

# Use the ports the server in this NACOS_HOME was started with (if any).
load_run_info() {
  if [[ -f "$RUN_INFO" ]]; then
    local k v
    while IFS='=' read -r k v; do
      case "$k" in
        NACOS_PORT | NACOS_CONSOLE | NACOS_CONSOLE_PORT) printf -v "$k" '%s' "$v" ;;
      esac
    done <"$RUN_INFO"
    set_ports
  fi
}
die() { log "$*"; exit 1; }

nacos_version() {
  sed -n 's:.*<nacos.version>\(.*\)</nacos.version>.*:\1:p' "$POM" | head -n1
}

# ---------------------------------------------------------------------------------- install
INSTALL_LAYOUT=2  # bump when the cache layout written by do_install changes

install_fingerprint() {
  # Changes whenever the pom, the launcher sources or the layout change -> reinstall.
  { echo "layout $INSTALL_LAYOUT"
    cd "$SCRIPT_DIR/nacos" && find pom.xml src -type f | LC_ALL=C sort | xargs sha256sum
  } | sha256sum | cut -c1-16
}

is_installed() {
  [[ -f "$STAMP_FILE" && -f "$CP_FILE" && -d "$CLASSES_DIR" ]] &&
    [[ "$(cat "$STAMP_FILE")" == "$(install_fingerprint)" ]]
}

do_install() {
  command -v "$JAVA" >/dev/null || die "java not found (need Java 17+)"
  command -v "$MVN" >/dev/null || die "mvn not found (need Maven 3.8+)"
  mkdir -p "$NACOS_CACHE_DIR"
  log "installing Nacos $(nacos_version) into $NACOS_CACHE_DIR (first run downloads ~190 MB from Maven Central)"
  local mlog="$NACOS_CACHE_DIR/install.log" raw_cp="$NACOS_CACHE_DIR/classpath.m2.txt"
  rm -rf "$LIB_DIR" "$NACOS_CACHE_DIR/build" "$STAMP_FILE"
  if ! "$MVN" -B -f "$POM" -Dnacos.cache.dir="$NACOS_CACHE_DIR" \
        compile \
        dependency:copy-dependencies -DoutputDirectory="$LIB_DIR" -DincludeScope=runtime \
        dependency:build-classpath -Dmdep.outputFile="$raw_cp" -Dmdep.includeScope=runtime \
        >"$mlog" 2>&1; then
    tail -n 40 "$mlog" >&2
    die "maven install failed (full log: $mlog)"
  fi
  # Keep Maven's dependency order (it matters for duplicate resources), but point at lib/.
  {
    echo "$CLASSES_DIR"
    { tr ':' '\n' <"$raw_cp"; echo; } | while IFS= read -r jar; do
      [[ -n "$jar" ]] || continue
      local f="$LIB_DIR/$(basename "$jar")"
      [[ -f "$f" ]] || die "missing $f after copy-dependencies"
      echo "$f"
    done
  } >"$CP_FILE"
  rm -f "$raw_cp"
  install_fingerprint >"$STAMP_FILE"
  log "installed ($(($(wc -l <"$CP_FILE") - 1)) jars)"
}

ensure_installed() {
  mkdir -p "$NACOS_CACHE_DIR"
  # Serialise concurrent installs (e.g. two test sessions starting at once).
  exec 8>"$NACOS_CACHE_DIR/.install.lock"
  flock 8
  is_installed || do_install
  flock -u 8
  exec 8>&-
}

# ---------------------------------------------------------------------------------- process
read_pid() { [[ -f "$PID_FILE" ]] && tr -dc '0-9' <"$PID_FILE" || true; }

# True if $1 is a live Nacos launched by this script for this NACOS_HOME (guards pid reuse).
is_our_process() {
  local pid="$1"
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  local cmd
  cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
  [[ "$cmd" == *"$MAIN_CLASS"* && "$cmd" == *"-Dnacos.home=$NACOS_HOME "* ]]
}

# Our server for this NACOS_HOME, found by scanning /proc (used when the pid file is stale).
find_pid() {
  local d pid
  for d in /proc/[0-9]*; do
    pid="${d#/proc/}"
    if is_our_process "$pid"; then echo "$pid"; return 0; fi
  done
}

running_pid() {
  local pid
  pid="$(read_pid)"
  if is_our_process "$pid"; then echo "$pid"; else find_pid; fi
}

http_code() { curl -s -o /dev/null -m 5 -w '%{http_code}' "$@" 2>/dev/null || true; }

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

ports() {
  echo "$NACOS_PORT $GRPC_PORT $GRPC_CLUSTER_PORT $RAFT_PORT"
  if [[ "$NACOS_CONSOLE" == 1 ]]; then echo "$NACOS_CONSOLE_PORT"; fi
}

is_ready() { [[ "$(http_code "$BASE_URL/v3/admin/core/state/readiness")" == 200 ]]; }

# Publish a config through the v1 open API, read it back, delete it.
config_round_trip() {
  local data_id="nacos-sh-probe-$$" group="NACOS_SH_PROBE" value="probe-$(date +%s%N)" got i
  [[ "$(curl -s -m 5 -X POST "$BASE_URL/v1/cs/configs" --data-urlencode "dataId=$data_id" \
        --data-urlencode "group=$group" --data-urlencode "content=$value" 2>/dev/null)" == true ]] || return 1
  # v1 GET is served from the server's dump cache: visible ~100 ms after the publish.
  for i in $(seq 1 50); do
    got="$(curl -s -m 5 "$BASE_URL/v1/cs/configs?dataId=$data_id&group=$group" 2>/dev/null || true)"
    [[ "$got" == "$value" ]] && break
    sleep 0.1
  done
  curl -s -m 5 -o /dev/null -X DELETE "$BASE_URL/v1/cs/configs?dataId=$data_id&group=$group" || true
  [[ "$got" == "$value" ]]
}

describe() {
  local pid="$1" s="Nacos $(nacos_version) pid $pid: $BASE_URL (gRPC $HOST:$GRPC_PORT)"
  if [[ "$NACOS_CONSOLE" == 1 ]]; then s+=", console http://$HOST:$NACOS_CONSOLE_PORT/"; fi
  echo "$s, home $NACOS_HOME"
}

write_conf() {
  local compat=false
  if [[ "$NACOS_API_COMPAT" == 1 ]]; then compat=true; fi
  mkdir -p "$NACOS_HOME/conf" "$NACOS_HOME/logs"
  cat >"$NACOS_HOME/conf/application.properties" <<EOF
# Generated by scripts/nacos.sh on every start; edits are overwritten.
nacos.server.main.port=$NACOS_PORT
server.address=$HOST
nacos.inetutils.ip-address=$HOST
nacos.server.contextPath=/nacos
nacos.console.port=$NACOS_CONSOLE_PORT
nacos.console.contextPath=
nacos.console.remote.server.context-path=/nacos
nacos.logs.path=$NACOS_HOME/logs
spring.sql.init.platform=derby
# Test server: no authentication anywhere (no JWT secret needed when all three are off).
nacos.core.auth.system.type=nacos
nacos.core.auth.enabled=false
nacos.core.auth.admin.enabled=false
nacos.core.auth.console.enabled=false
# v1/v2 client open API stays on (3.x default); legacy admin/console APIs follow NACOS_API_COMPAT.
nacos.core.api.compatibility.client.enabled=true
nacos.core.api.compatibility.admin.enabled=$compat
nacos.core.api.compatibility.console.enabled=$compat
# Keep it light.
nacos.istio.mcp.server.enabled=false
nacos.k8s.sync.enabled=false
nacos.prometheus.metrics.enabled=false
management.elastic.metrics.export.enabled=false
management.influx.metrics.export.enabled=false
server.tomcat.accesslog.enabled=false
server.error.include-message=ALWAYS
nacos.config.push.maxRetryTime=50
EOF
}

# spawn_server STANDALONE: write this home's settings and launch the JVM in the background;
# the pid is left in SPAWNED_PID (the caller waits for readiness).
spawn_server() {
  local standalone="$1"
  touch "$HOME_MARKER"
  printf 'NACOS_PORT=%s\nNACOS_CONSOLE=%s\nNACOS_CONSOLE_PORT=%s\n' \
    "$NACOS_PORT" "$NACOS_CONSOLE" "$NACOS_CONSOLE_PORT" >"$RUN_INFO"
  write_conf
  if [[ "$standalone" == false ]]; then write_cluster_conf; fi
  rm -f "$PID_FILE"
  local mode=server
  if [[ "$NACOS_CONSOLE" == 1 ]]; then mode=merged; fi
  local cp
  cp="$(paste -sd: "$CP_FILE")"
  # shellcheck disable=SC2206
  local jvm=(-Xms256m "-Xmx${NACOS_HEAP:-512m}" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xss512k
             -XX:MaxDirectMemorySize=256m -Djava.net.preferIPv4Stack=true
             ${NACOS_JAVA_OPTS:-})
  (
    cd "$NACOS_HOME"
    exec 8>&- 9>&-  # don't let the server inherit (and hold) our lock files
    exec setsid "$JAVA" "${jvm[@]}" \
      -Dnacos.home="$NACOS_HOME" \
      -Dnacos.standalone="$standalone" \
      -DembeddedStorage=true \
      -Dnacos.deployment.type="$mode" \
      -Dnacos.remote.grpc.listen.ip="$HOST" \
      -Dnacos.logs.path="$NACOS_HOME/logs" \
      -DJM.LOG.PATH="$NACOS_HOME/logs" \
      -Dderby.stream.error.file="$NACOS_HOME/logs/derby.log" \
      -cp "$cp" "$MAIN_CLASS" \
      --spring.config.additional-location="file:$NACOS_HOME/conf/" \
      </dev/null >>"$LOG_FILE" 2>&1
  ) &
  local launcher=$! i pid=""
  # setsid normally execs in place (same pid); if it had to fork, find the java process.
  for i in $(seq 1 50); do
    if is_our_process "$launcher"; then pid=$launcher; else pid="$(find_pid)"; fi
    [[ -n "$pid" ]] && break
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.1
  done
  if [[ -z "$pid" ]]; then
    tail -n 60 "$LOG_FILE" >&2 || true
    die "the server process did not start"
  fi
  echo "$pid" >"$PID_FILE"
  SPAWNED_PID=$pid
}

# ---------------------------------------------------------------------------------- commands
cmd_start() {
  local clean=0 arg
  for arg in "$@"; do
    case "$arg" in
      --clean) clean=1 ;;
      *) die "start: unknown option $arg" ;;
    esac
  done

  ensure_installed
  mkdir -p "$NACOS_HOME"
  exec 9>"$NACOS_HOME/.start.lock"
  flock 9

  local pid
  pid="$(running_pid)"
  if [[ -n "$pid" && "$clean" == 1 ]]; then
    log "--clean: stopping the running server first"
    local want=("$NACOS_PORT" "$NACOS_CONSOLE" "$NACOS_CONSOLE_PORT")
    cmd_stop
    NACOS_PORT=${want[0]} NACOS_CONSOLE=${want[1]} NACOS_CONSOLE_PORT=${want[2]}
    set_ports
    pid=""
  fi
  if [[ -n "$pid" ]]; then
    load_run_info
    if wait_ready "$pid" "$NACOS_START_TIMEOUT" quiet; then
      echo "already running: $(describe "$pid")"
      return 0
    fi
    die "a server (pid $pid) is running for $NACOS_HOME but does not answer; run '$0 stop' first"
  fi
  local started_at=$SECONDS

  if [[ "$clean" == 1 ]]; then
    if [[ -d "$NACOS_HOME" && ! -f "$HOME_MARKER" && -n "$(ls -A "$NACOS_HOME" | grep -v '^\.start\.lock$' || true)" ]]; then
      die "--clean refused: $NACOS_HOME is not empty and was not created by nacos.sh ($HOME_MARKER missing)"
    fi
    find "$NACOS_HOME" -mindepth 1 -maxdepth 1 ! -name .start.lock -exec rm -rf {} +
  fi

  local p
  for p in $(ports); do
    port_open "$p" && die "port $HOST:$p is already in use (NACOS_PORT=$NACOS_PORT uses $(ports | tr '\n' ' ' | sed 's/ $//'); set NACOS_PORT / NACOS_CONSOLE_PORT / NACOS_CONSOLE=0)"
  done

  spawn_server true
  pid="$SPAWNED_PID"
  log "started pid $pid (log $LOG_FILE), waiting up to ${NACOS_START_TIMEOUT}s"

  if ! wait_ready "$pid" "$NACOS_START_TIMEOUT"; then
    log "Nacos did not become ready; last log lines:"
    tail -n 60 "$LOG_FILE" >&2 || true
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    rm -f "$PID_FILE"
    exit 1
  fi
  echo "started in $((SECONDS - started_at))s: $(describe "$pid")"
}

# wait_ready PID TIMEOUT [quiet]: readiness endpoint + gRPC port + config round trip.
wait_ready() {
  local pid="$1" timeout="$2" deadline=$((SECONDS + $2))
  while ((SECONDS < deadline)); do
    kill -0 "$pid" 2>/dev/null || { [[ "${3:-}" == quiet ]] || log "process $pid exited"; return 1; }
    if is_ready && port_open "$GRPC_PORT" && config_round_trip; then
      return 0
    fi
    sleep 0.5
  done
  [[ "${3:-}" == quiet ]] || log "timed out after ${timeout}s"
  return 1
}

cmd_stop() {
  local pid
  pid="$(running_pid)"
  if [[ -n "$pid" ]]; then load_run_info; fi
  if [[ -z "$pid" ]]; then
    rm -f "$PID_FILE"
    echo "not running"
  else
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + NACOS_STOP_TIMEOUT))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      log "pid $pid still alive after ${NACOS_STOP_TIMEOUT}s, sending KILL"
      kill -KILL "$pid" 2>/dev/null || true
      while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
    fi
    rm -f "$PID_FILE"
    echo "stopped pid $pid"
  fi
  local p deadline=$((SECONDS + 15))
  for p in $(ports); do
    while port_open "$p"; do
      ((SECONDS < deadline)) || die "port $HOST:$p still in use after stop"
      sleep 0.2
    done
  done
}

cmd_status() {
  local pid
  pid="$(running_pid)"
  if [[ -z "$pid" ]]; then
    echo "not running"
    return 1
  fi
  load_run_info
  if is_ready; then
    echo "running: $(describe "$pid")"
    return 0
  fi
  echo "pid $pid alive but not answering on $BASE_URL"
  return 2
}

cmd_logs() {
  [[ -f "$LOG_FILE" ]] || die "no log file at $LOG_FILE"
  local follow=() n=200 arg
  for arg in "$@"; do
    case "$arg" in
      -f) follow=(-F) ;;
      *) n="$arg" ;;
    esac
  done
  tail -n "$n" "${follow[@]}" "$LOG_FILE"
}

# ---------------------------------------------------------------------------------- cluster
# Three nodes in cluster mode (-Dnacos.standalone=false) with embedded storage: each node's
# Derby is replicated by JRaft (raft port = HTTP - 1000); members come from conf/cluster.conf.
# shellcheck disable=SC2206
CLUSTER_PORTS=($NACOS_CLUSTER_PORTS)
CLUSTER_ROUNDS=0
declare -A DUMP_MARK=()

# Point the single-server variables (ports, home, pid/log files) at node $1 (1-based).
use_node() {
  local i="$1"
  [[ "$i" =~ ^[0-9]+$ ]] && ((i >= 1 && i <= ${#CLUSTER_PORTS[@]})) ||
    die "no node $i (nodes 1..${#CLUSTER_PORTS[@]})"
  NACOS_PORT=${CLUSTER_PORTS[$((i - 1))]}
  NACOS_CONSOLE=0
  NACOS_HOME="$NACOS_CLUSTER_HOME/node$i"
  PID_FILE="$NACOS_HOME/nacos.pid"
  LOG_FILE="$NACOS_HOME/nacos.log"
  HOME_MARKER="$NACOS_HOME/.nacos-sh-home"
  RUN_INFO="$NACOS_HOME/nacos.run"
  NACOS_HEAP="$NACOS_CLUSTER_HEAP"
  set_ports
}

cluster_addr() {
  local p out=()
  for p in "${CLUSTER_PORTS[@]}"; do out+=("$HOST:$p"); done
  (IFS=,; echo "${out[*]}")
}

write_cluster_conf() {
  local p
  { echo "# Generated by scripts/nacos.sh cluster start; edits are overwritten."
    for p in "${CLUSTER_PORTS[@]}"; do echo "$HOST:$p"; done
  } >"$NACOS_HOME/conf/cluster.conf"
  cat >>"$NACOS_HOME/conf/application.properties" <<EOF
# Cluster mode: members from conf/cluster.conf, configs in Derby replicated by JRaft.
nacos.core.member.lookup.type=file
nacos.core.protocol.raft.data.election_timeout_ms=$NACOS_CLUSTER_ELECTION_MS
# No fsync of the raft log: a leader commits its first entry of a term as fast as its
# followers learn of it (see await_nodes). The nodes are processes on one machine and are
# killed, never powered off, so the page cache keeps every write that was acknowledged.
nacos.core.protocol.raft.data.sync=false
# A new cluster has no pre-3.x namespace rows to migrate, and the migration's pre-check
# queries the store before the raft group has a leader, which fails the start.
nacos.config.namespace.compatible.mode=false
EOF
}

# Launch node $1 unless it runs; no waiting.
cluster_spawn() {
  use_node "$1"
  local pid p
  pid="$(running_pid)"
  if [[ -n "$pid" ]]; then return 0; fi
  mkdir -p "$NACOS_HOME"
  if [[ "$CLUSTER_CLEAN" == 1 ]]; then
    if [[ -n "$(ls -A "$NACOS_HOME")" && ! -f "$HOME_MARKER" ]]; then
      die "--clean refused: $NACOS_HOME is not empty and was not created by nacos.sh ($HOME_MARKER missing)"
    fi
    find "$NACOS_HOME" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
  fi
  for p in $(ports); do
    port_open "$p" && die "port $HOST:$p of node $1 is already in use (set NACOS_CLUSTER_PORTS)"
  done
  DUMP_MARK[$1]=$(stat -c %s "$NACOS_HOME/logs/config-server.log" 2>/dev/null || echo 0)
  spawn_server false
  log "node $1: started pid $SPAWNED_PID on $BASE_URL (log $LOG_FILE)"
}

# Whether node $1 (its variables set by use_node) has read the store since it was started:
# Nacos logs its dump schedule right after the first full dump.
has_dumped() {
  tail -c +$((${DUMP_MARK[$1]:-0} + 1)) "$NACOS_HOME/logs/config-server.log" 2>/dev/null | grep -q 'initialDelay:'
}

cluster_start() {
  local arg i nodes=()
  CLUSTER_CLEAN=0
  for arg in "$@"; do
    case "$arg" in
      --clean) CLUSTER_CLEAN=1 ;;
      *) nodes+=("$arg") ;;
    esac
  done
  if ((${#nodes[@]} == 0)); then mapfile -t nodes < <(seq 1 ${#CLUSTER_PORTS[@]}); fi
  if [[ "$CLUSTER_CLEAN" == 1 ]]; then
    for i in "${nodes[@]}"; do cluster_stop_node "$i" TERM >/dev/null; done
  fi
  ensure_installed
  mkdir -p "$NACOS_CLUSTER_HOME"
  exec 9>"$NACOS_CLUSTER_HOME/.start.lock"
  flock 9
  local started_at=$SECONDS
  CLUSTER_DEADLINE=$((SECONDS + NACOS_START_TIMEOUT))
  for i in "${nodes[@]}"; do cluster_spawn "$i"; done
  await_nodes "${nodes[@]}"
  echo "cluster ready in $((SECONDS - started_at))s (nodes started again $CLUSTER_ROUNDS times): nacos.server_addr $(cluster_addr), homes $NACOS_CLUSTER_HOME/node*"
}

# Wait until nodes "$@" answer and a config written through them reads back.
#
# A raft group is born fragile, and Nacos (3.1, alibaba/nacos#10698) does not survive it: a
# member that learns of a new leader reads the store at once, and if that leader has not yet
# committed an entry in its term the read is refused, falls back to a route table that is
# refreshed only every 5-10 s, finds no leader there and the node exits ("The Raft Group
# [nacos_config] did not find the Leader node", fatal at start). One follower that wins the
# race keeps a quorum with the leader and the cluster forms; a node started later joins a
# leader that has committed, and is safe. If both followers lose, the leader steps down and
# exits too, and nodes started again one by one would each be born beside a single peer,
# which loses more often. So when a node exits: if another has read the store, a quorum
# stands and the dead node is started again to join it; if none has within one election
# timeout, every node of "$@" that is not ready is stopped and all are started again
# together, at most NACOS_CLUSTER_RESPAWNS times.
await_nodes() {
  local all i pid dead forming quorum grace="" clean
  while true; do
    ((SECONDS < CLUSTER_DEADLINE)) || die "the cluster did not become ready in ${NACOS_START_TIMEOUT}s (logs $NACOS_CLUSTER_HOME/node*/nacos.log)"
    all=1 dead=() forming=() quorum=0
    for i in "$@"; do
      use_node "$i"
      pid="$(running_pid)"
      if [[ -z "$pid" ]]; then
        dead+=("$i") all=0
      elif ! { is_ready && port_open "$GRPC_PORT"; }; then
        all=0
        if has_dumped "$i"; then quorum=1; else forming+=("$i"); fi
      else
        quorum=1
      fi
    done
    if ((${#dead[@]})); then
      if [[ -z "$grace" ]]; then grace=$((SECONDS + NACOS_CLUSTER_ELECTION_MS / 1000 + 1)); fi
      if ((quorum)); then forming=(); fi  # they join the quorum that stands: none is stopped
      if ((${#forming[@]} == 0 || SECONDS >= grace)); then
        CLUSTER_ROUNDS=$((CLUSTER_ROUNDS + 1))
        if ((CLUSTER_ROUNDS > NACOS_CLUSTER_RESPAWNS)); then
          use_node "${dead[0]}"
          tail -n 40 "$LOG_FILE" >&2 || true
          die "the cluster did not form after starting its nodes again $NACOS_CLUSTER_RESPAWNS times (log $LOG_FILE)"
        fi
        for i in "${dead[@]}"; do
          use_node "$i"
          log "node $i exited while the cluster formed: $(grep -o 'did not find the Leader node\|Caused by: [^:]*' "$LOG_FILE" | tail -n1)"
          # A node that died while Derby created its files cannot open them again.
          if tail -n 300 "$LOG_FILE" | grep -q 'ERROR XBM0A'; then rm -rf "$NACOS_HOME/data/derby-data"; fi
        done
        for i in "${forming[@]}"; do cluster_stop_node "$i" KILL >/dev/null; done
        clean=$CLUSTER_CLEAN
        CLUSTER_CLEAN=0  # their raft logs and votes stay: they join the cluster again
        for i in "${dead[@]}" "${forming[@]}"; do cluster_spawn "$i"; done
        CLUSTER_CLEAN=$clean
        grace=""
      fi
    elif ((all)) && config_round_trip; then
      return 0
    fi
    sleep 0.5
  done
}

# cluster_stop_node N SIGNAL: TERM (then KILL after NACOS_STOP_TIMEOUT), or KILL at once (a
# crash: no goodbye to the other members, no raft leadership handed over).
cluster_stop_node() {
  use_node "$1"
  local pid
  pid="$(running_pid)"
  if [[ "$2" == KILL && -n "$pid" ]]; then
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    rm -f "$PID_FILE"
    echo "node $1: killed pid $pid"
    return 0
  fi
  echo "node $1: $(cmd_stop)"
}

# The raft leader of the config group as node $1 sees it: host:port of its HTTP API (the raft
# port + 1000), or nothing while there is none.
cluster_leader_of() {
  use_node "$1"
  curl -s -m 3 "$BASE_URL/v3/admin/core/cluster/node/self" 2>/dev/null |
    grep -o '"nacos_config":{[^}]*"leader":"[^"]*"' |
    sed 's/.*"leader":"\([^"]*\)"/\1/' |
    awk -F: 'NF == 2 { print $1 ":" $2 + 1000 }'
}

cluster_leader() {
  local i leader
  for i in $(seq 1 ${#CLUSTER_PORTS[@]}); do
    use_node "$i"
    [[ -n "$(running_pid)" ]] || continue
    leader="$(cluster_leader_of "$i")"
    # A node may name a leader that just died until it notices (the election timeout).
    if [[ -n "$leader" ]] && port_open "${leader##*:}"; then echo "$leader"; return 0; fi
  done
  log "no running node names a leader of the config group"
  return 1
}

cluster_status() {
  local i pid rc=0
  for i in $(seq 1 ${#CLUSTER_PORTS[@]}); do
    use_node "$i"
    pid="$(running_pid)"
    if [[ -z "$pid" ]]; then
      echo "node $i ($BASE_URL): not running"; rc=1
    elif is_ready; then
      echo "node $i ($BASE_URL): running, pid $pid, home $NACOS_HOME"
    else
      echo "node $i ($BASE_URL): pid $pid alive but not answering"; rc=1
    fi
  done
  echo "config leader: $(cluster_leader 2>/dev/null || echo none)"
  return $rc
}

cmd_cluster() {
  local sub="${1:-}" i signal=TERM nodes
  shift || true
  case "$sub" in
    start) cluster_start "$@" ;;
    stop | kill)
      nodes=("$@")
      if [[ "$sub" == kill ]]; then signal=KILL; fi
      if ((${#nodes[@]} == 0)); then mapfile -t nodes < <(seq 1 ${#CLUSTER_PORTS[@]}); fi
      for i in "${nodes[@]}"; do cluster_stop_node "$i" "$signal"; done
      ;;
    status) cluster_status ;;
    leader) cluster_leader ;;
    addr) cluster_addr ;;
    *) echo "usage: $0 cluster start [--clean] [N...] | stop [N...] | kill [N...] | status | leader | addr" >&2; exit 2 ;;
  esac
}

set_ports

case "${1:-}" in
  start) shift; cmd_start "$@" ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  logs) shift; cmd_logs "$@" ;;
  cluster) shift; cmd_cluster "$@" ;;
  install) ensure_installed; echo "installed Nacos $(nacos_version) in $NACOS_CACHE_DIR" ;;
  *) echo "usage: $0 start [--clean] | stop | status | logs [-f] [N] | install | cluster ..." >&2; exit 2 ;;
esac

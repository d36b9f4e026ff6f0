#!/usr/bin/env bash
# Local Redis for shared sessions in tests and development: Debian's redis-server on
# 127.0.0.1 only, with an append-only file fsynced on every write, so a restart loses
# no committed session turn.
#
#   scripts/redis.sh start [--clean]   install redis-server if missing, start, wait for PONG
#   scripts/redis.sh stop              SHUTDOWN (then TERM/KILL), wait until the port is free
#   scripts/redis.sh status            exit 0 when running and answering
#   scripts/redis.sh sentinel start [--clean] | stop | status
#                                      a primary, its replica(s) and three of Debian's
#                                      redis-sentinel watching them (sessions.url:
#                                      redis+sentinel://127.0.0.1:26379,…/mymaster)
#
# Environment (defaults):
#   REDIS_PORT=6379                        port on 127.0.0.1
#   REDIS_HOME=<repo>/.cache/redis/home    redis.conf, data (appendonly), redis.pid, redis.log
#   REDIS_FSYNC=always                     appendfsync: always | everysec | no
#   REDIS_START_TIMEOUT=20                 seconds to wait for PONG
# and for `sentinel` (the primary on REDIS_PORT, its replicas on the next ports):
#   REDIS_REPLICAS=1                       replicas of the primary
#   REDIS_SENTINEL_HOME=<repo>/.cache/redis/sentinel   one folder per node
#   REDIS_SENTINEL_PORT=26379              the first sentinel; the others on the next two
#   REDIS_MASTER_NAME=mymaster             the name sentinels know the primary by
#   REDIS_DOWN_AFTER_MS=5000               silence before a sentinel calls the primary down
#   REDIS_FAILOVER_TIMEOUT_MS=10000        sentinel failover-timeout
#   REDIS_PASSWORD=                        when set: every node and Sentinel requires it
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
REDIS_PORT="${REDIS_PORT:-6379}"
REDIS_HOME="$(realpath -m "${REDIS_HOME:-$REPO_ROOT/.cache/redis/home}")"
REDIS_FSYNC="${REDIS_FSYNC:-always}"
REDIS_START_TIMEOUT="${REDIS_START_TIMEOUT:-20}"
HOST=127.0.0.1
PID_FILE="$REDIS_HOME/redis.pid"
CONF="$REDIS_HOME/redis.conf"
RUN_INFO="$REDIS_HOME/redis.run"

log() { echo "redis.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# stop/status use the port the server in this REDIS_HOME was started with.
load_run_info() { [[ -f "$RUN_INFO" ]] && REDIS_PORT="$(tr -dc '0-9' <"$RUN_INFO")" || true; }

ensure_installed() {
  command -v redis-server >/dev/null && return
  if [[ "$(id -u)" -ne 0 ]]; then
    die "redis-server is not installed; run: sudo apt-get install -y redis-server"
  fi
  log "installing Debian's redis-server"
  DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server >&2 ||
    { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server >&2; } ||
    die "apt-get could not install redis-server; run: apt-get update && apt-get install -y redis-server"
}

read_pid() { [[ -f "$PID_FILE" ]] && tr -dc '0-9' <"$PID_FILE" || true; }

# True if $1 is a live redis-server (or redis-sentinel) started in $2 (this REDIS_HOME by
# default) with its config (guards pid reuse).
is_our_process() {
  local pid="$1" home="${2:-$REDIS_HOME}"
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" == *redis-s* ]] &&
    [[ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" == "$home/data" ]]
}

# `AUTH` in the wire protocol when REDIS_PASSWORD is set (the sentinel set's nodes require
# it), else nothing.
auth_command() {
  [[ -n "${REDIS_PASSWORD:-}" ]] || return 0
  printf '*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n' "${#REDIS_PASSWORD}" "$REDIS_PASSWORD"
}

# PONG over a plain TCP socket: redis-cli is in another Debian package.
answers() {
  # In a subshell: a failed exec of a redirection would end this script.
  local reply port="${1:-$REDIS_PORT}"
  reply="$( (exec 7<>"/dev/tcp/$HOST/$port" && { auth_command && printf 'PING\r\n'; } >&7 &&
    { [[ -z "${REDIS_PASSWORD:-}" ]] || IFS= read -r -t 2 line <&7; } &&
    IFS= read -r -t 2 line <&7 && echo "$line") 2>/dev/null || true)"
  [[ "$reply" == "+PONG"* ]]
}

write_conf() {
  mkdir -p "$REDIS_HOME/data"
  cat >"$CONF" <<EOF
bind $HOST
protected-mode yes
port $REDIS_PORT
daemonize yes
pidfile $PID_FILE
logfile $REDIS_HOME/redis.log
dir $REDIS_HOME/data
appendonly yes
appendfsync $REDIS_FSYNC
save ""
EOF
}

do_start() {
  local pid
  pid="$(read_pid)"
  if is_our_process "$pid"; then
    load_run_info
    answers || die "a redis-server of $REDIS_HOME (pid $pid) runs but does not answer"
    log "already running (pid $pid, port $REDIS_PORT)"
    return
  fi
  ensure_installed
  [[ "${1:-}" == "--clean" ]] && rm -rf "$REDIS_HOME/data"
  write_conf
  echo "$REDIS_PORT" >"$RUN_INFO"
  (cd "$REDIS_HOME" && redis-server "$CONF") || die "redis-server did not start (see $REDIS_HOME/redis.log)"
  local deadline=$((SECONDS + REDIS_START_TIMEOUT))
  until answers; do
    ((SECONDS < deadline)) || die "no PONG on $HOST:$REDIS_PORT within ${REDIS_START_TIMEOUT}s (see $REDIS_HOME/redis.log)"
    sleep 0.05
  done
  log "running (pid $(read_pid), port $REDIS_PORT, home $REDIS_HOME)"
}

do_stop() {
  load_run_info
  local pid
  pid="$(read_pid)"
  if ! is_our_process "$pid"; then
    log "not running"
    rm -f "$RUN_INFO"
    return
  fi
  kill -TERM "$pid" 2>/dev/null || true  # redis-server saves and exits on TERM
  local deadline=$((SECONDS + 10))
  while is_our_process "$pid"; do
    if ((SECONDS >= deadline)); then kill -KILL "$pid" 2>/dev/null || true; fi
    sleep 0.05
  done
  rm -f "$RUN_INFO"
  log "stopped"
}

do_status() {
  load_run_info
  local pid
  pid="$(read_pid)"
  if is_our_process "$pid" && answers; then
    echo "running (pid $pid, port $REDIS_PORT, home $REDIS_HOME)"
  else
    echo "not running"
    return 1
  fi
}

# shellcheck source=scripts/redis-sentinel.sh
source "$SCRIPT_DIR/redis-sentinel.sh"

case "${1:-}" in
  start) do_start "${2:-}" ;;
  stop) do_stop ;;
  status) do_status ;;
  sentinel)
    case "${2:-}" in
      start) sentinel_start "${3:-}" ;;
      stop) sentinel_stop ;;
      status) sentinel_status ;;
      *) die "usage: $0 sentinel start [--clean] | stop | status" ;;
    esac
    ;;
  *) die "usage: $0 start [--clean] | stop | status | sentinel start [--clean] | stop | status" ;;
esac

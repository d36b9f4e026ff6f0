#!/usr/bin/env bash
# A local Prometheus that scrapes Dynagent replicas, so that a canary's analysis reads
# the fleet's figures (rollout.analysis.prometheus): Debian's prometheus on 127.0.0.1.
#
#   scripts/prometheus.sh install           install prometheus (and promtool) if missing
#   scripts/prometheus.sh start [--clean]   install prometheus if missing, start, wait until ready
#   scripts/prometheus.sh stop              TERM (then KILL), wait until the port is free
#   scripts/prometheus.sh status            exit 0 when running and ready
#   scripts/prometheus.sh url               print its address
#
# Environment (defaults):
#   PROM_PORT=9090                          port on 127.0.0.1
#   PROM_HOME=<repo>/.cache/prometheus      prometheus.yml, data, prometheus.pid, prometheus.log
#   PROM_TARGETS=127.0.0.1:8091,127.0.0.1:8092,127.0.0.1:8093   the replicas to scrape
#   PROM_SCRAPE_INTERVAL=2s                 how often each replica is scraped
#   PROM_BEARER_FILE=                       a file holding a metrics key, when /metrics needs one
#   PROM_RULES=<repo>/deploy/prometheus/alerts.yml   alert rules to load
#   PROM_START_TIMEOUT=60                   seconds to wait until ready
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
PROM_PORT="${PROM_PORT:-9090}"
PROM_HOME="$(realpath -m "${PROM_HOME:-$REPO_ROOT/.cache/prometheus}")"
PROM_TARGETS="${PROM_TARGETS:-127.0.0.1:8091,127.0.0.1:8092,127.0.0.1:8093}"
PROM_SCRAPE_INTERVAL="${PROM_SCRAPE_INTERVAL:-2s}"
PROM_BEARER_FILE="${PROM_BEARER_FILE:-}"
PROM_RULES="${PROM_RULES:-$REPO_ROOT/deploy/prometheus/alerts.yml}"
PROM_START_TIMEOUT="${PROM_START_TIMEOUT:-60}"
HOST=127.0.0.1
PID_FILE="$PROM_HOME/prometheus.pid"
CONF="$PROM_HOME/prometheus.yml"
RUN_INFO="$PROM_HOME/prometheus.run"

log() { echo "prometheus.sh: $*" >&2; }
die() { log "$*"; exit 1; }

load_run_info() { [[ -f "$RUN_INFO" ]] && PROM_PORT="$(tr -dc '0-9' <"$RUN_INFO")" || true; }

ensure_installed() {
  command -v prometheus >/dev/null && return
  if [[ "$(id -u)" -ne 0 ]]; then
    die "prometheus is not installed; run: sudo apt-get install -y prometheus"
  fi
  log "installing Debian's prometheus"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus >&2 ||
    { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus >&2; } ||
    die "apt-get could not install prometheus; run: apt-get update && apt-get install -y prometheus"
}

read_pid() { [[ -f "$PID_FILE" ]] && tr -dc '0-9' <"$PID_FILE" || true; }

is_our_process() {
  local pid="$1"
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" == *"$CONF"* ]]
}

ready() {
  python3 - "$HOST" "$PROM_PORT" <<'PY' 2>/dev/null
import sys, urllib.request
try:
    with urllib.request.urlopen(f"http://{sys.argv[1]}:{sys.argv[2]}/-/ready", timeout=2) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
PY
}

write_config() {
  local targets="" target
  IFS=',' read -ra list <<<"$PROM_TARGETS"
  for target in "${list[@]}"; do
    [[ -n "$target" ]] && targets+="'$target', "
  done
  {
    echo "# Written by scripts/prometheus.sh; edits are lost on the next start."
    echo "global: {scrape_interval: $PROM_SCRAPE_INTERVAL, evaluation_interval: $PROM_SCRAPE_INTERVAL}"
    if [[ -f "$PROM_RULES" ]]; then echo "rule_files: ['$PROM_RULES']"; fi
    echo "scrape_configs:"
    echo "  - job_name: dynagent"
    echo "    static_configs: [{targets: [${targets%, }]}]"
    if [[ -n "$PROM_BEARER_FILE" ]]; then
      echo "    authorization: {type: Bearer, credentials_file: '$PROM_BEARER_FILE'}"
    fi
  } >"$CONF"
}

cmd_start() {
  local clean=0
  for arg in "$@"; do
    case "$arg" in
      --clean) clean=1 ;;
      *) die "unknown option $arg" ;;
    esac
  done
  ensure_installed
  mkdir -p "$PROM_HOME"
  local pid
  pid="$(read_pid)"
  if is_our_process "$pid"; then
    load_run_info
    log "already running (pid $pid) on $HOST:$PROM_PORT"
    return 0
  fi
  if [[ "$clean" -eq 1 ]]; then rm -rf "$PROM_HOME/data"; fi
  write_config
  promtool check config "$CONF" >&2 || die "the generated $CONF does not validate"
  echo "$PROM_PORT" >"$RUN_INFO"
  nohup prometheus --config.file="$CONF" --storage.tsdb.path="$PROM_HOME/data" \
    --web.listen-address="$HOST:$PROM_PORT" --storage.tsdb.retention.time=1d \
    --web.enable-lifecycle >"$PROM_HOME/prometheus.log" 2>&1 &
  echo $! >"$PID_FILE"
  local waited=0
  until ready; do
    is_our_process "$(read_pid)" || die "prometheus exited; see $PROM_HOME/prometheus.log"
    sleep 0.2
    waited=$((waited + 1))
    [[ "$waited" -lt $((PROM_START_TIMEOUT * 5)) ]] || die "not ready after ${PROM_START_TIMEOUT}s"
  done
  log "ready on http://$HOST:$PROM_PORT, scraping $PROM_TARGETS every $PROM_SCRAPE_INTERVAL"
}

cmd_stop() {
  load_run_info
  local pid
  pid="$(read_pid)"
  if ! is_our_process "$pid"; then
    rm -f "$PID_FILE"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    is_our_process "$pid" || break
    sleep 0.1
  done
  if is_our_process "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -f "$PID_FILE"
  log "stopped"
}

cmd_status() {
  load_run_info
  if is_our_process "$(read_pid)" && ready; then
    echo "prometheus: ready on http://$HOST:$PROM_PORT"
    return 0
  fi
  echo "prometheus: not running"
  return 1
}

case "${1:-}" in
  install) ensure_installed ;;
  start) shift; cmd_start "$@" ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  url) load_run_info; echo "http://$HOST:$PROM_PORT" ;;
  *) sed -n '2,18p' "$0" >&2; exit 2 ;;
esac

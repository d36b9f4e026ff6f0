#!/usr/bin/env bash
# A fleet on one machine, the way production runs: Nacos (definitions and rollout
# decisions), Redis (sessions), N `dynagent serve` replicas and Debian's nginx as the load
# balancer in front of them. Everything listens on 127.0.0.1 only.
#
#   scripts/fleet.sh up        start what is not running, publish the samples, wait until ready
#   scripts/fleet.sh down      stop nginx, the replicas, Redis and Nacos (in that order)
#   scripts/fleet.sh status    one line per component; exit 0 when all are up
#   scripts/fleet.sh restart   restart every replica, one at a time (each ready before the next):
#                              under load no request fails (see "Stopping a replica" below)
#   scripts/fleet.sh restart-replica N   stop replica N (1-based) and start it again
#   scripts/fleet.sh stop-replica N | start-replica N
#   scripts/fleet.sh publish-samples   publish config-samples/agents (`up` does, unless FLEET_SAMPLES=0)
#
# Environment (defaults):
#   FLEET_HOME=<repo>/.cache/fleet   configs, logs and pid files of every component
#   FLEET_PORT=8090                  nginx: the fleet's one address
#   FLEET_REPLICAS=3                 replicas, on FLEET_REPLICA_PORT, +1, +2, ...
#   FLEET_REPLICA_PORT=8091
#   NACOS_PORT=8848                  (gRPC +1000, JRaft -1000; the console stays off)
#   REDIS_PORT=6379
#   FLEET_GROUP=AGENTS               Nacos group the replicas serve
#   FLEET_SAMPLES=1                  0: publish nothing (tests publish their own agents)
#   FLEET_POLL_SECONDS=2             how often replicas list the group for new dataIds
#   FLEET_LAME_DUCK=2                on SIGTERM, seconds a replica still serves before closing its port
#   FLEET_SERVICE_EXTRA=             a YAML file of more service.yaml sections every replica gets
#                                    (metrics, auth, notifications: not the ones written here)
#   DYNAGENT=<python dir>/dynagent   the dynagent command (default: .venv/bin/dynagent)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
FLEET_HOME="$(realpath -m "${FLEET_HOME:-$REPO_ROOT/.cache/fleet}")"
FLEET_PORT="${FLEET_PORT:-8090}"
FLEET_REPLICAS="${FLEET_REPLICAS:-3}"
FLEET_REPLICA_PORT="${FLEET_REPLICA_PORT:-8091}"
FLEET_GROUP="${FLEET_GROUP:-AGENTS}"
FLEET_SAMPLES="${FLEET_SAMPLES:-1}"
FLEET_POLL_SECONDS="${FLEET_POLL_SECONDS:-2}"
FLEET_LAME_DUCK="${FLEET_LAME_DUCK:-2}"
FLEET_DRAIN=10
DYNAGENT="${DYNAGENT:-$REPO_ROOT/.venv/bin/dynagent}"
HOST=127.0.0.1

export NACOS_PORT="${NACOS_PORT:-8848}" NACOS_CONSOLE=0 NACOS_HOME="$FLEET_HOME/nacos"
export REDIS_PORT="${REDIS_PORT:-6379}" REDIS_HOME="$FLEET_HOME/redis"
NGINX_DIR="$FLEET_HOME/nginx"

log() { echo "fleet.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# The settings of the fleet in this FLEET_HOME, so that down/status need no environment.
RUN_INFO="$FLEET_HOME/fleet.run"
save_run_info() {
  mkdir -p "$FLEET_HOME"
  printf '%s\n' "FLEET_PORT=$FLEET_PORT" "FLEET_REPLICAS=$FLEET_REPLICAS" \
    "FLEET_REPLICA_PORT=$FLEET_REPLICA_PORT" "NACOS_PORT=$NACOS_PORT" \
    "REDIS_PORT=$REDIS_PORT" "FLEET_LAME_DUCK=$FLEET_LAME_DUCK" >"$RUN_INFO"
}
load_run_info() {
  [[ -f "$RUN_INFO" ]] || return 0
  local k v
  while IFS='=' read -r k v; do
    case "$k" in
      FLEET_PORT | FLEET_REPLICAS | FLEET_REPLICA_PORT | NACOS_PORT | REDIS_PORT | FLEET_LAME_DUCK) printf -v "$k" '%s' "$v" ;;
    esac
  done <"$RUN_INFO"
  export NACOS_PORT REDIS_PORT
}

ensure_nginx() {
  command -v nginx >/dev/null && return
  [[ "$(id -u)" -eq 0 ]] || die "nginx is not installed; run: sudo apt-get install -y nginx"
  log "installing Debian's nginx"
  DEBIAN_FRONTEND=noninteractive apt-get install -y nginx >&2 ||
    { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y nginx >&2; } ||
    die "apt-get could not install nginx; run: apt-get update && apt-get install -y nginx"
}

replica_port() { echo $((FLEET_REPLICA_PORT + $1 - 1)); }
replica_dir() { echo "$FLEET_HOME/replica-$1"; }
# A killed process stays a zombie until init reaps it (here about a second): not alive.
pid_alive() {
  [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null || return 1
  local state
  state="$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)"
  [[ -n "$state" && "$state" != Z ]]
}
read_pid() { [[ -f "$1" ]] && tr -dc '0-9' <"$1" || true; }

http_ok() { # GET $1 answers 200
  local code
  code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$1" 2>/dev/null || true)"
  [[ "$code" == 200 ]]
}

wait_http() { # URL SECONDS WHAT
  local deadline=$((SECONDS + $2))
  until http_ok "$1"; do
    ((SECONDS < deadline)) || die "$3 did not answer $1 within $2 s"
    sleep 0.1
  done
}

# ------------------------------------------------------------------------------- replicas
# Stopping a replica (SIGTERM) drops no request: for FLEET_LAME_DUCK seconds it still
# serves, each response closing its connection, so the kept-alive connections nginx holds
# to it are used up; then its port closes and nginx, refused, sends the next requests to
# the others (safe for a POST: nothing was sent); running requests get up to 10 s more.
write_replica_config() {
  local n="$1" dir
  dir="$(replica_dir "$n")"
  mkdir -p "$dir"
  cat >"$dir/service.yaml" <<EOF
# Written by scripts/fleet.sh: replica $n of the fleet in $FLEET_HOME.
listen: {host: $HOST, port: $(replica_port "$n"), lame_duck_seconds: $FLEET_LAME_DUCK, drain_seconds: $FLEET_DRAIN}
factories: {nacos: true}
nacos:
  server_addr: $HOST:$NACOS_PORT
  group: $FLEET_GROUP
  snapshot_dir: snapshot
  poll_seconds: $FLEET_POLL_SECONDS
sessions: {store: redis, url: "redis://$HOST:$REDIS_PORT/0", lock_ttl: 10}
# The samples' stdio MCP server (librarian names it), as config-samples/ declares it.
mcp_servers:
  notes: {command: python, args: ["$REPO_ROOT/config-samples/mcp/notes_server.py"]}
EOF
  if [[ -n "${FLEET_SERVICE_EXTRA:-}" ]]; then
    [[ -f "$FLEET_SERVICE_EXTRA" ]] || die "FLEET_SERVICE_EXTRA: no file $FLEET_SERVICE_EXTRA"
    { echo "# From $FLEET_SERVICE_EXTRA:"; cat "$FLEET_SERVICE_EXTRA"; } >>"$dir/service.yaml"
  fi
}

# The samples into the fleet's group, checked against the replicas' own config (so an
# agent the replicas would refuse, e.g. one naming an MCP server they lack, is not published).
publish_samples() {
  write_replica_config 1
  "$DYNAGENT" publish "$REPO_ROOT/config-samples/agents" --config "$(replica_dir 1)/service.yaml" >&2
}

start_replica() {
  local n="$1" dir pid
  dir="$(replica_dir "$n")"
  pid="$(read_pid "$dir/pid")"
  if pid_alive "$pid"; then return; fi
  write_replica_config "$n"
  (cd "$dir" && exec nohup "$DYNAGENT" serve --config "$dir/service.yaml" >>"$dir/serve.log" 2>&1) &
  echo $! >"$dir/pid"
}

stop_replica() {
  local n="$1" dir pid
  dir="$(replica_dir "$n")"
  pid="$(read_pid "$dir/pid")"
  pid_alive "$pid" || { rm -f "$dir/pid"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + ${FLEET_LAME_DUCK%.*} + FLEET_DRAIN + 10))
  while pid_alive "$pid"; do
    if ((SECONDS >= deadline)); then kill -KILL "$pid" 2>/dev/null || true; fi
    sleep 0.1
  done
  rm -f "$dir/pid"
}

# ---------------------------------------------------------------------------------- nginx
# The balancing rules live in include files beside nginx.conf, so that another nginx (the
# fleet benchmark's, routing to 1, 2 or 3 replicas) balances exactly as this one does:
#   upstream.conf  inside each upstream block, after its servers
#   proxy.conf     inside each proxied location, after its proxy_pass
#   errors.conf    inside each server block
write_nginx_includes() {
  mkdir -p "$NGINX_DIR/temp"
  cat >"$NGINX_DIR/upstream.conf" <<'EOF'
# Written by scripts/fleet.sh. Idle connections to the replicas are kept for reuse: without
# them every request opened (and a replica accepted and tore down) a TCP connection, about a
# tenth of a replica's CPU per request. They are closed well before aiohttp's own keep-alive
# timeout (75 s), so a replica never closes one under a request nginx is sending.
keepalive 16;
keepalive_timeout 30s;
EOF
  cat >"$NGINX_DIR/proxy.conf" <<'EOF'
# Written by scripts/fleet.sh. HTTP/1.1 with no "Connection: close", for the kept connections.
# A replica that refuses a connection is skipped (nothing was sent: safe for a POST), but a
# request already sent is never retried on another (POSTs are not idempotent). A replica
# stopped with SIGTERM first answers with "Connection: close" until nginx holds no kept
# connection to it, then refuses: nothing fails. Killing one fails the requests in flight
# on it (a kept connection it had open closes with it, and nginx drops it).
proxy_http_version 1.1;
proxy_set_header Connection "";
proxy_set_header Host $host;
proxy_set_header X-Forwarded-For $remote_addr;
proxy_buffering off;
proxy_read_timeout 300s;
proxy_next_upstream error timeout;
proxy_next_upstream_tries 3;
EOF
  cat >"$NGINX_DIR/errors.conf" <<'EOF'
# Written by scripts/fleet.sh. A replica that died mid-request: our JSON error shape, not
# nginx's HTML page.
error_page 502 504 = @unavailable;
location @unavailable {
    default_type application/json;
    return 502 '{"error": {"type": "unavailable", "message": "the replica serving this request stopped; retry it"}}';
}
EOF
}

# A replica that refused a connection is skipped for fail_timeout: half the lame duck (in
# whole seconds, at least 1, as nginx takes it), so that nginx comes back to a stopping
# replica while it still serves the connections nginx keeps to it (it waits up to
# FLEET_LAME_DUCK for each after closing its port) and uses them up, rather than at the
# moment the replica closes one; 2 s when there is no lame duck.
fail_timeout() {
  awk -v s="$FLEET_LAME_DUCK" 'BEGIN { h = int(s / 2); print (s > 0 ? (h > 1 ? h : 1) : 2) "s" }'
}

write_nginx_config() {
  write_nginx_includes
  local servers="" n user="" skip
  skip="$(fail_timeout)"
  for ((n = 1; n <= FLEET_REPLICAS; n++)); do
    servers+="        server $HOST:$(replica_port "$n") max_fails=1 fail_timeout=$skip;"$'\n'
  done
  [[ "$(id -u)" -eq 0 ]] && user="user root;"
  cat >"$NGINX_DIR/nginx.conf" <<EOF
# Written by scripts/fleet.sh. Round robin over the replicas; the rules are in the includes.
$user
worker_processes 1;
pid $NGINX_DIR/nginx.pid;
error_log $NGINX_DIR/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $NGINX_DIR/temp/body;
    proxy_temp_path $NGINX_DIR/temp/proxy;
    fastcgi_temp_path $NGINX_DIR/temp/fastcgi;
    uwsgi_temp_path $NGINX_DIR/temp/uwsgi;
    scgi_temp_path $NGINX_DIR/temp/scgi;
    client_max_body_size 2m;
    upstream dynagent {
$servers        include $NGINX_DIR/upstream.conf;
    }
    server {
        listen $HOST:$FLEET_PORT;
        location / {
            proxy_pass http://dynagent;
            include $NGINX_DIR/proxy.conf;
        }
        include $NGINX_DIR/errors.conf;
    }
}
EOF
}

start_nginx() {
  pid_alive "$(read_pid "$NGINX_DIR/nginx.pid")" && return
  ensure_nginx
  write_nginx_config
  nginx -p "$NGINX_DIR" -c "$NGINX_DIR/nginx.conf" || die "nginx did not start (see $NGINX_DIR/error.log)"
}

stop_nginx() {
  local pid
  pid="$(read_pid "$NGINX_DIR/nginx.pid")"
  pid_alive "$pid" || return 0
  kill -QUIT "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 10))
  while pid_alive "$pid"; do
    if ((SECONDS >= deadline)); then kill -KILL "$pid" 2>/dev/null || true; fi
    sleep 0.1
  done
}

# -------------------------------------------------------------------------------- commands
do_up() {
  [[ -x "$DYNAGENT" ]] || die "$DYNAGENT not found: run 'make setup' (or set DYNAGENT)"
  save_run_info
  "$SCRIPT_DIR/nacos.sh" start
  "$SCRIPT_DIR/redis.sh" start
  if [[ "$FLEET_SAMPLES" == 1 ]]; then publish_samples; fi
  local n
  for ((n = 1; n <= FLEET_REPLICAS; n++)); do start_replica "$n"; done
  for ((n = 1; n <= FLEET_REPLICAS; n++)); do
    wait_http "http://$HOST:$(replica_port "$n")/readyz" 60 "replica $n"
  done
  start_nginx
  wait_http "http://$HOST:$FLEET_PORT/readyz" 10 "nginx"
  log "up: http://$HOST:$FLEET_PORT ($FLEET_REPLICAS replicas, Nacos $HOST:$NACOS_PORT group $FLEET_GROUP, Redis $HOST:$REDIS_PORT)"
}

do_down() {
  load_run_info
  stop_nginx
  local n
  for ((n = 1; n <= FLEET_REPLICAS; n++)); do stop_replica "$n"; done
  "$SCRIPT_DIR/redis.sh" stop || true
  "$SCRIPT_DIR/nacos.sh" stop || true
  rm -f "$RUN_INFO"
  log "down"
}

do_status() {
  load_run_info
  local ok=0 n
  if "$SCRIPT_DIR/nacos.sh" status >/dev/null 2>&1; then echo "nacos    up   $HOST:$NACOS_PORT"; else echo "nacos    down"; ok=1; fi
  if "$SCRIPT_DIR/redis.sh" status >/dev/null 2>&1; then echo "redis    up   $HOST:$REDIS_PORT"; else echo "redis    down"; ok=1; fi
  for ((n = 1; n <= FLEET_REPLICAS; n++)); do
    if http_ok "http://$HOST:$(replica_port "$n")/readyz"; then
      echo "replica$n up   $HOST:$(replica_port "$n") (pid $(read_pid "$(replica_dir "$n")/pid"))"
    else
      echo "replica$n down"; ok=1
    fi
  done
  if http_ok "http://$HOST:$FLEET_PORT/readyz"; then echo "nginx    up   $HOST:$FLEET_PORT"; else echo "nginx    down"; ok=1; fi
  return $ok
}

do_restart_replica() {
  load_run_info
  local n="${1:?replica number}"
  stop_replica "$n"
  start_replica "$n"
  wait_http "http://$HOST:$(replica_port "$n")/readyz" 60 "replica $n"
  log "replica $n restarted (pid $(read_pid "$(replica_dir "$n")/pid"))"
}

do_restart() {
  load_run_info
  local n
  for ((n = 1; n <= FLEET_REPLICAS; n++)); do do_restart_replica "$n"; done
}

do_start_replica() {
  load_run_info
  local n="${1:?replica number}"
  start_replica "$n"
  wait_http "http://$HOST:$(replica_port "$n")/readyz" 60 "replica $n"
}

case "${1:-}" in
  stop-replica) load_run_info; stop_replica "${2:?replica number}" ;;
  start-replica) do_start_replica "${2:-}" ;;
  up) do_up ;;
  down) do_down ;;
  status) do_status ;;
  restart) do_restart ;;
  restart-replica) do_restart_replica "${2:-}" ;;
  publish-samples) load_run_info; publish_samples ;;
  *) die "usage: $0 up | down | status | restart | restart-replica N | stop-replica N | start-replica N | publish-samples" ;;
esac

# Sourced by scripts/redis.sh: `redis.sh sentinel start|stop|status`, a replicated Redis on
# loopback for failover tests and development: a primary (REDIS_PORT), REDIS_REPLICAS
# replicas (1; on the ports after it) and three of Debian's redis-sentinel
# (REDIS_SENTINEL_PORT and the next two) that watch the primary as REDIS_MASTER_NAME with a quorum of two. Each node has its own
# folder under REDIS_SENTINEL_HOME (config, data, pid, log); `start` writes them afresh,
# so the primary is the first port again. Sentinels rewrite their config at a failover.
# With REDIS_PASSWORD set, every node requires it (requirepass; replicas and Sentinels
# authenticate with it), the Sentinels too (sessions.url:
# redis+sentinel://:PW@…/mymaster?sentinel_password=PW).

SENTINEL_HOME="$(realpath -m "${REDIS_SENTINEL_HOME:-$REPO_ROOT/.cache/redis/sentinel}")"
SENTINEL_PORT="${REDIS_SENTINEL_PORT:-26379}"
MASTER_NAME="${REDIS_MASTER_NAME:-mymaster}"
DOWN_AFTER_MS="${REDIS_DOWN_AFTER_MS:-5000}"
FAILOVER_TIMEOUT_MS="${REDIS_FAILOVER_TIMEOUT_MS:-10000}"
REPLICAS="${REDIS_REPLICAS:-1}"
SENTINEL_RUN="$SENTINEL_HOME/sentinel.run"

# The nodes as name:port:role, from the ports the set was started with.
sentinel_nodes() {
  local primary="$REDIS_PORT" first="$SENTINEL_PORT" replicas="$REPLICAS" i
  if [[ -f "$SENTINEL_RUN" ]]; then read -r primary first replicas <"$SENTINEL_RUN"; fi
  echo "primary:$primary:primary"
  for ((i = 1; i <= replicas; i++)); do echo "replica-$i:$((primary + i)):replica"; done
  echo "sentinel-0:$first:sentinel sentinel-1:$((first + 1)):sentinel sentinel-2:$((first + 2)):sentinel"
}

node_pid() { [[ -f "$1/node.pid" ]] && tr -dc '0-9' <"$1/node.pid" || true; }

ensure_sentinel_installed() {
  ensure_installed
  command -v redis-sentinel >/dev/null && return
  [[ "$(id -u)" -eq 0 ]] || die "redis-sentinel is not installed; run: sudo apt-get install -y redis-sentinel"
  log "installing Debian's redis-sentinel"
  # Debian starts the packaged sentinel where systemd runs; only ours are used here.
  DEBIAN_FRONTEND=noninteractive apt-get install -y redis-sentinel >&2 ||
    { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y redis-sentinel >&2; } ||
    die "apt-get could not install redis-sentinel; run: apt-get update && apt-get install -y redis-sentinel"
}

write_node_conf() {
  local home="$1" port="$2" role="$3" primary="$4"
  mkdir -p "$home/data"
  {
    echo "bind $HOST"
    echo "port $port"
    echo "daemonize yes"
    echo "pidfile $home/node.pid"
    echo "logfile $home/node.log"
    echo "dir $home/data"
    if [[ -n "${REDIS_PASSWORD:-}" ]]; then
      echo "requirepass \"$REDIS_PASSWORD\""
      [[ "$role" == sentinel ]] || echo "masterauth \"$REDIS_PASSWORD\""
    fi
    if [[ "$role" == sentinel ]]; then
      echo "sentinel monitor $MASTER_NAME $HOST $primary 2"
      [[ -z "${REDIS_PASSWORD:-}" ]] || echo "sentinel auth-pass $MASTER_NAME \"$REDIS_PASSWORD\""
      echo "sentinel down-after-milliseconds $MASTER_NAME $DOWN_AFTER_MS"
      echo "sentinel failover-timeout $MASTER_NAME $FAILOVER_TIMEOUT_MS"
      echo "sentinel parallel-syncs $MASTER_NAME 1"
    else
      echo "protected-mode yes"
      echo "appendonly yes"
      echo "appendfsync $REDIS_FSYNC"
      echo 'save ""'
      if [[ "$role" == replica ]]; then echo "replicaof $HOST $primary"; fi
    fi
  } >"$home/node.conf"
}

sentinel_start() {
  local node name port role pid home primary
  ensure_sentinel_installed
  if [[ "${1:-}" == "--clean" ]]; then sentinel_stop; rm -rf "$SENTINEL_HOME"; fi
  mkdir -p "$SENTINEL_HOME"
  [[ -f "$SENTINEL_RUN" ]] || echo "$REDIS_PORT $SENTINEL_PORT $REPLICAS" >"$SENTINEL_RUN"
  read -r primary _ <"$SENTINEL_RUN"
  for node in $(sentinel_nodes); do
    IFS=: read -r name port role <<<"$node"
    home="$SENTINEL_HOME/$name"
    pid="$(node_pid "$home")"
    if is_our_process "$pid" "$home"; then
      log "$name already running (pid $pid, port $port)"
      continue
    fi
    [[ -f "$home/node.conf" ]] || write_node_conf "$home" "$port" "$role" "$primary"
    if [[ "$role" == sentinel ]]; then
      (cd "$home/data" && redis-sentinel "$home/node.conf") || die "$name did not start (see $home/node.log)"
    else
      (cd "$home/data" && redis-server "$home/node.conf") || die "$name did not start (see $home/node.log)"
    fi
    local deadline=$((SECONDS + REDIS_START_TIMEOUT))
    until answers "$port"; do
      ((SECONDS < deadline)) || die "no PONG from $name on $HOST:$port within ${REDIS_START_TIMEOUT}s (see $home/node.log)"
      sleep 0.05
    done
    if grep -q '^replicaof' "$home/node.conf"; then wait_in_sync "$name" "$port"; fi
    log "$name running (port $port, home $home)"
  done
}

# A replica counts once its link to the primary is up (the first sync is done): until
# then a write acknowledged by a replica (WAIT) could not be.
wait_in_sync() {
  local deadline=$((SECONDS + REDIS_START_TIMEOUT))
  until (exec 7<>"/dev/tcp/$HOST/$2" && { auth_command && printf 'INFO replication\r\n'; } >&7 &&
    timeout 1 cat <&7 || true) 2>/dev/null | grep -q 'master_link_status:up'; do
    ((SECONDS < deadline)) || die "$1 did not sync with its primary within ${REDIS_START_TIMEOUT}s"
    sleep 0.05
  done
}

sentinel_stop() {
  local node name port role pid home
  [[ -d "$SENTINEL_HOME" ]] || { log "sentinel set not running"; return; }
  for node in $(sentinel_nodes); do
    IFS=: read -r name port role <<<"$node"
    home="$SENTINEL_HOME/$name"
    pid="$(node_pid "$home")"
    is_our_process "$pid" "$home" || continue
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 10))
    while is_our_process "$pid" "$home"; do
      if ((SECONDS >= deadline)); then kill -KILL "$pid" 2>/dev/null || true; fi
      sleep 0.05
    done
    log "$name stopped"
  done
  # The next start writes fresh configs: the primary is the first port again.
  rm -f "$SENTINEL_RUN" "$SENTINEL_HOME"/*/node.conf
}

sentinel_status() {
  local node name port role pid home down=0
  for node in $(sentinel_nodes); do
    IFS=: read -r name port role <<<"$node"
    home="$SENTINEL_HOME/$name"
    pid="$(node_pid "$home")"
    if is_our_process "$pid" "$home" && answers "$port"; then
      echo "$name running (pid $pid, port $port)"
    else
      echo "$name not running (port $port)"
      down=1
    fi
  done
  return "$down"
}

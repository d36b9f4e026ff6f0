#!/usr/bin/env bash
# The service image, built and started without a container engine: Debian's buildah
# (chroot isolation, vfs storage) builds the Dockerfile on a base made from Debian
# packages by mmdebstrap, since no container registry may be reachable. Installs buildah
# and mmdebstrap with apt-get when they are missing (as root); otherwise prints the one
# command to run.
#
#   scripts/image.sh build     the base (once) and the image localhost/dynagent:dev
#   scripts/image.sh check     build, then start the image the way an engine would (its
#                              user, environment, ENTRYPOINT and CMD), wait for its health
#                              check, call an agent, stop it with SIGTERM, and clean up
#   scripts/image.sh clean     remove the images and the build storage
#
# Settings (environment):
#   IMAGE=localhost/dynagent:dev   BASE_IMAGE=localhost/dynagent-base:bookworm
#   SUITE=bookworm                 IMAGE_PORT=18090 (the port `check` gives the server)
#   DYNAGENT_IMAGE_STORAGE=<repo>/.cache/image   (buildah's storage; vfs needs no fuse)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
IMAGE="${IMAGE:-localhost/dynagent:dev}"
BASE_IMAGE="${BASE_IMAGE:-localhost/dynagent-base:bookworm}"
SUITE="${SUITE:-bookworm}"
IMAGE_PORT="${IMAGE_PORT:-18090}"
STORAGE="${DYNAGENT_IMAGE_STORAGE:-$REPO_ROOT/.cache/image}"
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
BUILDAH=(buildah --root "$STORAGE/root" --runroot "$STORAGE/run")

say() { echo "image.sh: $*" >&2; }

need_tools() {
  local missing=()
  command -v buildah >/dev/null 2>&1 || missing+=(buildah)
  command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing ${missing[*]} with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    return 0
  fi
  say "needs ${missing[*]}. Run: sudo apt-get install -y ${missing[*]}"
  exit 1
}

build_base() {
  if "${BUILDAH[@]}" inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
    return 0
  fi
  say "making $BASE_IMAGE from Debian $SUITE packages (python3, python3-venv)"
  local tar="$STORAGE/base-$SUITE.tar" ctr
  mkdir -p "$STORAGE"
  mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$SUITE" "$tar"
  ctr="$("${BUILDAH[@]}" from scratch)"
  "${BUILDAH[@]}" add --quiet "$ctr" "$tar" / >/dev/null
  "${BUILDAH[@]}" config --env LANG=C.UTF-8 --cmd '["python3"]' "$ctr"
  "${BUILDAH[@]}" commit --quiet "$ctr" "$BASE_IMAGE" >/dev/null
  "${BUILDAH[@]}" rm "$ctr" >/dev/null
  rm -f "$tar"
}

build_image() {
  need_tools
  build_base
  local cert="${PIP_CERT:-${SSL_CERT_FILE:-}}" extra=()
  if [ -n "$cert" ] && [ -f "$cert" ]; then
    # Behind a TLS-inspecting proxy pip needs this machine's CAs; mounted for the
    # build only, never copied into the image.
    extra=(-v "$cert:/run/host-ca.crt:ro" --build-arg PIP_CERT=/run/host-ca.crt)
  fi
  say "building $IMAGE on $BASE_IMAGE"
  "${BUILDAH[@]}" build --quiet --format docker --isolation chroot --network host \
    --build-arg "BASE=$BASE_IMAGE" "${extra[@]}" -t "$IMAGE" "$REPO_ROOT" >/dev/null
  say "built $IMAGE"
}

# One field of the image's config, as shell words (for ENTRYPOINT, CMD, User, Healthcheck).
config_field() {
  "${BUILDAH[@]}" inspect --type image "$IMAGE" | python3 -c '
import json, shlex, sys
config = json.load(sys.stdin)["Docker"]["config"]
value = config.get(sys.argv[1]) or []
if sys.argv[1] == "Healthcheck":
    value = value.get("Test", [])[1:]
print(shlex.join(value) if isinstance(value, list) else value)' "$1"
}

check_image() {
  build_image
  local log user command health
  CTR="$("${BUILDAH[@]}" from --quiet "$IMAGE")"
  local ctr="$CTR"
  log="$STORAGE/check.log"
  user="$(config_field User)"
  command="$(config_field Entrypoint) $(config_field Cmd)"
  health="$(config_field Healthcheck)"
  [ -n "$user" ] && [ "${user%%:*}" != 0 ] || { say "the image runs as root ($user)"; exit 1; }
  # The image's own command, user and environment; only the address is changed, so that
  # it listens on loopback (the health check must follow it there).
  local env=(-e DYNAGENT_HOST=127.0.0.1 -e "DYNAGENT_PORT=$IMAGE_PORT" -e DYNAGENT_API_KEYS=image-check)
  # shellcheck disable=SC2086 # the command is a shell-quoted word list
  "${BUILDAH[@]}" run --network host "${env[@]}" "$ctr" -- $command >"$log" 2>&1 &
  SERVER=$!
  trap stop_server EXIT
  local pid=$SERVER
  local tries=0
  # shellcheck disable=SC2086
  until "${BUILDAH[@]}" run --network host "${env[@]}" "$ctr" -- $health >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ $tries -gt 120 ] || ! kill -0 "$pid" 2>/dev/null; then
      say "the image never became healthy; its log:"; cat "$log" >&2; exit 1
    fi
    sleep 0.5
  done
  # shellcheck disable=SC2086
  "${BUILDAH[@]}" run --network host "${env[@]}" "$ctr" -- $health
  say "runs as $("${BUILDAH[@]}" run "$ctr" -- id -u):$("${BUILDAH[@]}" run "$ctr" -- id -g)"
  # Every sample answers, the one on the samples' stdio MCP server and the one calling it too.
  local agent
  for agent in assistant support-bot ticket-triage librarian concierge; do
    curl -fsS -H 'Authorization: Bearer image-check' -H 'Content-Type: application/json' \
      -d '{"input": "What is 17 * 23?"}' "http://127.0.0.1:$IMAGE_PORT/v1/agents/$agent/invoke"
    echo
  done
}

# SIGTERM to the server inside the container, as an engine's stop does; the drain ends it.
stop_server() {
  local child
  for child in $(pgrep -f "dynagent serve" || true); do
    if grep -qz "DYNAGENT_PORT=$IMAGE_PORT" "/proc/$child/environ" 2>/dev/null; then
      kill -TERM "$child" 2>/dev/null || true
    fi
  done
  wait "$SERVER" 2>/dev/null || true
  "${BUILDAH[@]}" rm "$CTR" >/dev/null 2>&1 || true
  if tail -n 1 "$STORAGE/check.log" | grep -q "| stopped$"; then
    say "stopped cleanly on SIGTERM"
  else
    say "did not stop cleanly; its log ends:"; tail -n 5 "$STORAGE/check.log" >&2
    exit 1
  fi
}

case "${1:-build}" in
  build) build_image ;;
  check) check_image ;;
  clean)
    "${BUILDAH[@]}" rmi --all --force >/dev/null 2>&1 || true
    rm -rf "$STORAGE"
    ;;
  *) say "usage: scripts/image.sh build|check|clean"; exit 2 ;;
esac

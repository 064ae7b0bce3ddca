#!/usr/bin/env bash
# The Docker engine the compose and testcontainers tests run on, made available on this
# machine without a manual step:
#   engine.sh start   Debian's docker.io (the daemon) and debootstrap installed when missing,
#                     the Compose v2 plugin built from source when `docker compose` is missing,
#                     and dockerd started in the background when no engine answers. Only a
#                     daemon started here is recorded (var/docker/dockerd.pid).
#   engine.sh stop    stops the daemon that `start` started (by its PID), nothing else.
#   engine.sh status  says whether a daemon this project started is left running, and how to stop it.
# Installing needs root (or sudo), as apt-get does.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STATE="$ROOT/var/docker"
PIDFILE="$STATE/dockerd.pid"
LOG="$STATE/dockerd.log"
# shellcheck source=../versions.env
. "$ROOT/infra/versions.env"

say() { echo "[docker] $*" >&2; }
die() { echo "[docker] error: $*" >&2; exit 1; }
sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

engine_answers() { docker info >/dev/null 2>&1; }

install_packages() {
    local missing=()
    command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
    command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
    command -v docker >/dev/null 2>&1 || missing+=(docker.io)
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing ${missing[*]} from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    sudo_if_needed apt-get update -qq
    sudo_if_needed apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Debian has no package of Compose v2; it is a Go module, built once (Go's caches make a
# rebuild quick) and installed as the docker CLI's plugin, where `docker compose` finds it.
install_compose() {
    docker compose version >/dev/null 2>&1 && return 0
    local plugins="/usr/local/lib/docker/cli-plugins"
    [ "$(id -u)" -eq 0 ] || plugins="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
    command -v go >/dev/null 2>&1 || die "Go is needed to build Docker Compose $COMPOSE_VERSION (apt-get install -y golang)"
    say "building Docker Compose $COMPOSE_VERSION from source through the Go module proxy (about 2 min the first time)"
    local build; build="$(mktemp -d)"
    GOBIN="$build" CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 10 go install -trimpath \
        -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" \
        "github.com/docker/compose/v2/cmd@$COMPOSE_VERSION" || die "building Docker Compose $COMPOSE_VERSION failed"
    mkdir -p "$plugins"
    mv "$build/cmd" "$plugins/docker-compose"
    rmdir "$build"
    docker compose version >/dev/null 2>&1 || die "docker compose does not run after installing $plugins/docker-compose"
    say "Docker Compose $COMPOSE_VERSION installed in $plugins"
}

start() {
    install_packages
    install_compose
    if engine_answers; then
        say "using the Docker engine that is running"
        return 0
    fi
    [ "$(id -u)" -eq 0 ] || die "no Docker engine answers and starting one needs root: start dockerd, or run as root"
    mkdir -p "$STATE"
    say "starting dockerd (log: $LOG)"
    nohup dockerd >"$LOG" 2>&1 &
    echo $! >"$PIDFILE"
    for _ in $(seq 1 60); do
        if engine_answers; then
            say "dockerd $(docker info --format '{{.ServerVersion}}') is up (PID $(cat "$PIDFILE"))"
            return 0
        fi
        kill -0 "$(cat "$PIDFILE")" 2>/dev/null || { tail -20 "$LOG" >&2; rm -f "$PIDFILE"; die "dockerd exited at start"; }
        sleep 1
    done
    tail -20 "$LOG" >&2
    die "dockerd did not answer within 60 s"
}

stop() {
    [ -f "$PIDFILE" ] || return 0
    local pid; pid="$(cat "$PIDFILE")"
    if kill -0 "$pid" 2>/dev/null; then
        say "stopping the dockerd this project started (PID $pid)"
        kill "$pid"
        for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        kill -0 "$pid" 2>/dev/null && { say "dockerd $pid still runs after 30 s: killing it"; kill -9 "$pid"; }
    fi
    rm -f "$PIDFILE"
}

# What a user is left with after `make images`: an engine this project started keeps running
# (the stack needs it), so say so, and how to stop it.
status() {
    if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        say "left running: dockerd (PID $(cat "$PIDFILE"), started by this project; log: $LOG)."
        say "stop it, after \`docker compose down\`, with: bash infra/docker/engine.sh stop"
    elif engine_answers; then
        say "the Docker engine that was already running is left as it was"
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) die "usage: $0 start|stop|status" ;;
esac

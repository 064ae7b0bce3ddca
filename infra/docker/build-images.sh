#!/usr/bin/env bash
# Every image the compose stack runs, built on this machine (it reaches no container
# registry): `make images`, and `make test` before the Docker tests.
#   1. streamstate-rootfs:bookworm   Debian bookworm by debootstrap from Debian's packages
#   2. streamstate-base:bookworm     that root filesystem with Python laid out as the official
#                                    python image and this machine's CA certificates (base/)
#   3. streamstate-local/*           stand-ins for the third-party images, at the releases of
#                                    infra/versions.env: Kafka from the Maven jars and MinIO and
#                                    mc from the Go builds of `make deps`, Prometheus from Debian
#   4. streamstate-{spark,api,producers}  the project's images, from their own Dockerfiles on
#                                    the local base (compose.local-images.yml)
# Docker's layer cache makes a second run quick; the root filesystem is remade only when its
# inputs change. Run infra/docker/engine.sh start first.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/infra/docker"
WORK="$ROOT/var/docker"
# shellcheck source=../versions.env
. "$ROOT/infra/versions.env"
# Debian's engine and no buildx plugin: the classic builder (the Dockerfiles need nothing more).
export DOCKER_BUILDKIT=0

say() { echo "[images] $*" >&2; }
die() { echo "[images] error: $*" >&2; exit 1; }
docker info >/dev/null 2>&1 || die "no Docker engine answers: run infra/docker/engine.sh start"

# build TAG CONTEXT [docker build options]: one image, its progress summarised on one line.
build() {
    local tag="$1" context="$2"; shift 2
    local started=$SECONDS log="$WORK/build-${tag//[\/:]/_}.log"
    if ! docker build -t "$tag" "$@" "$context" >"$log" 2>&1; then
        tail -30 "$log" >&2
        die "building $tag failed (log: $log)"
    fi
    say "$tag ready ($((SECONDS - started)) s, $(grep -c '^Step ' "$log") steps, $(grep -c 'Using cache' "$log") cached)"
}

# stage NAME: an empty build context under var/docker/contexts/NAME.
stage() {
    local dir="$WORK/contexts/$1"
    rm -rf -- "$dir" && mkdir -p -- "$dir" && echo "$dir"
}

mkdir -p "$WORK"
started=$SECONDS

# --- 1. the root filesystem ------------------------------------------------------------
debootstrap_args=(--variant=minbase --include=python3,python3-venv,ca-certificates bookworm)
rootfs_stamp="$(echo "${debootstrap_args[*]}" | cksum | cut -d' ' -f1)"
if [ "$(docker image inspect -f '{{index .Config.Labels "streamstate.stamp"}}' streamstate-rootfs:bookworm 2>/dev/null)" != "$rootfs_stamp" ]; then
    command -v debootstrap >/dev/null 2>&1 || die "debootstrap is missing: run infra/docker/engine.sh start (it installs it)"
    rootfs="$WORK/rootfs"
    rm -rf -- "$rootfs"
    say "making a Debian bookworm root filesystem with debootstrap (about a minute)"
    debootstrap "${debootstrap_args[@]}" "$rootfs" http://deb.debian.org/debian >"$WORK/debootstrap.log" 2>&1 \
        || { tail -20 "$WORK/debootstrap.log" >&2; die "debootstrap failed (log: $WORK/debootstrap.log)"; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | docker import --change "LABEL streamstate.stamp=$rootfs_stamp" - streamstate-rootfs:bookworm >/dev/null
    rm -rf -- "$rootfs"
    say "streamstate-rootfs:bookworm ready"
fi

# --- 2. the base image -----------------------------------------------------------------
context="$(stage base)"
cp "$HERE/base/Dockerfile" "$HERE/base/sources.list" "$HERE/base/apt-docker-clean" "$context/"
# This machine's CA certificates that Debian's stock bundle lacks, one file each.
python3 "$HERE/extra_ca_certificates.py" /etc/ssl/certs/ca-certificates.crt "$context/ca-certificates"
build streamstate-base:bookworm "$context"

# --- 3. the third-party stand-ins ------------------------------------------------------
need_dep() { [ -e "$ROOT/.deps/$1" ] || die ".deps/$1 is missing: run make deps (and bash infra/deps/install-mc.sh)"; }
need_dep "kafka-$KAFKA_VERSION/libs"
context="$(stage kafka)"
cp -r "$HERE/kafka/." "$context/"
cp -r "$ROOT/.deps/kafka-$KAFKA_VERSION/libs" "$context/libs"
rm -f "$context/libs/.streamstate-deps"
build "streamstate-local/kafka:$KAFKA_VERSION" "$context"

need_dep "minio-$MINIO_RELEASE/minio"
need_dep "mc-$MC_RELEASE/mc"
context="$(stage minio)"
cp "$HERE/minio/Dockerfile" "$ROOT/.deps/minio-$MINIO_RELEASE/minio" "$ROOT/.deps/mc-$MC_RELEASE/mc" "$context/"
build "streamstate-local/minio:$MINIO_RELEASE" "$context"
context="$(stage mc)"
cp "$HERE/mc/Dockerfile" "$ROOT/.deps/mc-$MC_RELEASE/mc" "$context/"
build "streamstate-local/mc:$MC_RELEASE" "$context"

build "streamstate-local/prometheus:v$PROMETHEUS_VERSION" "$HERE/prometheus" --build-arg "PROMETHEUS_VERSION=$PROMETHEUS_VERSION"

# --- 4. the project's images -----------------------------------------------------------
# One service per image: the Spark image's five services and the producers image's three
# would otherwise each build it again (compose's classic builder does not share a build).
say "building the project's images (docker compose build; the Spark image's first build takes minutes)"
log="$WORK/build-project.log"
if ! docker compose -f "$ROOT/docker-compose.yml" -f "$HERE/compose.local-images.yml" \
        build spark-master api secrets >"$log" 2>&1; then
    tail -30 "$log" >&2
    die "docker compose build failed (log: $log)"
fi
say "project images ready; all images built in $((SECONDS - started)) s"

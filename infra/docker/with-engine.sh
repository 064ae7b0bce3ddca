#!/usr/bin/env bash
# with-engine.sh COMMAND...: runs COMMAND (make test's pytest) with a Docker engine and the
# stack's images in place, so the compose and testcontainers tests run for real:
#   - starts dockerd when none answers (installing Debian's docker.io and building the Compose
#     plugin if needed: engine.sh), and stops it afterwards, whatever COMMAND's outcome;
#     an engine that was already running is used and left running;
#   - builds the images (build-images.sh; Docker's layer cache makes a rebuild quick).
# DOCKER_TESTS=off runs COMMAND alone (the Docker tests then skip, saying so), for machines
# where no engine can run (no root).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"

if [ "${DOCKER_TESTS:-on}" = "off" ]; then
    echo "[docker] DOCKER_TESTS=off: the compose tests will skip" >&2
    exec "$@"
fi

if ! docker info >/dev/null 2>&1; then
    trap 'bash "$HERE/engine.sh" stop' EXIT
fi
bash "$HERE/engine.sh" start
bash "$ROOT/infra/deps/install-mc.sh"
bash "$HERE/build-images.sh"
"$@"

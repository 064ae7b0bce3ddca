#!/usr/bin/env bash
# Installs the system tools the test suite needs and the Python packages cannot bring:
#   prometheus      - the dashboard acceptance test evaluates every panel's PromQL against it
#   docker-compose  - validates docker-compose.yml offline (`docker-compose config -q`, no engine needed)
#   maven           - resolves the production profile's jars (infra/deps/, run by `make deps`)
# All come from Debian's packages. Idempotent: does nothing when all are present.
set -euo pipefail

missing=()
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# --no-install-recommends keeps the node exporter and friends out; only the server binary is needed.
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
# The Debian package enables a system service; the stack runs its own Prometheus on its own port.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
fi

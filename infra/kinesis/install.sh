#!/usr/bin/env bash
# Installs the Kinesis-API server of the tests and the embedded stack: kinesis-mock, published on
# npm as kinesis-local (a single Node.js file, no dependencies), pinned by package-lock.json into
# infra/kinesis/node_modules. Node.js comes from Debian's packages when missing. Idempotent: does
# nothing when the pinned version is already installed.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "Installing Node.js and npm from Debian's packages (needed by the Kinesis server)..."
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        SUDO="sudo"
    fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi

wanted=$(node -p "require('./package-lock.json').packages['node_modules/kinesis-local'].version")
installed=$(node -p "try { require('./node_modules/kinesis-local/package.json').version } catch (e) { '' }")
if [ "$installed" = "$wanted" ]; then
    exit 0
fi
echo "Installing the Kinesis server (kinesis-local $wanted from npm) into infra/kinesis/node_modules..."
npm ci --no-audit --no-fund --loglevel=warn

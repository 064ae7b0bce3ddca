#!/usr/bin/env bash
# Installs Prometheus (and docker-compose for the offline compose checks) from Debian's packages.
# Kept as the entry point the Makefile calls; the work is in infra/install-test-deps.sh.
exec "$(dirname "$0")/../install-test-deps.sh" "$@"

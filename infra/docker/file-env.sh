#!/bin/sh
# The project images' entry point: for every variable NAME_FILE that names a file in
# /run/secrets (where compose mounts the stack's secrets), NAME is set to that file's
# contents, then the command runs. This is the *_FILE convention of the official images
# (MinIO and Grafana follow it too), so secrets never appear in `docker inspect`. Other
# *_FILE variables (STREAMSTATE_TOPICS_FILE) are settings and stay as they are.
# SECRETS_DIR: where the secrets are mounted (the unit tests use a temporary one).
set -eu
dir="${SECRETS_DIR:-/run/secrets}"
for name in $(env | sed -n "s|^\([A-Za-z_][A-Za-z0-9_]*\)_FILE=$dir/.*|\1|p"); do
    eval "path=\${${name}_FILE}"
    [ -r "$path" ] || { echo "file-env: ${name}_FILE names $path, which cannot be read" >&2; exit 1; }
    export "$name=$(cat "$path")"
    unset "${name}_FILE"
done
exec "$@"

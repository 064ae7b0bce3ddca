#!/bin/sh
# One-shot, compose's `secrets` service: the stack's secrets as files in the `secrets` volume
# (/run/secrets), so nothing secret is in the repository or needs setting by hand. A value
# set in .env (MINIO_ROOT_PASSWORD, GRAFANA_ADMIN_PASSWORD, API_TOKEN) is written as given;
# otherwise a random one is made on first start and kept across restarts. The services read
# them through *_FILE variables. Read one: docker compose exec api cat /run/secrets/api-token
set -eu
# SECRETS_DIR: where they go (the volume's mount point; the unit tests use a temporary one).
dir="${SECRETS_DIR:-/run/secrets}"
mkdir -p "$dir"
umask 077

put() {
    name="$1" given="$2"
    if [ -n "$given" ]; then
        printf '%s' "$given" >"$dir/.$name.tmp"
        echo "secrets: $name set from the environment (.env)"
    elif [ ! -s "$dir/$name" ]; then
        # 32 random bytes, URL-safe base64 without padding (43 characters).
        head -c 32 /dev/urandom | base64 | tr -d '\n=' | tr '+/' '-_' >"$dir/.$name.tmp"
        echo "secrets: $name generated"
    else
        echo "secrets: $name kept"
        return 0
    fi
    # Readable by the services' own users (MinIO, Grafana, the jobs and the API run as
    # different uids); only this stack's containers mount the volume.
    chmod 0444 "$dir/.$name.tmp"
    mv "$dir/.$name.tmp" "$dir/$name"
}

put minio-root-password "${MINIO_ROOT_PASSWORD:-}"
put grafana-admin-password "${GRAFANA_ADMIN_PASSWORD:-}"
put api-token "${API_TOKEN:-}"

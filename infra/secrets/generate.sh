#!/bin/sh
# One-shot, compose's `secrets` service: the stack's secrets as files, so nothing secret is in
# the repository or needs setting by hand. A value set in .env (MINIO_ROOT_PASSWORD,
# MINIO_JOBS_PASSWORD, GRAFANA_ADMIN_PASSWORD, API_TOKEN) is written as given; otherwise a
# random one is made on first start and kept across restarts. The services read them through
# *_FILE variables.
#
# Least privilege: each secret goes into the volume of the services that need it, and only
# those mount it (read-only, at /run/secrets); docker-compose.yml mounts the four volumes here
# at $dir/<volume>. Each file is 0400 and each directory 0700, owned by the user its readers
# run as, so no other user of a container can read it:
#   minio/minio-root-password    MinIO and its one-shot init (root in MinIO's images)
#   jobs/minio-jobs-password     the jobs' MinIO user, limited to the checkpoint bucket (the
#                                jobs run as the project images' user 10001; the init as root)
#   api/api-token                the API (10001)
#   grafana/grafana-admin-password  Grafana (uid 472 in its official image)
# Read one: docker compose exec api cat /run/secrets/api-token
set -eu
# SECRETS_DIR: where the volumes are mounted (the unit tests use a temporary directory).
dir="${SECRETS_DIR:-/run/secrets}"
umask 077
# The project's images' user (useradd --uid in spark-jobs/, services/api/ and producers/Dockerfile).
project_uid=10001
grafana_uid=472

# put VOLUME NAME OWNER GIVEN: write $dir/VOLUME/NAME, readable by OWNER only.
put() {
    volume="$1" name="$2" owner="$3" given="$4"
    target="$dir/$volume/$name"
    mkdir -p "$dir/$volume"
    rm -f "$target.tmp"  # left by a start killed mid-write
    if [ -n "$given" ]; then
        printf '%s' "$given" >"$target.tmp"
        echo "secrets: $name set from the environment (.env)"
    elif [ ! -s "$target" ]; then
        # 32 random bytes, URL-safe base64 without padding (43 characters).
        head -c 32 /dev/urandom | base64 | tr -d '\n=' | tr '+/' '-_' >"$target.tmp"
        echo "secrets: $name generated"
    else
        echo "secrets: $name kept"
        own "$owner" "$dir/$volume" "$target"
        return 0
    fi
    # Whole or not at all: written aside, flushed to disk, then renamed into place, so a
    # container killed meanwhile leaves the old file (or none, which the next start fills).
    own "$owner" "$target.tmp"
    sync "$target.tmp" 2>/dev/null || sync
    mv "$target.tmp" "$target"
    own "$owner" "$dir/$volume"
    sync "$dir/$volume" 2>/dev/null || sync
}

# own OWNER PATH...: files 0400 and directories 0700, owned by OWNER (when run as root, as
# compose runs this; the unit tests run it as themselves and check the modes).
own() {
    owner="$1"; shift
    for path in "$@"; do
        if [ -d "$path" ]; then chmod 0700 "$path"; else chmod 0400 "$path"; fi
        if [ "$(id -u)" = 0 ]; then chown "$owner:$owner" "$path"; fi
    done
}

put minio minio-root-password 0 "${MINIO_ROOT_PASSWORD:-}"
put jobs minio-jobs-password "$project_uid" "${MINIO_JOBS_PASSWORD:-}"
put api api-token "$project_uid" "${API_TOKEN:-}"
put grafana grafana-admin-password "$grafana_uid" "${GRAFANA_ADMIN_PASSWORD:-}"

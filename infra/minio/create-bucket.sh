#!/bin/sh
# One-shot: create the checkpoint bucket in MinIO (idempotent). Runs in the minio/mc image;
# the user and bucket come from the environment, the password from the secrets volume
# (MINIO_ROOT_PASSWORD_FILE, written by the `secrets` service).
set -eu
mc alias set local "http://minio:9000" "$MINIO_ROOT_USER" "$(cat "$MINIO_ROOT_PASSWORD_FILE")" >/dev/null
mc mb --ignore-existing "local/$S3_BUCKET"
echo "bucket $S3_BUCKET ready"

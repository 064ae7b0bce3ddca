#!/bin/sh
# One-shot: create the checkpoint bucket in MinIO (idempotent). Runs in the minio/mc image;
# credentials and the bucket name come from the environment (.env via docker-compose.yml).
set -eu
mc alias set local "http://minio:9000" "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD"
mc mb --ignore-existing "local/$S3_BUCKET"
echo "bucket $S3_BUCKET ready"

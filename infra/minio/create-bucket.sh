#!/bin/sh
# One-shot, compose's `minio-init` (runs in the minio/mc image; idempotent, so every `up`
# runs it again): the checkpoint bucket, and the jobs' own MinIO user, allowed into that
# bucket only. The jobs never hold MinIO's root password: only MinIO and this init do.
# Names come from the environment (MINIO_ROOT_USER, S3_BUCKET, MINIO_JOBS_USER), the two
# passwords from the files the `secrets` service writes (MINIO_ROOT_PASSWORD_FILE,
# MINIO_JOBS_PASSWORD_FILE). MINIO_ENDPOINT: where MinIO answers (tests/compose runs this
# script natively against a MinIO on loopback).
set -eu
endpoint="${MINIO_ENDPOINT:-http://minio:9000}"
policy="$MINIO_JOBS_USER-checkpoints"

read_secret() {
    # A secret file that is empty or short was cut or damaged: say which, never use it.
    value="$(cat "$1")"
    [ "${#value}" -ge 8 ] || { echo "minio-init: $1 holds ${#value} characters, MinIO needs 8 or more: delete it (docker compose down, then remove the secrets' volume) or set the value in .env" >&2; exit 1; }
    printf '%s' "$value"
}

# Assignments, so that set -e stops the script when read_secret refuses a file.
root_password="$(read_secret "$MINIO_ROOT_PASSWORD_FILE")"
jobs_password="$(read_secret "$MINIO_JOBS_PASSWORD_FILE")"
# Keys on standard input (mc's piped form), never as arguments: mc reads an argument that starts
# with "-" as a flag, and a generated password does so once in 64 (URL-safe base64).
printf '%s\n%s\n' "$MINIO_ROOT_USER" "$root_password" | mc alias set local "$endpoint" >/dev/null
mc mb --ignore-existing "local/$S3_BUCKET"

# What S3A does with checkpoints: list, read, write (multipart too), copy and delete objects in
# the bucket. No other bucket, no bucket administration, no IAM.
document="$(mktemp)"
trap 'rm -f "$document"' EXIT
cat >"$document" <<EOF
{
  "Version": "2012-10-17",
  "Statement": [
    {
      "Effect": "Allow",
      "Action": ["s3:GetBucketLocation", "s3:ListBucket", "s3:ListBucketMultipartUploads"],
      "Resource": ["arn:aws:s3:::$S3_BUCKET"]
    },
    {
      "Effect": "Allow",
      "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
      "Resource": ["arn:aws:s3:::$S3_BUCKET/*"]
    }
  ]
}
EOF
mc admin policy create local "$policy" "$document" >/dev/null
# Creates the user, or sets its password to the file's (a password changed in .env takes effect).
printf '%s\n%s\n' "$MINIO_JOBS_USER" "$jobs_password" | mc admin user add local >/dev/null
# Attached once: MinIO refuses to attach a policy again. (No grep: MinIO's mc image is UBI micro.)
case "$(mc admin user info local "$MINIO_JOBS_USER" --json)" in
    *"\"$policy\""*) ;;
    *) mc admin policy attach local "$policy" --user "$MINIO_JOBS_USER" >/dev/null ;;
esac
echo "bucket $S3_BUCKET ready; user $MINIO_JOBS_USER may use it and nothing else (policy $policy)"

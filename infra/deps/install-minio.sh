#!/usr/bin/env bash
# MinIO MINIO_RELEASE (the release compose's quay.io/minio/minio image runs), built from its
# source through the Go module proxy into .deps/minio-<release>/minio: no registry serves a
# MinIO binary. The release's commit is MINIO_MODULE_VERSION (MinIO tags are not semver).
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

go_release minio github.com/minio/minio "$MINIO_RELEASE" "$MINIO_MODULE_VERSION"

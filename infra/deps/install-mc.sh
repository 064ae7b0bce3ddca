#!/usr/bin/env bash
# MinIO's client mc MC_RELEASE (the release of compose's quay.io/minio/mc image), built from
# its source through the Go module proxy into .deps/mc-<release>/mc, for the locally built
# MinIO images (infra/docker/): the minio image's health check and the bucket init run mc.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

go_release mc github.com/minio/mc "$MC_RELEASE" "$MC_MODULE_VERSION"

#!/usr/bin/env bash
# MinIO MINIO_RELEASE (the release compose's quay.io/minio/minio image runs), built from its
# source through the Go module proxy into .deps/minio-<release>/minio: no registry serves a
# MinIO binary. The release's commit is MINIO_MODULE_VERSION (MinIO tags are not semver);
# its go.mod has no replace directives, so `go install module@version` builds it. The
# version stamps are the ones MinIO's own release build sets. Cached; first build ~10 min
# on 2 cores (Go's module and build caches make later ones quick).
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

out="$DEPS_DIR/minio-$MINIO_RELEASE"
stamp="$(stamp_of "$0" "$DEPS_SCRIPTS/common.sh")"
[ -f "$out/.installed-$stamp" ] && exit 0

need go "build MinIO from source" golang
module="github.com/minio/minio"
commit="${MINIO_MODULE_VERSION##*-}"
# RELEASE.2025-04-22T22-12-26Z -> 2025-04-22T22:12:26Z, MinIO's Version format.
version="$(echo "${MINIO_RELEASE#RELEASE.}" | sed -E 's/T([0-9]{2})-([0-9]{2})-([0-9]{2})Z$/T\1:\2:\3Z/')"
ldflags="-s -w -X $module/cmd.Version=$version -X $module/cmd.ReleaseTag=$MINIO_RELEASE"
ldflags="$ldflags -X $module/cmd.CommitID=$commit -X $module/cmd.ShortCommitID=$commit"

say "building MinIO $MINIO_RELEASE ($module@$MINIO_MODULE_VERSION) with $(go version | cut -d' ' -f3); the first build takes minutes"
fresh_dir "$out.tmp"
started=$SECONDS
set +e
# -v names each package as it is compiled: one progress line per 200 of them.
GOBIN="$out.tmp" CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 10 go install -v -trimpath -ldflags "$ldflags" "$module@$MINIO_MODULE_VERSION" 2>&1 \
    | tee "$out.tmp/.build.log" | awk '/^go: downloading/ { d++; if (d % 100 == 0) { print "[deps] minio: " d " modules downloaded"; fflush() } next }
                                        { n++; if (n % 200 == 0) { print "[deps] minio: " n " packages compiled"; fflush() } }' >&2
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ne 0 ]; then
    grep -v '^go: downloading' "$out.tmp/.build.log" | tail -20 >&2
    die "go install $module@$MINIO_MODULE_VERSION failed (log: $out.tmp/.build.log)"
fi
"$out.tmp/minio" --version | grep -q "$MINIO_RELEASE" || die "the built minio does not report $MINIO_RELEASE"
if [ -e "$out" ]; then fresh_dir "$out"; rm -rf -- "$out"; fi
mv -- "$out.tmp" "$out"
touch "$out/.installed-$stamp"
say "MinIO $MINIO_RELEASE ready in $out/minio (built in $((SECONDS - started)) s)"

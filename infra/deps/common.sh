# Shared by the install scripts of infra/deps/ (sourced, not run): the versions, where
# installs go, progress lines, and the Maven call.
set -euo pipefail

DEPS_SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PROJECT_ROOT="$(cd "$DEPS_SCRIPTS/../.." && pwd)"
VERSIONS_FILE="${VERSIONS_FILE:-$PROJECT_ROOT/infra/versions.env}"
# Installs are cached here (gitignored), one directory per version; Maven's ~/.m2 and Go's
# module and build caches make a second machine-wide install quick too.
DEPS_DIR="$PROJECT_ROOT/.deps"

set -a
# shellcheck source=../versions.env
. "$VERSIONS_FILE"
set +a

say() { echo "[deps] $*" >&2; }
die() { echo "[deps] error: $*" >&2; exit 1; }

need() {
    command -v "$1" >/dev/null 2>&1 || die "$1 is needed to $2; install it (e.g. apt-get install -y $3) and retry"
}

# A stamp names what an install was made from; a changed pom, script or version re-installs.
stamp_of() { cat "$@" "$VERSIONS_FILE" | cksum | cut -d' ' -f1; }

# fresh_dir DIR: an empty directory at DIR. Only a directory this project made (it holds the
# marker) or an empty one is ever cleared: a mistaken path must not be deleted.
fresh_dir() {
    local dir="$1"
    if [ -e "$dir" ] || [ -L "$dir" ]; then
        if [ -d "$dir" ] && [ ! -L "$dir" ] && { [ -f "$dir/.streamstate-deps" ] || [ -z "$(ls -A "$dir")" ]; }; then
            rm -rf -- "$dir"
        else
            die "$dir exists and is not an install directory of this project: not touching it"
        fi
    fi
    mkdir -p -- "$dir" && touch "$dir/.streamstate-deps"
}

# mvn_copy POM OUTDIR -Dprop=value...: the runtime dependency closure of POM into OUTDIR.
# Progress: one line per file Maven downloads (nothing once ~/.m2 has them all).
mvn_copy() {
    local pom="$1" out="$2"; shift 2
    need mvn "resolve jars from Maven Central" maven
    fresh_dir "$out"
    local log="$out/.mvn.log" status
    set +e
    mvn -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$out" "$@" 2>&1 \
        | tee "$log" | sed -nu 's|^Downloaded from [^:]*: .*/\([^/]*\) (\(.*\))$|[deps] mvn: downloaded \1 (\2)|p' >&2
    status=${PIPESTATUS[0]}
    set -e
    if [ "$status" -ne 0 ]; then
        grep -E '^\[ERROR\]' "$log" | head -20 >&2 || true
        die "Maven could not resolve $pom (full log: $log)"
    fi
    rm -f "$log"
}

# pyspark_jars_dir: the jars folder of the venv's pyspark, which the installs build against.
pyspark_jars_dir() {
    local python="${PYTHON:-$PROJECT_ROOT/.venv/bin/python}"
    "$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))' \
        || die "no pyspark in $python: run make setup first"
}

# finish_install OUT STAMP: OUT.tmp becomes OUT, replacing an earlier install, stamped current.
finish_install() {
    local out="$1" stamp="$2"
    if [ -e "$out" ]; then fresh_dir "$out"; rm -rf -- "$out"; fi
    mv -- "$out.tmp" "$out"
    touch "$out/.installed-$stamp"
}

# check_reports_release BINARY RELEASE: dies unless `BINARY --version` names RELEASE. The output
# is captured, not piped into `grep -q`: grep exits at its first match while the binary may
# still be writing, and pipefail turns the binary's SIGPIPE into a failed check (seen in CI).
check_reports_release() {
    local reported
    reported="$("$1" --version)" || die "$1 --version failed"
    [[ "$reported" == *"$2"* ]] || die "the built $(basename "$1") does not report $2: $reported"
}

# go_release NAME MODULE RELEASE MODULE_VERSION: a MinIO-family release (MinIO, its mc client)
# built from source through the Go module proxy into .deps/NAME-RELEASE/NAME. Their tags are
# not semver, so MODULE_VERSION is the release commit's pseudo-version; their go.mod files
# have no replace directives, so `go install module@version` builds them. The version stamps
# are the ones their own release builds set. Cached; a first build takes minutes on 2 cores
# (Go's module and build caches make later ones quick).
go_release() {
    local name="$1" module="$2" release="$3" module_version="$4"
    local out="$DEPS_DIR/$name-$release" commit="${module_version##*-}" version ldflags status started
    local stamp; stamp="$(stamp_of "$0" "$DEPS_SCRIPTS/common.sh")"
    [ -f "$out/.installed-$stamp" ] && return 0
    need go "build $name from source" golang
    # RELEASE.2025-04-22T22-12-26Z -> 2025-04-22T22:12:26Z, the format of their Version.
    version="$(echo "${release#RELEASE.}" | sed -E 's/T([0-9]{2})-([0-9]{2})-([0-9]{2})Z$/T\1:\2:\3Z/')"
    ldflags="-s -w -X $module/cmd.Version=$version -X $module/cmd.ReleaseTag=$release"
    ldflags="$ldflags -X $module/cmd.CommitID=$commit -X $module/cmd.ShortCommitID=$commit"
    say "building $name $release ($module@$module_version) with $(go version | cut -d' ' -f3); the first build takes minutes"
    fresh_dir "$out.tmp"
    started=$SECONDS
    set +e
    # -v names each package as it is compiled: one progress line per 200 of them.
    GOBIN="$out.tmp" CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 10 go install -v -trimpath -ldflags "$ldflags" "$module@$module_version" 2>&1 \
        | tee "$out.tmp/.build.log" | awk -v name="$name" '
            /^go: downloading/ { d++; if (d % 100 == 0) { print "[deps] " name ": " d " modules downloaded"; fflush() } next }
            { n++; if (n % 200 == 0) { print "[deps] " name ": " n " packages compiled"; fflush() } }' >&2
    status=${PIPESTATUS[0]}
    set -e
    if [ "$status" -ne 0 ]; then
        grep -v '^go: downloading' "$out.tmp/.build.log" | tail -20 >&2
        die "go install $module@$module_version failed (log: $out.tmp/.build.log)"
    fi
    check_reports_release "$out.tmp/$name" "$release"
    finish_install "$out" "$stamp"
    say "$name $release ready in $out/$name (built in $((SECONDS - started)) s)"
}

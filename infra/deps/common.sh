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
        grep -E '^\[ERROR\]' "$log" | head -20 >&2
        die "Maven could not resolve $pom (full log: $log)"
    fi
    rm -f "$log"
}

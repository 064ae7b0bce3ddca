#!/usr/bin/env bash
# The classes the Spark jobs checkpoint through (spark-jobs/jvm/): Hadoop's local file system
# with permissions and link lookups in Java instead of a chmod or readlink process per file,
# and a checkpoint file manager writing each S3A checkpoint file with one PUT instead of a
# copy into place.
#
#   install-checkpoint-io.sh                 native: compiled against the venv's pyspark jars
#                                            into .deps/checkpoint-io-<spark>/streamstate-checkpoint-io.jar
#                                            (cached); spark-jobs/src/streamstate_jobs/spark.py puts it on a
#                                            local master's classpath when it is installed
#   install-checkpoint-io.sh compile JARS OUT  the Spark image: compiled against Spark's JARS
#                                            directory into the jar OUT
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SOURCES="$PROJECT_ROOT/spark-jobs/jvm"
JAR_NAME=streamstate-checkpoint-io.jar

mapfile -t java_files < <(find "$SOURCES" -name '*.java' | sort)

# compile JARS OUT: the sources against the Spark and Hadoop jars in JARS, packed into OUT.
compile() {
    local spark_jars="$1" jar_file="$2" classes
    need javac "compile spark-jobs/jvm/" openjdk-17-jdk-headless
    say "compiling the checkpoint classes (${#java_files[@]} sources) against Spark $SPARK_VERSION's Hadoop"
    classes="$(mktemp -d)"
    javac --release 17 -nowarn -cp "$spark_jars/*" -d "$classes" "${java_files[@]}" \
        || die "javac failed on $SOURCES"
    jar --create --file "$jar_file" -C "$classes" . || die "could not pack $jar_file"
    rm -rf -- "$classes"
}

if [ "${1:-}" = compile ]; then
    [ $# -eq 3 ] || die "usage: $0 compile JARS_DIR OUT_JAR"
    compile "$2" "$3"
    exit 0
fi

out="$DEPS_DIR/checkpoint-io-$SPARK_VERSION"
stamp="$(stamp_of "${java_files[@]}" "$0" "$DEPS_SCRIPTS/common.sh")"
[ -f "$out/.installed-$stamp" ] && exit 0

# Optional: without it the jobs keep Hadoop's and Spark's own classes, slower but the same on disk.
if ! command -v javac >/dev/null 2>&1; then
    say "no javac (a JDK, e.g. apt-get install -y openjdk-17-jdk-headless): checkpoints keep Hadoop's local file system, which forks a process per file, and Spark's checkpoint file manager, which copies each S3 file into place"
    exit 0
fi
spark_jars="$(pyspark_jars_dir)"
fresh_dir "$out.tmp"
compile "$spark_jars" "$out.tmp/$JAR_NAME"
finish_install "$out" "$stamp"
say "checkpoint classes ready in $out/$JAR_NAME"

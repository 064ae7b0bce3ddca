#!/usr/bin/env bash
# The local file system the embedded Spark jobs checkpoint through (spark-jobs/jvm/: Hadoop's,
# with permissions and link lookups in Java instead of a chmod or readlink process per file),
# compiled against the venv's pyspark jars into .deps/local-fs-<spark>/streamstate-local-fs.jar.
# streamstate/jobs/spark.py puts it on a local master's classpath when it is installed.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SOURCES="$PROJECT_ROOT/spark-jobs/jvm"
JAR_NAME=streamstate-local-fs.jar

spark_jars="$(pyspark_jars_dir)"
out="$DEPS_DIR/local-fs-$SPARK_VERSION"
mapfile -t java_files < <(find "$SOURCES" -name '*.java' | sort)
stamp="$(stamp_of "${java_files[@]}" "$0" "$DEPS_SCRIPTS/common.sh")"
[ -f "$out/.installed-$stamp" ] && exit 0

# Optional: without it the jobs keep Hadoop's own class, slower but the same on disk.
if ! command -v javac >/dev/null 2>&1; then
    say "no javac (a JDK, e.g. apt-get install -y openjdk-17-jdk-headless): local checkpoints keep Hadoop's file system, which forks a process per file"
    exit 0
fi
say "compiling the local checkpoint file system (${#java_files[@]} classes) against Spark $SPARK_VERSION's Hadoop"
fresh_dir "$out.tmp"
javac --release 17 -nowarn -cp "$spark_jars/*" -d "$out.tmp/classes" "${java_files[@]}" \
    || die "javac failed on $SOURCES"
jar --create --file "$out.tmp/$JAR_NAME" -C "$out.tmp/classes" . || die "could not pack $JAR_NAME"
rm -rf -- "$out.tmp/classes"
finish_install "$out" "$stamp"
say "local checkpoint file system ready in $out/$JAR_NAME"

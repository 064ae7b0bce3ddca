#!/usr/bin/env bash
# Spark's built-in Kafka connector and S3A (hadoop-aws + the AWS SDK v2 modules it uses),
# for the production profile natively and for the Spark image: the same pom, the same
# versions, the same pruning, so both put the same jars next to Spark's.
#
#   install-spark-jars.sh                  native: into .deps/spark-jars-<spark>/, pruned
#                                          against the venv's pyspark/jars (cached)
#   install-spark-jars.sh resolve OUT      resolve only (the image's Maven build stage)
#   install-spark-jars.sh prune OUT JARS   drop from OUT what Spark's JARS dir already has
#
# Hadoop and the AWS SDK follow Spark: their versions are read from the spark-parent pom
# of SPARK_VERSION (Spark's own build), so the connector, kafka-clients, hadoop-aws and the
# SDK always match the wheel's Spark and Hadoop. The native install also checks hadoop-aws
# against the wheel's hadoop-client jars.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

POM="$DEPS_SCRIPTS/spark-jars.pom.xml"

# spark_build_property NAME: a property of Spark's parent pom (fetched into ~/.m2 once).
spark_build_property() {
    local pom="$HOME/.m2/repository/org/apache/spark/spark-parent_${SCALA_BINARY_VERSION}/$SPARK_VERSION/spark-parent_${SCALA_BINARY_VERSION}-$SPARK_VERSION.pom"
    if [ ! -f "$pom" ]; then
        mvn -B -q dependency:get -Dtransitive=false \
            -Dartifact="org.apache.spark:spark-parent_${SCALA_BINARY_VERSION}:$SPARK_VERSION:pom" >&2 \
            || die "cannot fetch Spark $SPARK_VERSION's build pom from Maven Central"
    fi
    local value
    value="$(sed -n "s|.*<$1>\\(.*\\)</$1>.*|\\1|p" "$pom")"
    value="${value%%$'\n'*}"  # the first; not `| head -1`, whose early exit pipefail can fail
    [ -n "$value" ] || die "Spark $SPARK_VERSION's build pom has no <$1>"
    echo "$value"
}

resolve() {
    local out="$1" hadoop aws
    need mvn "resolve jars from Maven Central" maven
    hadoop="$(spark_build_property hadoop.version)"
    aws="$(spark_build_property aws.java.sdk.v2.version)"
    say "resolving spark-sql-kafka-0-10_${SCALA_BINARY_VERSION} $SPARK_VERSION, hadoop-aws $hadoop and AWS SDK $aws modules with Maven"
    mvn_copy "$POM" "$out" -Dspark.version="$SPARK_VERSION" -Dscala.binary.version="$SCALA_BINARY_VERSION" \
        -Dhadoop.version="$hadoop" -Daws.sdk.version="$aws"
    printf 'SPARK_VERSION=%s\nHADOOP_VERSION=%s\nAWS_SDK_VERSION=%s\n' "$SPARK_VERSION" "$hadoop" "$aws" > "$out/RESOLVED"
}

# The artifact of a jar file name: everything before the version ("netty-buffer-4.1.115.Final.jar" -> netty-buffer).
artifact_of() { basename "$1" .jar | sed -E 's/-[0-9][^-]*(-[A-Za-z][^-]*)*$//'; }

prune() {
    local out="$1" spark_jars="$2" kept=0 dropped=0
    [ -d "$spark_jars" ] || die "no Spark jars directory at $spark_jars"
    [ -f "$out/.streamstate-deps" ] || die "$out was not made by '$0 resolve': not pruning it"
    declare -A spark_has=()
    for jar in "$spark_jars"/*.jar; do spark_has["$(artifact_of "$jar")"]=1; done
    for jar in "$out"/*.jar; do
        if [ -n "${spark_has[$(artifact_of "$jar")]:-}" ]; then
            rm "$jar"; dropped=$((dropped + 1))
        else
            kept=$((kept + 1))
        fi
    done
    say "kept $kept jars; dropped $dropped that Spark ships itself (Spark's versions stay)"
}

native() {
    local spark_jars out stamp
    out="$DEPS_DIR/spark-jars-$SPARK_VERSION"
    stamp="$(stamp_of "$POM" "$0" "$DEPS_SCRIPTS/common.sh")"
    if [ -f "$out/.installed-$stamp" ]; then
        return 0
    fi
    # Only now: asking Python where pyspark is costs 0.2 s, and every `make run` and job start checks this install.
    spark_jars="$(pyspark_jars_dir)"
    local wheel_hadoop
    wheel_hadoop="$(basename "$(ls "$spark_jars"/hadoop-client-api-*.jar)" .jar | sed 's/^hadoop-client-api-//')"
    resolve "$out.tmp"
    # shellcheck disable=SC1091
    local resolved_hadoop; resolved_hadoop="$(sed -n 's/^HADOOP_VERSION=//p' "$out.tmp/RESOLVED")"
    [ "$resolved_hadoop" = "$wheel_hadoop" ] \
        || die "hadoop-aws $resolved_hadoop (Spark $SPARK_VERSION's build) differs from the wheel's Hadoop $wheel_hadoop ($spark_jars): is pyproject.toml's pyspark pin SPARK_VERSION?"
    prune "$out.tmp" "$spark_jars"
    finish_install "$out" "$stamp"
    say "Spark jars ready in $out ($(du -sh "$out" | cut -f1))"
}

case "${1:-native}" in
    native) native ;;
    resolve) resolve "${2:?usage: $0 resolve OUT}" ;;
    prune) prune "${2:?usage: $0 prune OUT SPARK_JARS_DIR}" "${3:?usage: $0 prune OUT SPARK_JARS_DIR}" ;;
    *) die "usage: $0 [native | resolve OUT | prune OUT SPARK_JARS_DIR]" ;;
esac

"""Which master the session builder sets (streamstate_jobs.spark.master_to_set): the one Spark
was given wins over the spark_master setting, except Spark's MASTER over an explicit setting."""

from __future__ import annotations

from streamstate_jobs.spark import master_to_set
from streamstate_pipeline.settings import Settings

DEFAULT = Settings()  # spark_master not given: local[2]
EXPLICIT = Settings(spark_master="spark://cluster:7077")


def test_the_setting_applies_when_spark_was_given_no_master():
    assert master_to_set(DEFAULT, {}, {}) == "local[2]"
    assert master_to_set(EXPLICIT, {"PYSPARK_SUBMIT_ARGS": "--conf spark.ui.enabled=false pyspark-shell"}, {}) == "spark://cluster:7077"


def test_a_driver_started_by_spark_submit_keeps_its_master():
    environ = {"PYSPARK_GATEWAY_PORT": "41234", "PYSPARK_GATEWAY_SECRET": "s"}
    assert master_to_set(DEFAULT, environ, {}) is None
    assert master_to_set(EXPLICIT, environ, {}) is None


def test_a_master_in_the_conf_or_the_launch_options_is_kept():
    assert master_to_set(EXPLICIT, {}, {"spark.master": "local[3]"}) is None
    for options in ("--master local[3] pyspark-shell", "--master=yarn pyspark-shell", "--conf spark.master=local[1] pyspark-shell"):
        assert master_to_set(DEFAULT, {"PYSPARK_SUBMIT_ARGS": options}, {}) is None, options


def test_sparks_master_variable_yields_to_an_explicit_setting():
    assert master_to_set(DEFAULT, {"MASTER": "local[3]"}, {}) is None
    assert master_to_set(EXPLICIT, {"MASTER": "local[3]"}, {}) == "spark://cluster:7077"

"""The one typed settings object. Every field can be overridden by an environment
variable named ``STREAMSTATE_<FIELD>`` (upper case), or from a ``.env`` file.

The README's "Configuration" table is generated from this class
(``streamstate config --markdown``), so the two cannot drift apart.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from streamstate_pipeline.errors import ConfigurationError

if TYPE_CHECKING:
    from streamstate_pipeline.kafka_clients import KafkaConnection

# pipeline/src/streamstate_pipeline/settings.py -> the checkout (topics file, var/, the members' folders).
REPO_ROOT = Path(__file__).resolve().parents[3]

# The jobs' bucket count for a new checkpoint. A bucket visit costs a Spark group call, a state
# round trip and its hot set's decode and encode whatever its rows, so at alerting rates fewer,
# fuller visits cut the batch (docs/profile.md, "Fewer buckets for new checkpoints").
NEW_CHECKPOINT_BUCKETS = 8
# The count of a checkpoint that records none: written before the count was recorded, when the
# jobs' default was 64 (StateSpec's own default stays this, since a user's checkpoint records none).
# The state library's default (streamstate.state.defaults.DEFAULT_BUCKETS; the settings import no
# library, and a test holds the two equal).
UNRECORDED_BUCKETS = 64
# The library's DEFAULT_HOT_KEYS, likewise.
DEFAULT_HOT_KEYS = 200_000


class Settings(BaseSettings):
    # Inputs stay out of error messages: kafka_client_options may hold passwords.
    model_config = SettingsConfigDict(
        env_prefix="STREAMSTATE_", env_file=".env", extra="ignore", hide_input_in_errors=True
    )

    # --- Kafka -----------------------------------------------------------------
    bootstrap_servers: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers.")
    topics_file: Path = Field(
        REPO_ROOT / "infra" / "kafka" / "topics.toml", description="Topic definition file."
    )
    partitions: int | None = Field(
        None, ge=1, description="Override the partition count of every topic in the topic file."
    )
    kafka_client_options: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="Extra Kafka client settings for every client and Spark's kafka.* options, as a JSON object of "
        'librdkafka names, e.g. {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u", '
        '"sasl.password": "p"}; java.<name> keys reach only Spark\'s built-in connector. Secret values are masked '
        "when shown. See README, Kafka client settings.",
        json_schema_extra={"secret_values": True},
    )
    output_transactions: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Exactly-once output: the jobs write each micro-batch in Kafka transactions, and a batch replayed "
        "after a crash writes nothing it had committed, so a consumer reading with isolation.level=read_committed sees "
        "each record once. auto: on where the broker runs transactions, else at least once with a warning; on: a "
        "broker without them stops the job; off: at least once. See README, Delivery guarantees.",
    )
    output_transaction_timeout_ms: int = Field(
        180_000,
        ge=1_000,
        description="transaction.timeout.ms of the jobs' output transactions: the broker aborts a transaction open "
        "longer, and holds read_committed consumers back at most this long behind one a killed job left open. At most "
        "the broker's transaction.max.timeout.ms (15 minutes unless set); a record's delivery timeout is two thirds of it "
        "(at most 2 minutes). See README, Delivery guarantees.",
    )
    on_expired_batch_markers: Literal["stop", "replay"] = Field(
        "stop",
        description="A checkpoint whose last batch was planned and never committed longer ago than the brokers keep "
        "the output transactions' committed-batch markers (offsets.retention.minutes): 'stop' the job at start (exit 6), "
        "or 'replay' the batch, whose outputs a read_committed consumer may then see twice. See README, Delivery "
        "guarantees.",
    )
    topic_user_events: str = "user-events"
    topic_metrics: str = "metrics"
    topic_alerts: str = "alerts"
    topic_sessions: str = "sessions"
    topic_session_state: str = "session-state"
    topic_metric_state: str = "metric-state"
    topic_dead_letters: str = "dead-letters"
    topic_event_counts: str = "event-counts"

    # --- Input source ------------------------------------------------------------
    source: Literal["kafka", "kinesis"] = Field(
        "kafka",
        description="Where the jobs read their input: the Kafka topics, or Kinesis data streams of the same names "
        "(outputs always go to Kafka).",
    )
    kinesis_endpoint_url: str | None = Field(
        None, description="Kinesis API endpoint (the local server's URL); unset: AWS's endpoint for kinesis_region."
    )
    kinesis_region: str = Field("us-east-1", description="AWS region of the Kinesis streams.")

    # --- Spark -----------------------------------------------------------------
    spark_master: str = Field(
        "local[2]",
        description="Spark master URL (local[N], spark://, k8s://) of a job that starts Spark itself; under spark-submit, "
        "spark-submit's master applies.",
    )
    spark_driver_host: str = Field(
        "127.0.0.1",
        description="Address the executors reach the driver at (the job container's name on a cluster).",
    )
    shuffle_partitions: int | None = Field(
        None, ge=1, description="State partitions of a new checkpoint (unset: spark.sql.shuffle.partitions as given at "
        "launch, else one per core Spark runs on); an existing checkpoint keeps its own count, and a set value that "
        "differs from it stops the job at start.",
    )
    source_tasks: int | None = Field(
        None, ge=1, description="Tasks that read and validate a micro-batch's input (unset: one per core Spark runs on "
        "when the query starts, or per state partition where the query has more); an input of fewer partitions is read "
        "in one task per partition. Each task costs the same fixed time whatever its records, so more tasks than cores "
        "make a batch slower.",
    )
    state_buckets: int | None = Field(
        None, ge=1, description="Buckets the jobs group their keys into in a new checkpoint (Spark's per-group cost is "
        f"paid per bucket; unset: {NEW_CHECKPOINT_BUCKETS}); an existing checkpoint keeps its own count, and a set "
        "value that differs from it stops the job at start.",
    )
    state_hot_keys: int = Field(
        DEFAULT_HOT_KEYS, ge=1, description="Recently touched keys per job kept where touching them again costs no state call; "
        "beyond that the least recently touched move to a per-key map.",
    )
    max_offsets_per_trigger: int | None = Field(
        None, ge=1, description="Upper bound on records read per micro-batch (all partitions); unset, with output "
        "transactions: sized from output_transaction_timeout_ms (180 s: 3,154,500), so that a batch's transactions end "
        "within it. See README, Delivery guarantees."
    )
    trigger_interval: str = Field("2 seconds", description="Micro-batch trigger interval.")
    checkpoint_root: str = Field(
        str(REPO_ROOT / "var" / "checkpoints"),
        description="Checkpoint root; a local path or s3a://bucket/prefix.",
    )
    s3_endpoint: str | None = Field(
        None,
        description="S3 endpoint of s3a:// checkpoints (path-style, e.g. http://127.0.0.1:9000 for MinIO); unset: S3A's "
        "own configuration. Credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, as S3A reads them.",
    )
    spark_jars: str = Field(
        "",
        description="Extra jars for Spark (comma-separated paths): the stack launcher sets the installed Kafka "
        "connector and hadoop-aws jars. Where a job starts Spark on a local master they go on the JVM's own "
        "classpath (its class archive serves them); otherwise through spark.jars.",
    )
    state_store: Literal["rocksdb"] = Field(
        "rocksdb",
        description="State store provider. Only RocksDB: every stateful query runs on Spark's transformWithState, "
        "which refuses the HDFS-backed store.",
    )
    job_max_restarts: int = Field(
        5,
        ge=0,
        description="Restarts in a row of a failed job query from its checkpoint (with backoff) before the job exits;"
        " a committed batch starts the count again.",
    )
    job_jvm_socket_budget: int = Field(
        8_000,
        ge=0,
        description="Connections a job's own Spark JVM (local master) may hold after their other end closed them, before "
        "the job moves to a new JVM and resumes from its checkpoints: Spark 4.2.0 leaks one per stateful task "
        "(SPARK-58932). At most half the JVM's open-file limit; 0: never.",
    )
    job_fork_python: bool = Field(
        True,
        description="A job that starts its own Spark JVM on a local master forks its Python processes (PySpark's daemon, "
        "transformWithState's pre-init process) from a copy of itself, its imports done, instead of starting interpreters "
        "that import them again in its first batch. Needs PYTHONHASHSEED=0 in the job's environment (streamstate up sets it).",
    )
    ship_code: Literal["auto", "wheel", "none"] = Field(
        "auto",
        description="Ship the project's code to executors: 'wheel' builds the wheels of the library, the pipeline and "
        "the jobs as one zip and adds it with SparkContext.addPyFile; 'none' relies on the same installation on every node (one image); 'auto' ships "
        "on a non-local master when running from a source checkout.",
    )
    executor_cores: int | None = Field(None, ge=1, description="spark.executor.cores: task slots per executor.")
    executor_memory: str | None = Field(None, description="spark.executor.memory, e.g. '2g'.")
    cores_max: int | None = Field(
        None, ge=1, description="spark.cores.max: total cores a job takes from a standalone cluster (all: unset)."
    )

    on_source_reset: Literal["stop", "start-over"] = Field(
        "stop",
        description="When an input topic was recreated, emptied or truncated under a checkpoint: 'stop' the job "
        "(exit 2) with what happened, or 'start-over': move the checkpoint aside and read the topic from its beginning.",
    )

    # --- Event time (both jobs) ---------------------------------------------------
    watermark_delay_ms: int = Field(
        5 * 60 * 1000, ge=0, description="Allowed lateness of events (event-time watermark delay)."
    )
    max_clock_skew_ms: int = Field(
        60 * 1000,
        ge=0,
        description="A record whose event time is further ahead of its Kafka timestamp than this is dead-lettered "
        "and never moves the watermark. Keep it below watermark_delay_ms.",
    )

    # --- Sessions job ----------------------------------------------------------
    session_gap_ms: int = Field(30 * 60 * 1000, ge=1, description="Inactivity gap closing a session.")
    dedupe_retention_ms: int = Field(
        24 * 60 * 60 * 1000,
        ge=1,
        description="An event_id seen for a user is a duplicate for this long (event time) after its event.",
    )
    session_state_ttl_ms: int = Field(
        30 * 24 * 60 * 60 * 1000,
        ge=1,
        description="A user idle this long (event time, nothing open or pending) is removed from state (tombstone); "
        "at least dedupe_retention_ms (checked at start).",
    )
    burst_page_views: int = Field(
        50, ge=1, description="Page views within burst_window_ms that raise a bot_burst alert."
    )
    burst_window_ms: int = Field(60 * 1000, ge=1, description="Window of the bot_burst rule.")
    long_session_ms: int = Field(
        4 * 60 * 60 * 1000, ge=1, description="A session longer than this raises long_session."
    )
    event_count_window: str = Field("5 minutes", description="Sliding window of the event-count output.")
    event_count_slide: str = Field("1 minute", description="Slide of the event-count output.")

    # --- Anomalies job ---------------------------------------------------------
    anomaly_window: int = Field(100, ge=2, description="Values in each series' rolling window.")
    anomaly_threshold: float = Field(3.0, gt=0, description="|z| above this is an anomaly.")
    anomaly_min_count: int = Field(
        10, ge=1, description="Learning period: the window must hold more than this many values."
    )
    series_idle_timeout_ms: int = Field(
        24 * 60 * 60 * 1000, ge=1, description="A series with no value for this long (event time) expires."
    )

    # --- API -------------------------------------------------------------------
    api_host: str = "127.0.0.1"
    api_port: int = Field(8000, ge=0, le=65535)
    api_max_alerts: int = Field(100_000, ge=1, description="Alerts kept in the API's memory.")
    api_sse_keepalive_s: float = Field(
        15.0, gt=0, description="Seconds between keep-alive comments on the API's alert event stream."
    )
    api_retry_s: float = Field(2.0, gt=0, description="Pause between the API's attempts to reach Kafka.")
    api_store_path: Path = Field(
        REPO_ROOT / "var" / "api-store",
        description="Directory of the API's view store (RocksDB): latest snapshots and consumed offsets, so a restart "
        "resumes instead of rebuilding; missing or corrupt, it is rebuilt from the topics.",
    )
    api_store_cache_mb: int = Field(
        64, ge=8, description="Block cache of the API's view store (MB): bounds the memory its reads keep."
    )
    api_token: str | None = Field(
        None,
        description="Bearer token the API's data endpoints require (Authorization: Bearer <token>); unset: no "
        "token (blank: the API refuses to start). /healthz and /readyz stay open, and /metrics too unless it "
        "publishes series ids.",
        json_schema_extra={"secret": True},
    )
    api_max_connections: int = Field(
        1000, ge=1, description="Concurrent connections the API accepts; beyond, requests get 503."
    )
    api_max_streams: int = Field(
        100, ge=1, description="Concurrent /alerts/stream clients; beyond, new streams get 429."
    )
    api_grave_retention_ms: int = Field(
        7 * 24 * 60 * 60 * 1000, ge=0, description="A deleted user or series is remembered this long (wall-clock "
        "time since the API applied its deletion) to refuse an older snapshot arriving after its deletion; then forgotten."
    )
    api_request_head_timeout_s: float = Field(
        10.0, gt=0, description="Seconds a connection has to send a request's line and headers, from connecting or "
        "from its previous response; beyond, it is closed (idle or slow sockets cannot hold the connection limit)."
    )
    api_max_request_head_bytes: int = Field(
        32_768, ge=1_024, description="Largest request line and headers the API reads, in bytes; a longer head is "
        "answered 431 and its connection closed, before any authentication (the longest id's path is about 12 kB)."
    )
    api_follower_stall_s: float = Field(
        60.0, gt=0, description="Seconds the API's view follower may go without completing a step (consuming, "
        "applying what it consumed) before /readyz answers 503 saying it is stuck; a follower thread that has died "
        "makes /readyz and /healthz answer 503 at once."
    )
    api_metrics_series_ids: bool = Field(
        False, description="Publish streamstate_series_zscore{series_id} for the series with |z| above "
        "anomaly_threshold (the 200 largest); /metrics then requires api_token when one is set."
    )

    # --- Metrics ---------------------------------------------------------------
    metrics_host: str = Field(
        "127.0.0.1", description="Address the jobs' /metrics servers bind (compose: 0.0.0.0, inside its network)."
    )
    sessions_metrics_port: int = Field(9101, ge=0, le=65535, description="Sessions job /metrics port.")
    anomalies_metrics_port: int = Field(9102, ge=0, le=65535, description="Anomalies job /metrics port.")
    prometheus_port: int = Field(9090, ge=0, le=65535, description="Embedded Prometheus port.")
    prometheus_scrape_interval: str = Field(
        "2s", description="Scrape interval of the embedded Prometheus (a Prometheus duration)."
    )

    @field_validator("kafka_client_options", mode="before")
    @classmethod
    def _client_options(cls, value: object) -> object:
        from streamstate_pipeline.kafka_clients import parse_options

        return parse_options(value)

    @field_validator("state_store", mode="before")
    @classmethod
    def _transform_with_state_store(cls, value: object) -> object:
        if value != "rocksdb":
            raise ValueError(
                f"{value!r} is not a state store the queries can run on: every stateful query runs on Spark's "
                "transformWithState, which takes only RocksDB. Set STREAMSTATE_STATE_STORE=rocksdb or leave it unset"
            )
        return value

    @model_validator(mode="after")
    def _ttl_outlives_dedupe(self) -> "Settings":
        # A user removed before its event ids expire forgets them: a copy re-sent in between
        # would be counted twice, silently.
        if self.session_state_ttl_ms < self.dedupe_retention_ms:
            raise ValueError(
                f"session_state_ttl_ms ({self.session_state_ttl_ms}) is below dedupe_retention_ms "
                f"({self.dedupe_retention_ms}): a user removed from state would forget event ids that are still "
                "duplicates. Raise STREAMSTATE_SESSION_STATE_TTL_MS or lower STREAMSTATE_DEDUPE_RETENTION_MS"
            )
        return self

    @property
    def kafka(self) -> KafkaConnection:
        """The Kafka connection every client of these settings uses: ``bootstrap_servers`` and
        ``kafka_client_options`` (imported here: kafka_clients loads the Kafka client library)."""
        from streamstate_pipeline.kafka_clients import KafkaConnection

        return KafkaConnection(self.bootstrap_servers, self.kafka_client_options)

    def with_overrides(self, **changes: object) -> Settings:
        """A copy with ``changes`` applied, validated as the environment's values are: each
        field's type and bounds and the rules across fields. Run-time facts (a broker's port, an
        endpoint) are written back through this, never with an unvalidated ``model_copy``. The
        environment is not read again. A name that is no setting, or a value a setting refuses,
        raises a :class:`ConfigurationError` that names the setting."""
        unknown = sorted(set(changes) - set(type(self).model_fields))
        if unknown:
            raise ConfigurationError(f"no such setting: {', '.join(unknown)}")
        try:
            return type(self).model_validate({**self.model_dump(), **changes})
        except ValidationError as exc:
            refused = "; ".join(f"{'.'.join(str(part) for part in error['loc']) or 'settings'}: {error['msg']}" for error in exc.errors())
            raise ConfigurationError(f"refused setting override ({', '.join(sorted(changes))}): {refused}") from None

    def checkpoint(self, job: str) -> str:
        return f"{self.checkpoint_root.rstrip('/')}/{job}"

    @property
    def bucket_count(self) -> int:
        """The jobs' bucket count before a checkpoint is read: ``state_buckets`` where set, else a
        new checkpoint's. A job's start then runs with its checkpoint's own count and labels
        (``JobContext.bucket_labels``)."""
        return self.state_buckets or NEW_CHECKPOINT_BUCKETS


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


@lru_cache(maxsize=1)
def defaults() -> Settings:
    """Every setting at its default, whatever the environment says: where code outside this class
    takes a default from (the rules' dataclasses, ``StateSpec``), so each default is written once."""
    return Settings.model_construct()

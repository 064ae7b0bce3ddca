"""Kinesis Data Streams plumbing shared by the source, the producers, the embedded stack and
the tests: the one builder of boto3 Kinesis clients, the local Kinesis-API server
(kinesis-mock, installed from npm by ``infra/kinesis/install.sh``) and stream creation.

Credentials come from boto3's default chain (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``,
a profile, an instance role), never from the project's settings, so no secret is ever
printed by ``streamstate config`` or written into a Spark plan. The local server accepts any
credentials; :data:`LOCAL_CREDENTIALS` are the placeholders the stack and tests give it.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from streamstate_pipeline.settings import REPO_ROOT
from streamstate_pipeline.errors import UnavailableError

SERVER_DIR = REPO_ROOT / "infra" / "kinesis"
SERVER_MAIN = SERVER_DIR / "node_modules" / "kinesis-local" / "main.js"
# Placeholders for the local server only: it checks that requests are signed, not by whom.
LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "streamstate-local", "AWS_SECRET_ACCESS_KEY": "streamstate-local"}


class KinesisUnavailable(UnavailableError, RuntimeError):
    """The Kinesis endpoint does not answer, or the local server is not installed."""


def kinesis_client(endpoint_url: str | None, region: str, max_attempts: int = 1, timeout_s: float = 30.0):
    """A boto3 Kinesis client. ``max_attempts=1`` leaves retries to the caller, which is how the
    source owns its backoff on throttling; producers and tools may ask for botocore's retries."""
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"max_attempts": max_attempts, "mode": "standard"},
        connect_timeout=timeout_s,
        read_timeout=timeout_s,
        max_pool_connections=16,
    )
    return boto3.client("kinesis", endpoint_url=endpoint_url or None, region_name=region, config=config)


def ensure_local_credentials() -> None:
    """Give boto3 placeholder credentials when none are configured (local server only)."""
    for name, value in LOCAL_CREDENTIALS.items():
        os.environ.setdefault(name, value)


# --------------------------------------------------------------------------- the local server
@dataclass(frozen=True)
class LocalServer:
    """How to start the local Kinesis server on ``port`` (plain HTTP) and where it answers."""

    port: int
    tls_port: int
    data_dir: Path

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        node = shutil.which("node")
        if node is None or not SERVER_MAIN.exists():
            raise KinesisUnavailable(
                f"the local Kinesis server is not installed ({SERVER_MAIN} missing or no node on PATH): "
                "run `bash infra/kinesis/install.sh` (make test does)"
            )
        return [node, "-r", str(SERVER_DIR / "loopback.js"), str(SERVER_MAIN)]

    def env(self) -> dict[str, str]:
        # Resharding and stream creation take 500 ms by default; shorter keeps tests quick and
        # still exercises the UPDATING state a reader must wait out.
        return {
            "KINESIS_MOCK_PLAIN_PORT": str(self.port),
            "KINESIS_MOCK_TLS_PORT": str(self.tls_port),
            "KINESIS_MOCK_CERT_PATH": str(SERVER_MAIN.parent / "server.json"),
            "CREATE_STREAM_DURATION": "100ms",
            "DELETE_STREAM_DURATION": "100ms",
            "SPLIT_SHARD_DURATION": "100ms",
            "MERGE_SHARDS_DURATION": "100ms",
            "UPDATE_SHARD_COUNT_DURATION": "100ms",
            "SHARD_LIMIT": "1000",
            "LOG_LEVEL": "WARN",
            "PERSIST_PATH": str(self.data_dir),
            "SHOULD_PERSIST_DATA": "false",
        }

    def env_for_clients(self) -> dict[str, str]:
        """What a client process of this server needs: placeholder credentials."""
        return dict(LOCAL_CREDENTIALS)


def wait_for_kinesis(endpoint_url: str | None, region: str, timeout_s: float = 30.0) -> None:
    """Block until the Kinesis endpoint answers ListStreams."""
    client = kinesis_client(endpoint_url, region, timeout_s=2.0)
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            client.list_streams(Limit=1)
            return
        except Exception as exc:  # connection refused while starting, or an error answer
            last = exc
            time.sleep(0.2)
    raise KinesisUnavailable(f"Kinesis at {endpoint_url or 'AWS ' + region} did not answer within {timeout_s:.0f}s: {last}")


# --------------------------------------------------------------------------- streams
def wait_until_active(client, stream: str, timeout_s: float = 60.0) -> None:
    """Wait out CREATING / UPDATING: resharding a stream that is not ACTIVE is refused."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamStatus"]
        if status == "ACTIVE":
            return
        if time.monotonic() > deadline:
            raise KinesisUnavailable(f"stream {stream} still {status} after {timeout_s:.0f}s")
        time.sleep(0.05)


def create_stream(client, stream: str, shards: int) -> bool:
    """Create ``stream`` with ``shards`` shards unless it exists; wait until it is ACTIVE.
    Returns whether it was created."""
    try:
        client.create_stream(StreamName=stream, ShardCount=shards)
        created = True
    except client.exceptions.ResourceInUseException:
        created = False
    wait_until_active(client, stream)
    return created


def ensure_streams(endpoint_url: str | None, region: str, streams: dict[str, int]) -> list[str]:
    """Create the missing streams of ``{name: shard count}``; returns the names created."""
    client = kinesis_client(endpoint_url, region, max_attempts=5)
    return [name for name, shards in streams.items() if create_stream(client, name, shards)]

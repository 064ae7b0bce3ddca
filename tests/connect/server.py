"""A local Spark Connect server for the tests: one JVM started from the pyspark wheel
(``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer``, the server
jar ships in ``pyspark/jars/``) in a subprocess, bound to loopback, stopped by its PID.

Not ``SparkSession.builder.remote("local")``: that starts the server inside this process,
which already holds the classic session of the other Spark tests, and ``SparkSession.builder``
is one shared singleton for both.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pyspark

from streamstate import fork_server
from streamstate.spark_python import worker_python
from streamstate.state.operators import PROVIDER_SETTING, ROCKSDB_PROVIDER

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def server_conf(port: int, jars: list[Path], shuffle_partitions: int = 2) -> dict[str, str]:
    """The server's Spark configuration: what the classic test session has that matters here."""
    conf = {
        "spark.master": "local[2]",
        "spark.app.name": "streamstate-connect-tests",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        PROVIDER_SETTING: ROCKSDB_PROVIDER,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
    }
    if jars:
        conf["spark.jars"] = ",".join(str(jar) for jar in jars)
    return conf


@dataclass
class ConnectServer:
    """One Spark Connect server process; :meth:`start` waits until it answers on its port."""

    port: int
    jars: list[Path]
    log_path: Path
    process: subprocess.Popen | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def command(self) -> list[str]:
        spark_home = Path(pyspark.__file__).parent
        command = [str(spark_home / "bin" / "spark-submit"), "--class", SERVER_CLASS]
        for key, value in server_conf(self.port, self.jars).items():
            command += ["--conf", f"{key}={value}"]
        return command + ["spark-internal"]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("PYSPARK_GATEWAY_PORT", None)
        env.pop("PYSPARK_SUBMIT_ARGS", None)
        env["SPARK_HOME"] = str(Path(pyspark.__file__).parent)
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        # The server's Python workers (UDFs, transformWithState, foreachBatch) run this venv's
        # interpreter, through the launcher the classic session uses; without it: ModuleNotFoundError.
        env["PYSPARK_PYTHON"] = worker_python(sys.executable)
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        # Its queries' pre-init and foreachBatch processes forked by one server (streamstate.fork_server).
        env[fork_server.VARIABLE] = "on"
        return env

    def start(self, limit_s: float = 240.0) -> "ConnectServer":
        self._log = open(self.log_path, "ab")
        # Its own process group: a Ctrl-C in the test terminal goes to pytest, which stops it by PID.
        self.process = subprocess.Popen(
            self.command(), env=self.environment(), stdout=self._log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the Connect server exited with {self.process.returncode}; see {self.log_path}:\n{self.log_tail()}")
            if self._answers():
                return self
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"the Connect server did not listen on {self.port} within {limit_s} s; see {self.log_path}")

    def _answers(self) -> bool:
        with socket.socket() as probe:
            probe.settimeout(1.0)
            return probe.connect_ex(("127.0.0.1", self.port)) == 0

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM to the server's PID (Spark's shutdown hooks stop the queries), SIGKILL after ``timeout_s``."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(30)
        if self._log is not None:
            self._log.close()
            self._log = None


def connect_session(url: str):
    """A new client session of the server at ``url`` (its own server-side session and conf)."""
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    return RemoteSparkSession.builder.remote(url).create()

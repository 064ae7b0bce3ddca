"""Compose's MinIO init, run natively: the jobs' MinIO user reaches the checkpoint bucket and
nothing else.

The same script compose's one-shot ``minio-init`` runs (infra/minio/create-bucket.sh), with
the same mc release (built into .deps/ like MinIO), against a real MinIO from .deps/, with
the jobs' password written by the same ``secrets`` generator (infra/secrets/generate.sh).
No Docker engine is needed: only the addresses differ from compose.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from streamstate_pipeline import binaries
from streamstate_stack.launcher import EmbeddedStack
from streamstate_stack.s3 import S3, S3Error
from tests.compose.compose_files import GENERATE_SECRETS, SECRETS, compose, compose_defaults

INIT_SCRIPT = Path(__file__).resolve().parents[2] / "infra" / "minio" / "create-bucket.sh"
BUCKET = compose_defaults()["S3_BUCKET"]
JOBS_USER = compose_defaults()["MINIO_JOBS_USER"]
# URL-safe base64, as infra/secrets/generate.sh writes, but starting with "-" (mc took it for a flag).
DASHED_PASSWORD = "-VoVWzqcP4YyIb66FnQ2KuyLVFMjY8yBjAxVYFTOsSI"
# A bucket of the root account's, made before the init runs, with one object in it.
OTHER_BUCKET = f"root-only-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def minio(tmp_path_factory):
    """MinIO started natively with its root credentials and another bucket than the checkpoints'.
    The root password starts with "-", as a generated one does once in 64: the init must hand
    it to mc as a key, not as a flag."""
    workdir = tmp_path_factory.mktemp("minio-init")
    (workdir / "minio").mkdir()
    (workdir / "minio" / "credentials").write_text(f"streamstate\n{DASHED_PASSWORD}-root\n")
    stack = EmbeddedStack(workdir=workdir, quiet=True)
    try:
        stack.start_object_store(bucket=OTHER_BUCKET)
        stack.s3()._request("PUT", f"/{OTHER_BUCKET}/secret-object", body=b"root's")
        yield stack
    finally:
        stack.stop()


def run_init(stack: EmbeddedStack, secrets_dir: Path) -> subprocess.CompletedProcess:
    """infra/minio/create-bucket.sh with compose's minio-init environment, the addresses natively."""
    assert stack.s3_credentials is not None and stack.minio is not None
    root_password = secrets_dir / "root-password"
    root_password.write_text(stack.s3_credentials.secret_key)
    jobs_password = next(secrets_dir.rglob(SECRETS["MINIO_JOBS_PASSWORD"]))
    declared = compose()["services"]["minio-init"]["environment"]
    environment = {
        "PATH": f"{binaries.mc_binary().parent}:{os.environ['PATH']}",
        "HOME": str(secrets_dir),  # mc keeps its aliases (the root password among them) under here
        "MC_CONFIG_DIR": str(secrets_dir / "mc"),
        "MINIO_ENDPOINT": stack.minio.endpoint,
        "MINIO_ROOT_USER": stack.s3_credentials.access_key,
        "MINIO_ROOT_PASSWORD_FILE": str(root_password),
        "S3_BUCKET": BUCKET,
        "MINIO_JOBS_USER": JOBS_USER,
        "MINIO_JOBS_PASSWORD_FILE": str(jobs_password),
    }
    assert set(declared) - {"MINIO_ENDPOINT"} <= set(environment), "the test gives the script what compose gives it"
    # Through a Python of its own that reports the peak RSS of the script's processes (mc's):
    # compose's mem_limit must hold it, or the kernel kills minio-init (exit 137).
    measured = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
                "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(r.returncode)")
    return subprocess.run([sys.executable, "-c", measured, "sh", str(INIT_SCRIPT)], env=environment,
                          capture_output=True, text=True, timeout=120)


def peak_kib(result: subprocess.CompletedProcess) -> int:
    return int(result.stderr.strip().splitlines()[-1])


def mem_limit_kib(service: str) -> int:
    limit = str(compose()["services"][service]["mem_limit"])
    return int(limit[:-1]) * {"k": 1, "m": 1024, "g": 1024 * 1024}[limit[-1].lower()]


@pytest.fixture(scope="module")
def jobs_store(minio, tmp_path_factory) -> S3:
    secrets_dir = tmp_path_factory.mktemp("secrets")
    generated = subprocess.run(["sh", str(GENERATE_SECRETS)], env={"PATH": os.environ["PATH"], "SECRETS_DIR": str(secrets_dir)},
                               capture_output=True, text=True, timeout=30)
    assert generated.returncode == 0, generated.stderr
    for attempt in ("first start", "a restart: compose runs the init on every `up`"):
        result = run_init(minio, secrets_dir)
        assert result.returncode == 0, f"{attempt}: {result.stdout}{result.stderr}"
        # A quarter left for what a container adds (the shell, the page cache of mc's binary).
        assert peak_kib(result) < 0.75 * mem_limit_kib("minio-init"), f"{attempt}: mc peaked at {peak_kib(result)} KiB"
    password = next(secrets_dir.rglob(SECRETS["MINIO_JOBS_PASSWORD"])).read_text()
    return S3(minio.minio.endpoint, JOBS_USER, password)


def test_the_jobs_user_reads_and_writes_checkpoints_in_its_bucket(jobs_store):
    key = f"checkpoints/probe-{uuid.uuid4().hex}/offsets/0"
    jobs_store._request("PUT", f"/{BUCKET}/{key}", body=b"v1")
    assert jobs_store.get(BUCKET, key) == b"v1"
    assert key in jobs_store.list(BUCKET, "checkpoints/")
    jobs_store._request("DELETE", f"/{BUCKET}/{key}")
    assert key not in jobs_store.list(BUCKET, "checkpoints/")


def test_the_jobs_user_is_refused_outside_its_bucket(minio, jobs_store):
    # AccessDenied: the user exists and signed right (an unknown user gets InvalidAccessKeyId).
    other, denied = OTHER_BUCKET, r"(?s)HTTP 403: .*<Code>AccessDenied</Code>"
    with pytest.raises(S3Error, match=denied):
        jobs_store.list(other)
    with pytest.raises(S3Error, match=denied):
        jobs_store.get(other, "secret-object")
    with pytest.raises(S3Error, match=denied):
        jobs_store._request("PUT", f"/{other}/planted", body=b"x")
    with pytest.raises(S3Error, match=denied):
        jobs_store.create_bucket(f"jobs-made-{uuid.uuid4().hex[:8]}")
    assert minio.s3().list(other) == ["secret-object"], "nothing planted"


@pytest.mark.parametrize("text", ["", "abc"], ids=["empty", "cut"])
def test_the_init_refuses_an_empty_or_cut_password_file_by_name(minio, tmp_path, text):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / SECRETS["MINIO_JOBS_PASSWORD"]).write_text(text)
    result = run_init(minio, tmp_path)
    assert result.returncode != 0
    assert f"{SECRETS['MINIO_JOBS_PASSWORD']} holds {len(text)} characters" in result.stderr
    assert "set the value in .env" in result.stderr


def test_a_jobs_password_that_starts_with_a_dash_is_set_as_the_users_password(minio, tmp_path):
    """Compose's stack failed to start when the generated password began with "-" (minio-init:
    "flag provided but not defined")."""
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / SECRETS["MINIO_JOBS_PASSWORD"]).write_text(DASHED_PASSWORD)
    result = run_init(minio, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert isinstance(S3(minio.minio.endpoint, JOBS_USER, DASHED_PASSWORD).list(BUCKET), list)

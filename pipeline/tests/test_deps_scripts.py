"""The install scripts' shared checks in infra/deps/common.sh, run in bash as the scripts run
them (``set -euo pipefail``)."""

from __future__ import annotations

import subprocess

import pytest

from streamstate_pipeline.settings import REPO_ROOT
from streamstate_pipeline import binaries

COMMON = REPO_ROOT / "infra" / "deps" / "common.sh"
RELEASE = "RELEASE.2025-04-16T18-13-26Z"


def _fake_binary(tmp_path, body: str):
    binary = tmp_path / "mc"
    binary.write_text(f"#!/usr/bin/env bash\n{body}\n")
    binary.chmod(0o755)
    return binary


def _check(binary, release: str = RELEASE) -> subprocess.CompletedProcess[str]:
    script = f'. "{COMMON}"; check_reports_release "{binary}" "{release}" && echo ok'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)


def test_a_binary_that_keeps_writing_after_its_release_passes(tmp_path):
    # The release comes first and 4 MB follow: a reader that stops at its first match (the
    # `| grep -q` this replaced) makes the binary die of SIGPIPE, which pipefail reported as a
    # wrong release in CI.
    binary = _fake_binary(tmp_path, f'echo "mc version {RELEASE}"; head -c 4000000 /dev/zero | tr "\\0" "x"; echo')
    for _ in range(5):
        result = _check(binary)
        assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_a_binary_of_another_release_is_refused_with_what_it_reported(tmp_path):
    binary = _fake_binary(tmp_path, 'echo "mc version RELEASE.2024-01-01T00-00-00Z"')
    result = _check(binary)
    assert result.returncode != 0
    assert f"does not report {RELEASE}" in result.stderr and "RELEASE.2024-01-01T00-00-00Z" in result.stderr


def test_a_binary_whose_version_fails_is_refused(tmp_path):
    binary = _fake_binary(tmp_path, f'echo "mc version {RELEASE}"; exit 3')
    result = _check(binary)
    assert result.returncode != 0 and "--version failed" in result.stderr


def _ensure_with_script(tmp_path, monkeypatch, body: str):
    """binaries.ensure("minio") running a stand-in install script in bash (a repository under tmp_path)."""
    scripts = tmp_path / "infra" / "deps"
    scripts.mkdir(parents=True)
    (scripts / "install-minio.sh").write_text(body.replace("DEPS", str(tmp_path / ".deps")))
    monkeypatch.setattr(binaries, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(binaries, "SCRIPTS", scripts)
    monkeypatch.setattr(binaries, "DEPS_DIR", tmp_path / ".deps")
    return binaries.ensure("minio")


def test_ensure_says_whether_the_install_script_failed_or_finished_without_installing(tmp_path, monkeypatch):
    with pytest.raises(binaries.DependencyMissing, match=r"`bash infra/deps/install-minio.sh` exited 3$"):
        _ensure_with_script(tmp_path / "failed", monkeypatch, "exit 3\n")
    with pytest.raises(binaries.DependencyMissing, match="finished without leaving its completion stamp in .*its output above says"):
        _ensure_with_script(tmp_path / "skipped", monkeypatch, 'echo "no go toolchain: skipped"; exit 0\n')
    release = binaries.versions()["MINIO_RELEASE"]
    installed = _ensure_with_script(
        tmp_path / "done", monkeypatch, f'mkdir -p "DEPS/minio-{release}" && touch "DEPS/minio-{release}/.installed-x"\n'
    )
    assert installed == tmp_path / "done" / ".deps" / f"minio-{release}"

"""infra/docker/extra_ca_certificates.py: which of a bundle's certificates the local base image adds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from streamstate_pipeline.settings import REPO_ROOT

SCRIPT = REPO_ROOT / "infra" / "docker" / "extra_ca_certificates.py"
STOCK = sorted(Path("/usr/share/ca-certificates").rglob("*.crt"))
MACHINE_CA = "-----BEGIN CERTIFICATE-----\nTUFDSElORS1DQQ==\nbm90LWluLWRlYmlhbg==\n-----END CERTIFICATE-----"


@pytest.mark.skipif(not STOCK, reason="Debian's ca-certificates package is not installed")
def test_only_the_certificates_debian_lacks_are_written(tmp_path):
    # A stock certificate re-wrapped at another width is still the stock one.
    stock = STOCK[0].read_text().strip()
    begin, *body, end = stock.splitlines()
    rewrapped = "\n".join([begin, *(line for chunk in body for line in (chunk[:32], chunk[32:]) if line), end])
    bundle = tmp_path / "bundle.crt"
    bundle.write_text(f"{rewrapped}\n{MACHINE_CA}\n")
    result = subprocess.run([sys.executable, str(SCRIPT), str(bundle), str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    written = sorted((tmp_path / "out").iterdir())
    assert [path.read_text() for path in written] == [MACHINE_CA + "\n"]
    assert "1 CA certificate(s)" in result.stderr

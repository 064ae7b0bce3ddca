"""Writes the certificates of a PEM bundle that Debian's stock CA list lacks, one file each.

This machine reaches its package registries through a TLS-inspecting path whose CA is in
its system bundle but not in Debian's ``ca-certificates`` package. The local base image
(infra/docker/base/) trusts exactly those extra certificates: ``update-ca-certificates``
adds files in /usr/local/share/ca-certificates to the bundle and to Java's trust store.
Usage: extra_ca_certificates.py BUNDLE OUTDIR
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

STOCK_CERTIFICATES = Path("/usr/share/ca-certificates")
PEM = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)


def certificates(text: str) -> list[str]:
    return ["".join(pem.split()) for pem in PEM.findall(text)]


def main(bundle: str, outdir: str) -> None:
    stock = {cert for path in STOCK_CERTIFICATES.rglob("*.crt") for cert in certificates(path.read_text())}
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    extra = [pem for pem in PEM.findall(Path(bundle).read_text()) if "".join(pem.split()) not in stock]
    for index, pem in enumerate(extra):
        (out / f"build-machine-{index}.crt").write_text(pem + "\n")
    print(f"[images] {len(extra)} CA certificate(s) of this machine beyond Debian's stock list", file=sys.stderr)


if __name__ == "__main__":
    main(*sys.argv[1:])

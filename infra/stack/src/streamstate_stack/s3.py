"""The few S3 calls the project makes itself: create the checkpoint bucket, list and read
checkpoint objects (the production profile's launcher and its tests).

Spark reads and writes the checkpoints through S3A; outside Spark only these three
requests are needed, so they are signed here (AWS Signature Version 4, path-style
addressing, as MinIO serves it) with the standard library rather than by an S3 client
dependency.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from streamstate_pipeline.errors import StackError

REGION = "us-east-1"  # MinIO's default region; S3A is configured with the same
_S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class S3Error(StackError, RuntimeError):
    """An S3 request failed: the status and the server's error message. ``status`` is the HTTP
    status, ``code`` the S3 error code of the response's XML body (``BucketAlreadyOwnedByYou``;
    None when it has none): callers tell errors apart by those, not by the message."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def error_code(body: str) -> str | None:
    """The ``<Code>`` of an S3 error response's XML body (None: not one)."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return None
    code = root.findtext("Code") if root.tag == "Error" else root.findtext(".//Error/Code")
    return code or None


def split_s3a(uri: str) -> tuple[str, str]:
    """``s3a://bucket/some/prefix`` -> ("bucket", "some/prefix")."""
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme != "s3a" or not parsed.netloc:
        raise ValueError(f"not an s3a:// URI: {uri!r}")
    return parsed.netloc, parsed.path.strip("/")


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


@dataclass(frozen=True)
class S3:
    endpoint: str  # http://127.0.0.1:9000
    access_key: str
    secret_key: str
    region: str = REGION

    def _request(self, method: str, path: str, query: dict[str, str] | None = None, body: bytes = b"") -> bytes:
        url = urllib.parse.urlsplit(self.endpoint)
        now = dt.datetime.now(dt.timezone.utc)
        stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        canonical_path = urllib.parse.quote(path, safe="/-_.~")
        canonical_query = "&".join(
            f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}" for k, v in sorted((query or {}).items())
        )
        payload = hashlib.sha256(body).hexdigest()
        headers = {"host": url.netloc, "x-amz-content-sha256": payload, "x-amz-date": stamp}
        signed = ";".join(sorted(headers))
        canonical = "\n".join(
            [method, canonical_path, canonical_query, *(f"{k}:{headers[k]}" for k in sorted(headers)), "", signed, payload]
        )
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        key = _hmac(_hmac(_hmac(_hmac(f"AWS4{self.secret_key}".encode(), day), self.region), "s3"), "aws4_request")
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, SignedHeaders={signed}, Signature={signature}"
        )
        full_url = f"{url.scheme}://{url.netloc}{canonical_path}" + (f"?{canonical_query}" if canonical_query else "")
        request = urllib.request.Request(full_url, data=body or None, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            answer = exc.read().decode(errors="replace")
            raise S3Error(f"{method} {path}: HTTP {exc.code}: {answer[:300]}", exc.code, error_code(answer)) from None

    def create_bucket(self, bucket: str) -> bool:
        """Create ``bucket``; False when this owner already has it."""
        try:
            self._request("PUT", f"/{bucket}")
        except S3Error as exc:
            if exc.code == "BucketAlreadyOwnedByYou":
                return False
            raise
        return True

    def list(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key under ``prefix`` (ListObjectsV2, following continuation tokens)."""
        keys: list[str] = []
        token = None
        while True:
            query = {"list-type": "2", "prefix": prefix}
            if token:
                query["continuation-token"] = token
            root = ET.fromstring(self._request("GET", f"/{bucket}", query))
            keys += [element.text or "" for element in root.iter(f"{_S3_NS}Key")]
            token = root.findtext(f"{_S3_NS}NextContinuationToken")
            if not token:
                return keys

    def get(self, bucket: str, key: str) -> bytes:
        return self._request("GET", f"/{bucket}/{key}")

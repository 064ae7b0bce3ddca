"""S3 errors are told apart by their HTTP status and S3 error code, not by their message."""

from __future__ import annotations

import pytest

from streamstate_stack.s3 import S3, S3Error, error_code

OWNED = ('<?xml version="1.0" encoding="UTF-8"?><Error><Code>BucketAlreadyOwnedByYou</Code>'
         "<Message>Your previous request to create the named bucket succeeded</Message></Error>")


def test_the_error_code_is_read_from_the_response_body():
    assert error_code(OWNED) == "BucketAlreadyOwnedByYou"
    assert error_code("<html>Service Unavailable</html>") is None
    assert error_code("not xml") is None


def _failing(error: S3Error) -> S3:
    class Failing(S3):
        def _request(self, *_args, **_kwargs) -> bytes:
            raise error

    return Failing("http://127.0.0.1:1", "key", "secret")


def test_a_bucket_this_owner_has_is_recognised_by_its_code():
    assert _failing(S3Error("PUT /b: HTTP 409: ...", 409, "BucketAlreadyOwnedByYou")).create_bucket("b") is False


def test_the_code_s_name_in_a_message_is_not_the_code():
    with pytest.raises(S3Error):
        _failing(S3Error("PUT /b: HTTP 409: BucketAlreadyOwnedByYou, said a proxy", 409, None)).create_bucket("b")
    with pytest.raises(S3Error):
        _failing(S3Error("PUT /b: HTTP 409", 409, "BucketAlreadyExists")).create_bucket("b")

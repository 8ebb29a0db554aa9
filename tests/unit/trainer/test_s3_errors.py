"""Every failed S3 request becomes one line naming the object, the server and what to do: a full
server (SeaweedFS's InternalError after retries, MinIO's XMinioStorageFull), one that is down,
slow or untrusted, and boto3's transfer errors that wrap the botocore error."""

from __future__ import annotations

from typing import Any

import pytest
from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    SSLError,
)
from dflash_trainer.data.errors import is_user_fixable
from dflash_trainer.storage import s3_error

URI = "s3://dflash-demo/model/model.safetensors"
ENDPOINT = "http://127.0.0.1:9000"


def client_error(code: str, status: int, retries: int = 0, op: str = "PutObject") -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": "We encountered an internal error, please try again."},
        "ResponseMetadata": {"HTTPStatusCode": status, "RetryAttempts": retries},
    }
    return ClientError(response, op)


def upload_failed(inner: ClientError) -> S3UploadFailedError:
    """What boto3's upload_file raises: S3UploadFailedError, with the ClientError as context."""
    try:
        try:
            raise inner
        except ClientError as exc:
            raise S3UploadFailedError(f"Failed to upload /tmp/x to {URI}: {exc}") from None
    except S3UploadFailedError as outer:
        outer.__context__ = inner
        return outer


def one_line(text: str) -> str:
    assert "\n" not in text and "Traceback" not in text
    return text


def test_a_write_the_server_cannot_store_says_it_may_be_full_and_what_to_do() -> None:
    message = one_line(
        str(s3_error(URI, "uploading", client_error("InternalError", 500, 7), ENDPOINT))
    )
    assert message.startswith(
        f"uploading {URI} failed: the S3 server at {ENDPOINT} could not store it"
    )
    assert "(InternalError, HTTP 500, 8 attempts), as a full server does" in message
    assert message.endswith("free space on it or raise its quota, then retry the run")
    assert "(SeaweedFS: no writable volumes; MinIO: storage full)" in message
    # A full store is not the user's input: the Job may retry it (exit 1, not 2).
    assert not is_user_fixable(s3_error(URI, "uploading", client_error("InternalError", 500)))


def test_boto3s_upload_failed_error_is_unwrapped_to_the_servers_answer() -> None:
    error = upload_failed(client_error("InternalError", 500, 7))
    message = one_line(str(s3_error(URI, "uploading", error, ENDPOINT)))
    assert "could not store it (InternalError, HTTP 500, 8 attempts)" in message


def test_a_server_out_of_space_by_its_own_code_says_so() -> None:
    message = str(s3_error(URI, "writing", client_error("XMinioStorageFull", 507), ENDPOINT))
    assert f"the S3 server at {ENDPOINT} is out of space (XMinioStorageFull, HTTP 507)" in message


def test_a_read_the_server_fails_points_at_its_log_without_blaming_space() -> None:
    error = client_error("InternalError", 500, 7, op="GetObject")
    message = str(s3_error(URI, "reading", error, ENDPOINT))
    assert message == (
        f"reading {URI} failed: the S3 server at {ENDPOINT} answered InternalError, HTTP 500, "
        "8 attempts: see its log"
    )


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            EndpointConnectionError(endpoint_url=ENDPOINT),
            f"no S3 server answers at {ENDPOINT}: check that it runs and that storage.endpoint "
            "(AWS_ENDPOINT_URL) is right",
        ),
        (
            ConnectTimeoutError(endpoint_url=ENDPOINT),
            f"the S3 server at {ENDPOINT} did not answer in time",
        ),
        (
            SSLError(endpoint_url=ENDPOINT, error="certificate verify failed"),
            "check storage.caBundle",
        ),
        (NoCredentialsError(), "no S3 credentials: name a Secret"),
    ],
)
def test_a_request_no_server_answers_says_why_in_one_line(error: Exception, expected: str) -> None:
    message = one_line(str(s3_error(URI, "uploading", error, ENDPOINT)))
    assert message.startswith(f"uploading {URI} failed: ")
    assert expected in message


def test_without_an_endpoint_the_server_is_aws() -> None:
    message = str(s3_error(URI, "uploading", client_error("ServiceUnavailable", 503), ""))
    assert "failed: AWS S3 could not store it (ServiceUnavailable, HTTP 503)" in message


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("NoSuchKey", 404, f"{URI} does not exist"),
        ("NoSuchBucket", 404, f"bucket of {URI} does not exist"),
        ("AccessDenied", 403, f"access to {URI} was refused (AccessDenied)"),
    ],
)
def test_the_objects_and_the_credentials_answers_are_unchanged(
    code: str, status: int, expected: str
) -> None:
    error = s3_error(URI, "reading", client_error(code, status), ENDPOINT)
    assert str(error).startswith(expected)
    assert is_user_fixable(error)

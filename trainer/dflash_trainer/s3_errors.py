"""One line for every way an S3 request fails: what the server said (or that none answered),
what it most likely means, and what to do. `storage.s3_error` turns botocore and boto3
exceptions into these; the stage CLIs print them as their result, never a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Error codes an S3 server uses when it has no room left (MinIO, Ceph RGW, generic 507).
FULL_CODES = frozenset(
    {"XMinioStorageFull", "InsufficientStorage", "InsufficientCapacity", "QuotaExceeded", "507"}
)
# A server-side failure: after botocore's retries, most often a server that cannot store more.
SERVER_CODES = frozenset(
    {"InternalError", "ServiceUnavailable", "SlowDown", "500", "502", "503", "504"}
)
WRITE_ACTIONS = frozenset({"writing", "uploading", "copying"})
FULL_ADVICE = "free space on it or raise its quota, then retry the run"


@dataclass(frozen=True)
class Answer:
    """What an S3 server answered: its error code, HTTP status and the attempts made."""

    code: str
    status: int | None
    attempts: int


def answer_of(exc: Any) -> Answer | None:
    """The server's answer inside a botocore ClientError (None for any other exception)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    meta = response.get("ResponseMetadata") or {}
    code = str((response.get("Error") or {}).get("Code") or "")
    status = meta.get("HTTPStatusCode")
    return Answer(code, int(status) if status else None, int(meta.get("RetryAttempts") or 0) + 1)


def unwrap(exc: BaseException) -> BaseException:
    """boto3's transfer errors (S3UploadFailedError, RetriesExceededError) wrap the botocore
    error that says what happened; return that one."""
    seen: set[int] = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        inner = getattr(exc, "last_exception", None) or exc.__cause__ or exc.__context__
        if inner is None or answer_of(exc) is not None or _is_botocore(exc):
            return exc
        exc = inner
    return exc


def _is_botocore(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("botocore")


def where(endpoint: str | None) -> str:
    return f"the S3 server at {endpoint}" if endpoint else "AWS S3"


def describe_answer(action: str, uri: str, endpoint: str | None, answer: Answer) -> str:
    """The one line for an error answer that is not about the object or the credentials."""
    server = where(endpoint)
    said = answer.code or "no error code"
    if answer.status:
        said += f", HTTP {answer.status}"
    if answer.attempts > 1:
        said += f", {answer.attempts} attempts"
    if answer.code in FULL_CODES:
        return f"{action} {uri} failed: {server} is out of space ({said}): {FULL_ADVICE}"
    is_server = answer.code in SERVER_CODES or (answer.status or 0) >= 500
    if is_server and action in WRITE_ACTIONS:
        return (
            f"{action} {uri} failed: {server} could not store it ({said}), as a full server "
            f"does (SeaweedFS: no writable volumes; MinIO: storage full): {FULL_ADVICE}"
        )
    if is_server:
        return f"{action} {uri} failed: {server} answered {said}: see its log"
    return f"{action} {uri} failed: {said}"


def describe_transport(action: str, uri: str, endpoint: str | None, exc: BaseException) -> str:
    """The one line for a request no server answered: refused, timed out, TLS, credentials."""
    from botocore import exceptions as bx

    server = where(endpoint)
    check = "check that it runs and that storage.endpoint (AWS_ENDPOINT_URL) is right"
    if isinstance(exc, bx.SSLError):
        cause = str(getattr(exc, "kwargs", {}).get("error") or exc)
        return (
            f"{action} {uri} failed: TLS to {server} failed ({cause}): check storage.caBundle "
            "(AWS_CA_BUNDLE) and the server's certificate"
        )
    if isinstance(exc, bx.ConnectTimeoutError | bx.ReadTimeoutError):
        return f"{action} {uri} failed: {server} did not answer in time: {check}"
    if isinstance(exc, bx.EndpointConnectionError | bx.ConnectionClosedError):
        return f"{action} {uri} failed: no S3 server answers at {endpoint or 'AWS S3'}: {check}"
    if isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError):
        return (
            f"{action} {uri} failed: no S3 credentials: name a Secret with AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY in storage.credentialsSecretRef, or give the pods a cloud "
            "identity"
        )
    text = " ".join(str(exc).split())
    return f"{action} {uri} failed: {text or type(exc).__name__}"

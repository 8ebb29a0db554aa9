"""Credentials a crashing stage prints never reach status or events; ordinary messages pass
through unchanged."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from dflash_operator.plan.redaction import REDACTED, redact

FAKE_AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
FAKE_AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
FAKE_HF = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ012345"
FAKE_JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2EifQ.c2lnbmF0dXJlLXZhbHVl"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"botocore: InvalidAccessKeyId for {FAKE_AWS_ID}", FAKE_AWS_ID),
        (f"AWS_SECRET_ACCESS_KEY={FAKE_AWS_SECRET} python -m x", FAKE_AWS_SECRET),
        (f"aws_secret_access_key: '{FAKE_AWS_SECRET}'", FAKE_AWS_SECRET),
        (f"HfHubHTTPError 401 for token {FAKE_HF}", FAKE_HF),
        (f"HF_TOKEN={FAKE_HF}", FAKE_HF),
        (f"Authorization: Bearer {FAKE_JWT}", FAKE_JWT),
        ("GET https://alice:s3cr3t-pass@minio.local/bucket failed", "s3cr3t-pass"),
        ("{'password': 'hunter2hunter2'}", "hunter2hunter2"),
        ("api_key=sk-live-0123456789abcdef", "sk-live-0123456789abcdef"),
    ],
)
def test_known_credential_shapes_are_redacted(text: str, secret: str) -> None:
    cleaned = redact(text)
    assert secret not in cleaned
    assert REDACTED in cleaned


@pytest.mark.parametrize(
    "text",
    [
        "tokenize finished: 200 samples, 90k tokens (0 supervised), 0 truncated",
        "Retry of regen requested by annotation dflash.dev/retry=now; starting attempt 2",
        "stub_rate 87.0% in openorca (limit 5.0%, overall 31.0%)",
        "Could not create Job r1-regen: jobs.batch is forbidden: exceeded quota: gpu",
        "regen failed on attempt 1: exit 1: CUDA error: out of memory (s3://bucket/run/regen/)",
        "credentialsSecretRef s3-creds has no key AWS_ACCESS_KEY_ID",
    ],
)
def test_ordinary_messages_are_unchanged(text: str) -> None:
    assert redact(text) == text


def test_a_failing_pod_that_prints_a_secret_leaves_no_trace_in_status_or_events(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    world.step()
    crash = f"Traceback ...\nbotocore.exceptions.ClientError: key {FAKE_AWS_ID} token={FAKE_HF}"
    world.finish("r1-regen", ok=False, result={"ok": False, "message": crash})
    world.step()
    seen = repr(world.status) + repr(world.events())
    assert FAKE_AWS_ID not in seen and FAKE_HF not in seen
    assert REDACTED in seen

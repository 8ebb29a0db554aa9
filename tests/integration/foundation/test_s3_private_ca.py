"""On-prem S3 behind a private CA: the real S3 server over HTTPS with a certificate from a
test CA (trustme). Stage code reaches it with AWS_CA_BUNDLE (what spec.storage.caBundle
sets in every stage pod), and without it fails on the certificate, saying so."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from dflash_dev import s3server

NAME = "s3-tls"
ROUND_TRIP = (
    "from dflash_trainer import storage; import sys; uri = sys.argv[1]; "
    "storage.write_json(uri, {'ok': True}); print(storage.read_json(uri))"
)


@pytest.fixture(scope="module")
def tls_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[s3server.S3Info]:
    folder: Path = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca_file, cert_file, key_file = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    cert.private_key_pem.write_to_path(str(key_file))
    cert_file.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    tls = s3server.TlsFiles(cert=str(cert_file), key=str(key_file), ca=str(ca_file))
    info = s3server.up("private", name=NAME, tls=tls)
    yield info
    s3server.down(NAME)


def _round_trip(env: dict[str, str], uri: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", ROUND_TRIP, uri],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_stage_code_reaches_https_s3_through_the_ca_bundle(tls_s3: s3server.S3Info) -> None:
    assert tls_s3.endpoint_url.startswith("https://")
    env = {**os.environ, **tls_s3.env()}
    assert env["AWS_CA_BUNDLE"] == tls_s3.ca_bundle
    result = _round_trip(env, f"s3://{tls_s3.bucket}/ca/ok.json")
    assert result.returncode == 0, result.stderr
    assert "{'ok': True}" in result.stdout


def test_without_the_ca_bundle_the_certificate_is_refused(tls_s3: s3server.S3Info) -> None:
    env = {k: v for k, v in {**os.environ, **tls_s3.env()}.items() if k != "AWS_CA_BUNDLE"}
    result = _round_trip(env, f"s3://{tls_s3.bucket}/ca/refused.json")
    assert result.returncode != 0
    assert "CERTIFICATE_VERIFY_FAILED" in result.stderr or "certificate verify failed" in (
        result.stderr
    ), result.stderr[-2000:]

"""A throw-away PKI for the local control plane: CA, serving cert, client certs, SA key."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

VALIDITY = dt.timedelta(days=365)
# 2048-bit RSA: fast to generate (tens of ms) and accepted by every Kubernetes component.
KEY_BITS = 2048


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)


def _write_key(path: Path, key: rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def ensure_pki(pki: Path, client_names: dict[str, tuple[str, str | None]]) -> None:
    """Create (once) ca, apiserver serving cert, SA signing key and client certs.

    `client_names` maps a file stem to (common name, organization), e.g.
    `{"admin": ("admin", "system:masters")}`.
    """
    pki.mkdir(parents=True, exist_ok=True)
    if (pki / "ca.crt").exists() and all((pki / f"{stem}.crt").exists() for stem in client_names):
        return
    now = dt.datetime.now(dt.UTC)
    ca_key = _key()
    ca_name = _name("dflash-local-ca")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        # Key identifiers as RFC 5280 asks (and kubeadm's PKI has): Python >= 3.13 verifies
        # strictly (VERIFY_X509_STRICT) and refuses a chain without them.
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    authority = x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key())
    _write_key(pki / "ca.key", ca_key)
    _write_cert(pki / "ca.crt", ca)

    def issue(stem: str, cn: str, org: str | None, server: bool) -> None:
        key = _key()
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn, org))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(authority, critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.DNSName("kubernetes"),
                        x509.DNSName("kubernetes.default"),
                        x509.DNSName("kubernetes.default.svc"),
                        x509.DNSName("kubernetes.default.svc.cluster.local"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                        x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
                    ]
                ),
                critical=False,
            ).add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
        else:
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
            )
        _write_key(pki / f"{stem}.key", key)
        _write_cert(pki / f"{stem}.crt", builder.sign(ca_key, hashes.SHA256()))

    issue("apiserver", "kube-apiserver", None, server=True)
    for stem, (cn, org) in client_names.items():
        issue(stem, cn, org, server=False)
    _write_key(pki / "sa.key", _key())

"""`spec.storage`: the S3 location of a run's artifacts and how pods authenticate to it.

Credentials never appear in the spec: fields people reach for by habit (`secretAccessKey`,
...) exist in the schema only so that the API server can refuse them with a pointer to
`credentialsSecretRef`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field, StringConstraints

from dflash_operator.api.base import (
    BUCKET_PATTERN,
    MAX_NAME_LENGTH,
    ApiModel,
    DnsSubdomain,
    Endpoint,
    Rule,
    immutable,
    pattern_rule,
    refused,
)

# The run's artifacts (data, checkpoints, the drafter) live under the storage location: moving
# it mid-run would split them, and two roots would be written.
_WHERE = "the run's data, checkpoints and drafter live there"

DEFAULT_PREFIX = "dflash"
MAX_PREFIX_LENGTH = 512
MAX_REGION_LENGTH = 64
# Keys of the credentials Secret, as AWS SDKs read them from the environment.
DEFAULT_ACCESS_KEY_ID_KEY = "AWS_ACCESS_KEY_ID"
DEFAULT_SECRET_ACCESS_KEY_KEY = "AWS_SECRET_ACCESS_KEY"  # noqa: S105 (a key name)
SECRET_KEY_PATTERN = "^[-._a-zA-Z0-9]+$"  # noqa: S105 (a pattern)
PREFIX_PATTERN = "^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*$"
REGION_PATTERN = "^[a-z0-9-]+$"
# Names a user may try for an inline credential; each is refused with the same advice.
REFUSED_CREDENTIAL_FIELDS = (
    "accessKeyId",
    "secretAccessKey",
    "sessionToken",
    "accessKey",
    "secretKey",
)

Bucket = Annotated[
    str,
    StringConstraints(min_length=3, max_length=MAX_NAME_LENGTH),
    pattern_rule(
        BUCKET_PATTERN,
        "an S3 bucket name: 3-63 lowercase letters, digits, '.' and '-' (no s3:// in front)",
    ),
]
Prefix = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_PREFIX_LENGTH),
    pattern_rule(
        PREFIX_PATTERN,
        "a key prefix such as teams/ml/dflash: '/'-separated parts of letters, digits and "
        "!_.*'()- with no leading or trailing '/'",
    ),
]
SecretKeyName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=253),
    pattern_rule(SECRET_KEY_PATTERN, "a Secret data key: letters, digits, '-', '_' and '.'"),
]
Region = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_REGION_LENGTH),
    pattern_rule(REGION_PATTERN, "a region name such as us-east-1"),
]


class CleanupPolicy(StrEnum):
    """What happens to a run's S3 artifacts."""

    RETAIN = "Retain"
    # After success: delete regen/, tokenized/ and all checkpoints but the last.
    DELETE_INTERMEDIATE = "DeleteIntermediate"
    # When the DFlashRun is deleted: delete the whole run root.
    DELETE = "Delete"


class SecretRef(ApiModel):
    """A Secret in the run's namespace holding S3 credentials."""

    name: DnsSubdomain = Field(description="Name of the Secret, in the run's namespace.")
    access_key_id_key: SecretKeyName = Field(
        default=DEFAULT_ACCESS_KEY_ID_KEY,
        description="Key of the access key id in the Secret.",
    )
    secret_access_key_key: SecretKeyName = Field(
        default=DEFAULT_SECRET_ACCESS_KEY_KEY,
        description="Key of the secret access key in the Secret.",
    )


DEFAULT_HF_TOKEN_KEY = "HF_TOKEN"  # noqa: S105 - the name of a key, not a token


class HfTokenSecretRef(ApiModel):
    """A Secret in the run's namespace holding a Hugging Face access token."""

    name: DnsSubdomain = Field(description="Name of the Secret, in the run's namespace.")
    key: SecretKeyName = Field(
        default=DEFAULT_HF_TOKEN_KEY, description="Key of the token in the Secret."
    )


DEFAULT_CA_KEY = "ca.crt"


class CaBundleRef(ApiModel):
    """A PEM CA bundle in a ConfigMap or a Secret of the run's namespace."""

    rules = (
        Rule(
            rule="has(self.configMapName) != has(self.secretName)",
            message="name exactly one of configMapName and secretName",
            check=lambda ref: (ref.config_map_name is None) != (ref.secret_name is None),
        ),
    )

    config_map_name: DnsSubdomain | None = Field(
        default=None, description="ConfigMap holding the bundle (a CA is not secret)."
    )
    secret_name: DnsSubdomain | None = Field(
        default=None, description="Secret holding the bundle, where policy wants one."
    )
    key: SecretKeyName = Field(default=DEFAULT_CA_KEY, description="Key of the PEM bundle.")


class LocalObjectReference(ApiModel):
    """A `v1.LocalObjectReference`: an object of the run's namespace, by name."""

    name: DnsSubdomain = Field(description="Name of the object, in the run's namespace.")


_CREDENTIALS_ADVICE = (
    "credentials never go in a DFlashRun: put them in a Secret (keys AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY) and name it in spec.storage.credentialsSecretRef.name"
)


def _refuse(field: str) -> Rule:
    attribute = "".join("_" + c.lower() if c.isupper() else c for c in field)
    return Rule(
        rule=f"!has(self.{field})",
        message=f"{field} is not accepted: {_CREDENTIALS_ADVICE}",
        check=lambda storage: getattr(storage, attribute) is None,
        field_path=f".{field}",
    )


def _refused_field() -> Any:
    """A field that is only declared so that setting it is refused with a pointer to the Secret."""
    # No maxLength: a long session token must get the same advice, not "Too long".
    return Field(
        default=None,
        description="Refused: " + _CREDENTIALS_ADVICE + ".",
        json_schema_extra=refused("credentialsSecretRef"),
    )


class StorageSpec(ApiModel):
    """Where the run keeps its data, checkpoints and drafter.

    The run's root is s3://<bucket>/<prefix>/<namespace>/<run>/<uid>/.
    """

    rules = tuple(_refuse(field) for field in REFUSED_CREDENTIAL_FIELDS)

    bucket: Annotated[Bucket, immutable("storage.bucket", _WHERE)] = Field(
        description="S3 bucket of the run's artifacts (just the name). Immutable."
    )
    prefix: Annotated[Prefix, immutable("storage.prefix", _WHERE)] = Field(
        default=DEFAULT_PREFIX,
        description=(
            "Key prefix inside the bucket; the run's root is <prefix>/<namespace>/<run>/<uid>/. "
            "Immutable."
        ),
    )
    endpoint: Annotated[Endpoint | None, immutable("storage.endpoint", _WHERE)] = Field(
        default=None,
        description=(
            "S3 endpoint URL for S3-compatible stores (MinIO, SeaweedFS, Ceph, R2). Unset: AWS S3."
        ),
    )
    region: Region | None = Field(
        default=None, description="S3 region. Unset: the SDK's default (us-east-1)."
    )
    path_style: bool = Field(
        default=False,
        description=(
            "Address the bucket in the path (endpoint/bucket/key), as most S3-compatible "
            "stores need."
        ),
    )
    credentials_secret_ref: SecretRef | None = Field(
        default=None,
        description=(
            "Secret with the S3 credentials, passed to pods as environment variables. "
            "Unset: pods use their ambient credentials (e.g. IRSA or workload identity)."
        ),
    )
    ca_bundle: CaBundleRef | None = Field(
        default=None,
        description=(
            "CA bundle (PEM) that signed the S3 endpoint's certificate, for on-prem S3 with a "
            "private CA: mounted read-only in every stage pod, and AWS_CA_BUNDLE points at it. "
            "Unset: the image's system CAs."
        ),
    )
    cleanup_policy: CleanupPolicy = Field(
        default=CleanupPolicy.RETAIN,
        description=(
            "Retain: keep every artifact. DeleteIntermediate: after success, a <run>-prune Job "
            "deletes regenerated and tokenized data and all checkpoints but the last, keeping "
            "final/, audit/ and eval/ (condition CleanedUp). Delete: when the DFlashRun is "
            "deleted, a <run>-cleanup Job deletes its whole S3 root first."
        ),
    )
    access_key_id: str | None = _refused_field()
    secret_access_key: str | None = _refused_field()
    session_token: str | None = _refused_field()
    access_key: str | None = _refused_field()
    secret_key: str | None = _refused_field()

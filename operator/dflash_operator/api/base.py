"""Building blocks of the DFlashRun models: the camelCase base model, CEL rules that also
run in Python, and the shared string types (URIs, DNS names, images, quantities).

A rule is written once here as CEL (for the API server) next to its Python twin (for the
operator and unit tests); `schema.py` turns the models into the CRD's OpenAPI schema.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    StringConstraints,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

# The error type of a failed rule; `validation.py` reads `field_path` from its context.
RULE_ERROR = "dflash_rule"
# Extension keys the CRD keeps; any other `x-` key is ours and is stripped from the CRD.
CEL_KEY = "x-kubernetes-validations"
# Pattern rules say "not accepted; use <what is>".
PATTERN_MESSAGE_PREFIX = "not accepted; use "
# Marks a field that exists only to be refused with a helpful message (see `refused`).
REFUSED_KEY = "x-dflash-refused"


@dataclass(frozen=True)
class Rule:
    """A CEL validation rule and its Python twin.

    `rule` runs in the API server (`x-kubernetes-validations`); `check` is the same predicate
    in Python, run by pydantic; `field_path` (relative, e.g. ".targetLayerIds") points the
    error at a field below the object the rule is attached to. `describe` builds the
    Python message with the offending value in it (CEL message expressions that quote
    values are over the API server's cost budget, so the CEL message is static).
    """

    rule: str
    message: str
    check: Callable[[Any], bool] | None = None
    field_path: str | None = None
    describe: Callable[[Any], str] | None = None

    def to_schema(self) -> dict[str, str]:
        out = {"rule": self.rule, "message": self.message}
        if self.field_path:
            out["fieldPath"] = self.field_path
        return out

    def python_message(self, value: Any) -> str:
        return self.describe(value) if self.describe else self.message

    def fail(self, value: Any) -> PydanticCustomError:
        message = self.python_message(value)
        return PydanticCustomError(
            RULE_ERROR, "{message}", {"message": message, "field_path": self.field_path or ""}
        )

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        """Used as `Annotated[T, Rule(...)]`: validate the field with `check`."""
        check = self.check

        def run(value: Any) -> Any:
            if check is not None and not check(value):
                raise self.fail(value)
            return value

        return core_schema.no_info_after_validator_function(run, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        out = handler(schema)
        out.setdefault(CEL_KEY, []).append(self.to_schema())
        return out


# The longest deadline accepted for a stage or a run: 30 days.
MAX_DEADLINE_SECONDS = 30 * 24 * 3600


def stage_deadline(stage: str) -> Any:
    """`activeDeadlineSeconds` of a stage's Job / PyTorchJob (unset: none)."""
    return Field(
        default=None,
        ge=60,
        le=MAX_DEADLINE_SECONDS,
        description=(
            f"Longest time {stage} may run (Job / PyTorchJob activeDeadlineSeconds; the clock "
            "stops while suspended or queued). Past it the stage's pods are stopped and the run "
            "fails, naming the stage. Unset: no limit."
        ),
    )


def immutable(field: str, why: str = "it defines what every stage has produced") -> Rule:
    """A transition rule: the field may not change once the run exists."""
    return Rule(
        rule="self == oldSelf",
        message=(
            f"spec.{field} is immutable once the run is created, because {why}; create a new "
            "DFlashRun to change it"
        ),
    )


class ApiModel(BaseModel):
    """camelCase in YAML, snake_case in Python; unknown fields are errors; rules are checked.

    Subclasses list object-level rules in `rules`; they go to the CRD as CEL and are
    checked here after field validation (the first failing rule is reported).
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
    )
    rules: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _check_rules(self) -> ApiModel:
        for rule in type(self).rules:
            if rule.check is not None and not rule.check(self):
                raise rule.fail(self)
        return self

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        out = handler(schema)
        target = handler.resolve_ref_schema(out)
        own_rules = cls.__dict__.get("rules", ())
        if own_rules:
            target[CEL_KEY] = [rule.to_schema() for rule in own_rules]
        return out

    def to_api(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase keys, unset optionals left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def cel_quote(text: str) -> str:
    """`text` as a single-quoted CEL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def pattern_rule(regex: str, accepted: str) -> Rule:
    """A string must fully match `regex` (RE2 syntax, no backslashes: CEL and Python agree).

    The API server prints the offending value before the message; Python quotes it too.
    """
    if "\\" in regex:
        raise ValueError("write character classes ([.]) instead of escapes in rule patterns")
    compiled = re.compile(regex)
    return Rule(
        rule=f"self.matches({cel_quote(regex)})",
        message=f"{PATTERN_MESSAGE_PREFIX}{accepted}",
        check=lambda value: compiled.fullmatch(value) is not None,
        describe=lambda value: f'"{value}" is {PATTERN_MESSAGE_PREFIX}{accepted}',
    )


def refused(instead: str) -> dict[str, Any]:
    """`json_schema_extra` for a field that exists only so its use gets a helpful message."""
    return {REFUSED_KEY: instead}


# --- shared string types ---------------------------------------------------------------------
_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_LABEL_PATTERN = f"^{_LABEL}$"
DNS_SUBDOMAIN_PATTERN = f"^{_LABEL}([.]{_LABEL})*$"
# S3 bucket names: 3-63 lowercase letters, digits, dots and hyphens.
_BUCKET = "[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"
BUCKET_PATTERN = f"^{_BUCKET}$"
_PVC = f"pvc://{_LABEL}(/[^ ]*)?"
_HF_ID = "[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?"
MODEL_URI_PATTERN = f"^(s3://{_BUCKET}/[^ ]+|{_PVC}|{_HF_ID})$"
DATA_URI_PATTERN = f"^(s3://{_BUCKET}/[^ ]+|{_PVC})$"
IMAGE_PATTERN = "^[a-z0-9][A-Za-z0-9._/:@-]*$"
ENDPOINT_PATTERN = "^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[^ ]*)?$"
REVISION_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._/-]*$"
# Kubernetes resource.Quantity (the API server checks it with CEL `isQuantity`).
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

# Bounds the CEL cost of parsing a quantity; "1500Mi" needs 6.
MAX_QUANTITY_LENGTH = 64
QUANTITY_MESSAGE = "not a Kubernetes quantity; accepted: e.g. 8, 500m, 64Gi"

MAX_NAME_LENGTH = 63
MAX_SUBDOMAIN_LENGTH = 253
MAX_URI_LENGTH = 1024
MAX_IMAGE_LENGTH = 512


def _bounded(max_length: int) -> StringConstraints:
    return StringConstraints(min_length=1, max_length=max_length)


DnsLabel = Annotated[
    str,
    _bounded(MAX_NAME_LENGTH),
    pattern_rule(
        DNS_LABEL_PATTERN,
        "lowercase letters, digits and '-', starting and ending with a letter or digit "
        f"(a DNS label, at most {MAX_NAME_LENGTH} characters)",
    ),
]
DnsSubdomain = Annotated[
    str,
    _bounded(MAX_SUBDOMAIN_LENGTH),
    pattern_rule(
        DNS_SUBDOMAIN_PATTERN,
        "a Kubernetes object name: lowercase letters, digits, '-' and '.', starting and "
        "ending with a letter or digit",
    ),
]
NodePoolName = DnsLabel
ModelUri = Annotated[
    str,
    _bounded(MAX_URI_LENGTH),
    pattern_rule(
        MODEL_URI_PATTERN,
        "a Hugging Face model id (org/name), s3://<bucket>/<path> or pvc://<claim>/<path>",
    ),
]
DataUri = Annotated[
    str,
    _bounded(MAX_URI_LENGTH),
    pattern_rule(DATA_URI_PATTERN, "s3://<bucket>/<key> or pvc://<claim>/<path>"),
]
Image = Annotated[
    str,
    _bounded(MAX_IMAGE_LENGTH),
    pattern_rule(IMAGE_PATTERN, "a container image reference such as ghcr.io/org/image:tag"),
]
Endpoint = Annotated[
    str,
    _bounded(MAX_URI_LENGTH),
    pattern_rule(
        ENDPOINT_PATTERN, "an http:// or https:// URL, e.g. https://s3.us-east-1.amazonaws.com"
    ),
]
Revision = Annotated[
    str,
    _bounded(255),
    pattern_rule(REVISION_PATTERN, "a branch, tag or commit id such as main or 3f2a9c1"),
]


class _QuantityMarker:
    """int-or-string, as the API server stores `resource.Quantity` (e.g. 8, "500m", "64Gi")."""

    _compiled = re.compile(QUANTITY_PATTERN)

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        def check(value: int | str) -> int | str:
            if isinstance(value, str) and not self._compiled.fullmatch(value):
                raise PydanticCustomError(
                    RULE_ERROR, "{message}", {"message": QUANTITY_MESSAGE, "field_path": ""}
                )
            return value

        return core_schema.no_info_after_validator_function(check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # CEL rather than `pattern`, for a message a person can read.
        return {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "maxLength": MAX_QUANTITY_LENGTH,
            "x-kubernetes-int-or-string": True,
            CEL_KEY: [
                {
                    "rule": "type(self) == int || isQuantity(self)",
                    "message": QUANTITY_MESSAGE,
                }
            ],
        }


Quantity = Annotated[int | str, _QuantityMarker()]


def nested(model: type[BaseModel], description: str) -> Any:
    """A sub-object that may be left out: it then gets every default of its own fields.

    The CRD's default is the fully defaulted object, not `{}`, because the API server
    checks a default against the CEL rules as it is written, before nested defaulting.
    """
    default = model().model_dump(mode="json", by_alias=True, exclude_none=True)
    return Field(
        default_factory=model, description=description, json_schema_extra={"default": default}
    )

"""docs/crd-reference.md covers every field a user can set, with its default."""

from __future__ import annotations

from dflash_operator.api.crd import build_root_schema
from dflash_operator.api.reference import build_reference
from dflash_operator.api.schema import iter_fields
from dflash_operator.api.spec_storage import REFUSED_CREDENTIAL_FIELDS

REFERENCE = build_reference()
SPEC = build_root_schema()["properties"]["spec"]


def _section(title: str) -> str:
    """The text under a heading, up to the next sub-heading."""
    marker = "\n## spec\n" if title == "spec" else f"\n### {title}\n"
    assert marker in REFERENCE, f"no section for {title}"
    return REFERENCE.split(marker, 1)[1].split("\n### ", 1)[0]


def test_every_spec_field_has_a_row_in_its_section() -> None:
    missing = [
        path
        for path, _ in iter_fields(SPEC, "spec")
        if not path.endswith(("[]", ".*"))
        and path.rpartition(".")[2] not in REFUSED_CREDENTIAL_FIELDS
        and f"| `{path.rpartition('.')[2]}` |" not in _section(path.rpartition(".")[0])
    ]
    assert missing == []


def test_defaults_are_shown() -> None:
    assert "| `blockSize` | integer |  | `16` |" in REFERENCE
    assert "| `learningRate` | number |  | `0.0006` |" in REFERENCE


def test_refused_credential_fields_are_explained_not_listed_as_fields() -> None:
    assert "| `secretAccessKey` |" not in REFERENCE
    assert "`secretAccessKey`" in REFERENCE and "credentialsSecretRef" in REFERENCE


def test_the_name_limit_and_the_vocabulary_are_documented() -> None:
    for text in ("at most **36**", "`AuditFailed`", "`DataAuditPassed`", "`dflash.dev/retry`"):
        assert text in REFERENCE

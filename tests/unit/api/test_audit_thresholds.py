"""spec.audit and the trainer's audit thresholds stay the same checks with the same defaults.

The trainer module is imported here only: the operator never imports dflash_trainer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dflash_operator.api.spec_audit import (
    SETTING_FIELDS,
    AuditSpec,
    check_of,
    threshold_field_path,
)
from dflash_trainer.data.audit.checks import CHECKS, Check, build_violation
from dflash_trainer.data.audit.thresholds import SETTINGS, Thresholds
from pydantic import BaseModel

# Not a user setting in the CRD: the operator derives it from spec.target.thinking.
DERIVED = {"expect_thinking"}


def _fields(model: type[BaseModel]) -> dict[str, Any]:
    return {
        name: (info.default, [repr(m) for m in info.metadata])
        for name, info in model.model_fields.items()
    }


def _crd_thresholds() -> dict[str, Any]:
    out = {}
    for name, value in _fields(AuditSpec).items():
        if name in ("prompts", "completions", "tokens", "likelihood"):
            out.update(_fields(AuditSpec.model_fields[name].annotation))  # type: ignore[arg-type]
        elif name not in ("node_pool", "active_deadline_seconds", "resources"):  # the pods'
            out[name] = value
    return out


def test_every_trainer_threshold_is_in_spec_audit_with_the_same_default_and_bounds() -> None:
    trainer = {k: v for k, v in _fields(Thresholds).items() if k not in DERIVED}
    assert _crd_thresholds() == trainer


def test_the_rendered_thresholds_file_is_read_by_the_trainer_unchanged() -> None:
    spec = AuditSpec.model_validate({"maxStubRate": 0.2, "tokens": {"minSupervisedTokens": 5}})

    parsed = Thresholds.model_validate(spec.thresholds_file(expect_thinking=False))

    assert parsed.max_stub_rate == 0.2
    assert parsed.min_supervised_tokens == 5
    assert parsed.expect_thinking is False
    assert parsed.max_duplicate_rate == Thresholds().max_duplicate_rate


# --- one vocabulary: check name <-> threshold field ------------------------------------------
DOCS = Path(__file__).resolve().parents[3] / "docs" / "audit-gates.md"


def _threshold_fields() -> set[str]:
    return set(Thresholds.model_fields) - SETTINGS


def test_every_audit_threshold_bounds_a_check_and_every_check_has_a_threshold_field() -> None:
    used = {check.threshold for check in CHECKS}
    assert used == _threshold_fields()
    assert SETTING_FIELDS == SETTINGS - DERIVED


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: f"{c.gate}:{c.name}")
def test_a_checks_threshold_is_named_after_it(check: Check) -> None:
    if check.name == "source_samples":  # the per-source form of `samples`
        assert check.threshold == "min_samples"
    else:
        assert check.threshold == f"{check.kind}_{check.name}"
        assert check_of(check.threshold) == check.name


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: f"{c.gate}:{c.name}")
def test_status_names_the_spec_field_of_every_checks_threshold(check: Check) -> None:
    path = threshold_field_path(check.threshold_field)
    assert path is not None and path.endswith("." + check.threshold_field)
    node: Any = AuditSpec()
    for part in path.removeprefix("spec.audit.").split("."):
        alias = {info.alias: name for name, info in type(node).model_fields.items()}[part]
        node = getattr(node, alias)
    assert node == getattr(Thresholds(), check.threshold)


def test_each_spec_audit_threshold_description_names_its_check() -> None:
    fields = dict(AuditSpec.model_fields)
    for group in ("prompts", "completions", "tokens", "likelihood"):
        fields.update(AuditSpec.model_fields[group].annotation.model_fields)  # type: ignore[union-attr]
    for name in _threshold_fields():
        assert f"Check: {check_of(name)}" in (fields[name].description or ""), name


def test_the_audit_gates_doc_maps_every_check_to_its_spec_field() -> None:
    text = DOCS.read_text()
    for check in CHECKS:
        row = f"| `{check.name}` | `{threshold_field_path(check.threshold_field)}` |"
        assert row in text, row


def test_a_violation_reports_its_threshold_field() -> None:
    stub = next(c for c in CHECKS if c.name == "stub_rate")
    violation = build_violation(stub, 0.87, 0.05, True, {"openorca": 0.87})
    assert violation.to_dict()["thresholdField"] == "maxStubRate"

"""spec.audit and the trainer's audit thresholds stay the same checks with the same defaults.

The trainer module is imported here only: the operator never imports dflash_trainer.
"""

from __future__ import annotations

from typing import Any

from dflash_operator.api.spec_audit import AuditSpec
from dflash_trainer.data.audit.thresholds import Thresholds
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
        if name in ("prompts", "completions", "tokens"):
            out.update(_fields(AuditSpec.model_fields[name].annotation))  # type: ignore[arg-type]
        elif name != "node_pool":
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

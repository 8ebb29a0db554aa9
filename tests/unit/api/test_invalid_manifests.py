"""Every invalid manifest of the shared table is refused by the models too, naming the field."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from dflash_operator.api import SpecError, parse_run

CASES_MODULE = Path(__file__).parents[2] / "integration" / "api" / "manifest_cases.py"
# The issue asks for a table of at least 30 invalid manifests.
MIN_CASES = 30


def _load_cases_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("manifest_cases", CASES_MODULE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("manifest_cases", module)
    spec.loader.exec_module(module)
    return module


cases_module = _load_cases_module()
CASES = cases_module.load_cases()
PYTHON_CASES = [case for case in CASES if not case.server_only]


def test_the_table_holds_at_least_thirty_distinct_mistakes() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) >= MIN_CASES
    assert len(set(ids)) == len(ids)


def test_the_base_manifest_of_the_table_is_valid() -> None:
    run = parse_run(cases_module.base_manifest())
    assert run.spec.drafter.target_layer_ids == [1, 9, 17, 25, 33]


@pytest.mark.parametrize("case", PYTHON_CASES, ids=[case.id for case in PYTHON_CASES])
def test_the_models_refuse_the_manifest_with_a_message_naming_the_field(case: object) -> None:
    with pytest.raises(SpecError) as caught:
        parse_run(case.manifest)  # type: ignore[attr-defined]
    message = str(caught.value)
    assert case.python_field in message  # type: ignore[attr-defined]
    assert "Traceback" not in message and "pydantic" not in message.lower()

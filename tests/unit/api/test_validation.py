"""Users' mistakes come back as one readable line per field, never as a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from dflash_operator.api import SpecError, parse_run, parse_spec
from dflash_operator.api.annotations import AnnotationError, is_new_retry, parse_approvals
from dflash_operator.api.constants import Gate
from dflash_operator.api.reference import MINIMAL_EXAMPLE

EXAMPLES = Path(__file__).parents[3] / "examples"
MINIMAL = yaml.safe_load(MINIMAL_EXAMPLE)


def test_the_minimal_example_of_the_reference_is_valid_and_gets_the_paper_defaults() -> None:
    run = parse_run(MINIMAL)
    assert run.spec.drafter.block_size == 16
    assert run.spec.training.epochs == 6
    assert run.spec.training.learning_rate == pytest.approx(6e-4)
    assert run.spec.training.anchors_per_sequence == 512
    assert run.spec.tokenization.max_seq_len == 3072


def test_several_mistakes_are_all_reported_with_their_paths_and_values() -> None:
    spec = {**MINIMAL["spec"], "drafter": {"blockSize": 1, "numLayers": 0}}
    with pytest.raises(SpecError) as caught:
        parse_spec(spec)
    assert caught.value.problems == [
        "spec.drafter.blockSize: 1 is not accepted: Input should be greater than or equal to 2",
        "spec.drafter.numLayers: 0 is not accepted: Input should be greater than or equal to 1",
    ]


def test_a_spec_that_is_not_a_mapping_is_refused_with_a_message() -> None:
    with pytest.raises(SpecError, match="spec"):
        parse_spec(["not", "a", "mapping"])


def test_strings_are_not_silently_turned_into_numbers_or_booleans() -> None:
    spec = {**MINIMAL["spec"], "training": {"epochs": "6"}}
    with pytest.raises(SpecError, match=r"spec\.training\.epochs"):
        parse_spec(spec)


def test_long_values_are_shortened_in_messages() -> None:
    spec = {**MINIMAL["spec"], "suspend": "x" * 500}
    with pytest.raises(SpecError) as caught:
        parse_spec(spec)
    assert len(caught.value.problems[0]) < 200


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_is_a_valid_dflashrun(path: Path) -> None:
    parse_run(yaml.safe_load(path.read_text()))


def test_the_production_example_is_the_incident_run() -> None:
    run = parse_run(yaml.safe_load((EXAMPLES / "qwen3.6-27b.yaml").read_text()))
    assert run.spec.target.model == "Qwen/Qwen3.6-27B" and run.spec.target.thinking
    assert run.spec.drafter.target_layer_ids == [1, 16, 31, 46, 61]
    assert (run.spec.drafter.block_size, run.spec.drafter.mask_token_id) == (16, 248070)
    assert run.spec.regeneration.node_pool == "b200"
    training = run.spec.training
    assert (training.node_pool, training.nodes, training.gpus_per_node) == ("rtx-pro-6000", 2, 4)


def test_the_demo_example_runs_on_cpu_with_the_transformers_engine() -> None:
    run = parse_run(yaml.safe_load((EXAMPLES / "tiny-cpu.yaml").read_text()))
    assert run.spec.regeneration.engine.value == "transformers"
    pools = {
        run.spec.regeneration.node_pool,
        run.spec.tokenization.node_pool,
        run.spec.audit.node_pool,
        run.spec.training.node_pool,
        run.spec.evaluation.node_pool,
    }
    assert pools == {"cpu"}
    assert run.spec.training.nodes == 2


def test_approvals_name_a_gate_and_a_generation() -> None:
    approvals = parse_approvals("completions@3, tokens@5")
    assert [(a.gate, a.generation) for a in approvals] == [(Gate.COMPLETIONS, 3), (Gate.TOKENS, 5)]
    assert str(approvals[0]) == "completions@3"


@pytest.mark.parametrize("value", ["completions", "stubs@3", "tokens@latest", ""])
def test_a_malformed_approval_is_refused_with_the_accepted_form(value: str) -> None:
    with pytest.raises(AnnotationError, match="<gate>@<generation>"):
        parse_approvals(value)


def test_a_retry_is_new_only_once_per_value() -> None:
    assert is_new_retry("2026-05-01T12:00", None)
    assert not is_new_retry("2026-05-01T12:00", "2026-05-01T12:00")
    assert not is_new_retry(None, "x") and not is_new_retry("  ", None)

"""Child names fit every name Kubernetes derives from them, for the longest accepted run name."""

from __future__ import annotations

import re

import pytest
from dflash_operator.api.constants import Stage
from dflash_operator.api.naming import (
    CHILD_SHAPES,
    DNS_1035_LABEL_PATTERN,
    DNS_LABEL_MAX_LENGTH,
    MAX_ATTEMPT,
    MAX_RUN_NAME_LENGTH,
    MAX_SHARDS,
    MAX_TRAINING_NODES,
    check_run_name,
    child_name,
    longest_child_stage,
)

LONGEST_RUN = "r" * MAX_RUN_NAME_LENGTH


def _derived_names(job: str, stage: Stage) -> list[str]:
    """The names Kubernetes creates for a child `job`, worst case, written out by hand."""
    kind = CHILD_SHAPES[stage].kind
    if kind == "PyTorchJob":
        return [f"{job}-master-0", f"{job}-worker-{MAX_TRAINING_NODES - 2}"]
    if stage in (Stage.REGEN, Stage.TOKENIZE):
        return [f"{job}-{MAX_SHARDS - 1}", f"{job}-{MAX_SHARDS - 1}-abcde"]
    if kind == "Job":
        return [f"{job}-abcde"]
    return [job]


@pytest.mark.parametrize("stage", list(Stage), ids=[s.value for s in Stage])
def test_every_name_derived_from_the_longest_run_name_is_a_dns_label(stage: Stage) -> None:
    attempt = MAX_ATTEMPT if CHILD_SHAPES[stage].has_attempts else 1
    for name in [
        child_name(LONGEST_RUN, stage, attempt),
        *_derived_names(child_name(LONGEST_RUN, stage, attempt), stage),
    ]:
        assert len(name) <= DNS_LABEL_MAX_LENGTH, name
        assert re.fullmatch(DNS_1035_LABEL_PATTERN, name), name


def test_one_more_character_would_overflow_the_longest_child() -> None:
    stage = longest_child_stage()
    job = child_name(LONGEST_RUN + "r", stage, MAX_ATTEMPT)
    assert max(len(n) for n in _derived_names(job, stage)) == DNS_LABEL_MAX_LENGTH + 1


def test_the_limit_is_36_characters_set_by_the_completions_audit() -> None:
    assert longest_child_stage() is Stage.AUDIT_COMPLETIONS
    assert MAX_RUN_NAME_LENGTH == 36


def test_first_attempts_have_no_suffix_and_retries_do() -> None:
    assert child_name("run", Stage.TRAIN) == "run-train"
    assert child_name("run", Stage.TRAIN, 2) == "run-train-2"
    assert child_name("run", Stage.AUDIT_COMPLETIONS, 99) == "run-audit-completions-99"


@pytest.mark.parametrize("attempt", [0, 100])
def test_an_attempt_outside_1_to_99_is_refused(attempt: int) -> None:
    with pytest.raises(ValueError, match="attempt"):
        child_name("run", Stage.REGEN, attempt)


def test_stages_with_a_single_child_refuse_retries() -> None:
    with pytest.raises(ValueError, match="single child"):
        child_name("run", Stage.CONFIG, 2)


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        (LONGEST_RUN, None),
        (LONGEST_RUN + "r", "at most 36 characters"),
        ("qwen3.6-27b", "DNS-1035"),
        ("8b-drafter", "starting with a letter"),
        ("drafter-", "ending with a letter or digit"),
    ],
)
def test_run_names_are_checked_with_a_message_quoting_the_name(
    name: str, problem: str | None
) -> None:
    message = check_run_name(name)
    if problem is None:
        assert message is None
    else:
        assert message is not None and problem in message and repr(name) in message

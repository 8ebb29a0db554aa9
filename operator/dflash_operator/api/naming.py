"""Names of a run's children (`<run>-<stage>[-<attempt>]`) and the longest run name they allow.

Every name a child leads to (Job pods, PyTorchJob and TrainJob pods, Services and hostnames)
must stay a DNS-1035 label of at most 63 characters, so the limit on `metadata.name` is derived
here, from the longest child, and enforced by the CRD (CEL on `metadata.name`) and by
`check_run_name`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dflash_operator.api.constants import Stage

# A DNS-1035 label: Services (one per PyTorchJob replica) and hostnames need it.
DNS_LABEL_MAX_LENGTH = 63
DNS_1035_LABEL_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# Attempts are numbered 1..99; the first has no suffix, so "-99" is the longest suffix.
MAX_ATTEMPT = 99
# Regeneration shards are Indexed Job completions: index 0..9999 is at most 4 digits.
MAX_SHARDS = 10_000
# PyTorchJob replicas: one Master + (nodes - 1) Workers; worker index at most 3 digits.
MAX_TRAINING_NODES = 512
# The Job controller names pods `<generateName><5 random chars>`.
RANDOM_SUFFIX_LENGTH = 5


@dataclass(frozen=True)
class ChildShape:
    """How a stage's child turns its own name into the longest name it creates."""

    kind: str
    has_attempts: bool
    # The longest suffix appended to the child's name by its controller.
    longest_suffix: str


def _digits(count: int) -> int:
    return len(str(count - 1))


_RANDOM = "x" * RANDOM_SUFFIX_LENGTH
# Indexed Jobs: pods `<job>-<index>-<random>`, hostname `<job>-<index>`.
_INDEXED_JOB_POD = f"-{'9' * _digits(MAX_SHARDS)}-{_RANDOM}"
# Plain Jobs: pods `<job>-<random>`.
_JOB_POD = f"-{_RANDOM}"
# PyTorchJob: pods and Services `<job>-master-0` and `<job>-worker-<i>`.
_PYTORCHJOB_REPLICA = f"-worker-{'9' * _digits(MAX_TRAINING_NODES - 1)}"
# TrainJob: its JobSet's one Indexed Job `<job>-node-0`, pod hostnames `<job>-node-0-<i>`:
# as long as the PyTorchJob's (both backends share the train stage's shape below).
TRAINJOB_HOSTNAME = f"-node-0-{'9' * _digits(MAX_TRAINING_NODES)}"

CHILD_SHAPES: dict[Stage, ChildShape] = {
    Stage.MODEL: ChildShape("Job", True, _JOB_POD),
    Stage.CANARY: ChildShape("Job", True, _JOB_POD),
    Stage.AUDIT_CANARY: ChildShape("Job", True, _JOB_POD),
    Stage.REGEN: ChildShape("Job", True, _INDEXED_JOB_POD),
    Stage.SCORE: ChildShape("Job", True, _JOB_POD),
    Stage.AUDIT_COMPLETIONS: ChildShape("Job", True, _JOB_POD),
    # Tokenization may be sharded like regeneration: leave room for an index.
    Stage.TOKENIZE: ChildShape("Job", True, _INDEXED_JOB_POD),
    Stage.AUDIT_TOKENS: ChildShape("Job", True, _JOB_POD),
    Stage.TRAIN: ChildShape(
        "PyTorchJob", True, max(_PYTORCHJOB_REPLICA, TRAINJOB_HOSTNAME, key=len)
    ),
    Stage.EVAL: ChildShape("Job", True, _JOB_POD),
    Stage.CLEANUP: ChildShape("Job", False, _JOB_POD),
    Stage.PRUNE: ChildShape("Job", False, _JOB_POD),
    Stage.CONFIG: ChildShape("ConfigMap", False, ""),
}


def child_name(run: str, stage: Stage, attempt: int = 1) -> str:
    """`<run>-<stage>` for attempt 1, `<run>-<stage>-<attempt>` for retries (2..99)."""
    if not 1 <= attempt <= MAX_ATTEMPT:
        raise ValueError(f"attempt={attempt} is out of range; accepted: 1..{MAX_ATTEMPT}")
    if attempt > 1 and not CHILD_SHAPES[stage].has_attempts:
        raise ValueError(f"stage {stage.value!r} has a single child; attempt must be 1")
    base = f"{run}-{stage.value}"
    return base if attempt == 1 else f"{base}-{attempt}"


def longest_derived_name_overhead(stage: Stage) -> int:
    """Characters a stage adds to the run name in the longest name it leads to."""
    shape = CHILD_SHAPES[stage]
    attempt = f"-{MAX_ATTEMPT}" if shape.has_attempts else ""
    return len(f"-{stage.value}{attempt}{shape.longest_suffix}")


def longest_child_stage() -> Stage:
    """The stage whose derived names are the longest (it sets the run-name limit)."""
    return max(Stage, key=longest_derived_name_overhead)


MAX_RUN_NAME_LENGTH = DNS_LABEL_MAX_LENGTH - longest_derived_name_overhead(longest_child_stage())


def run_name_limit_reason() -> str:
    """Why the limit is what it is, for messages and docs."""
    stage = longest_child_stage()
    shape = CHILD_SHAPES[stage]
    example = f"<run>-{stage.value}-{MAX_ATTEMPT}{shape.longest_suffix}"
    return (
        f"its longest derived name, {shape.kind} pod {example}, must fit in a "
        f"{DNS_LABEL_MAX_LENGTH}-character DNS label"
    )


NAME_TOO_LONG_MESSAGE = (
    f"metadata.name is too long: a DFlashRun name may have at most {MAX_RUN_NAME_LENGTH} "
    f"characters, because {run_name_limit_reason()}"
)
NAME_FORM_MESSAGE = (
    "metadata.name is not accepted: use lowercase letters, digits and '-', starting with a "
    "letter and ending with a letter or digit (a DNS-1035 label), because PyTorchJob "
    "Services are named after the run"
)


def check_run_name(name: str) -> str | None:
    """None when `name` can name a DFlashRun, else the API server's message plus the value."""
    if len(name) > MAX_RUN_NAME_LENGTH:
        return f"{NAME_TOO_LONG_MESSAGE} (got {name!r}, {len(name)} characters)"
    if not re.fullmatch(DNS_1035_LABEL_PATTERN, name):
        return f"{NAME_FORM_MESSAGE} (got {name!r})"
    return None

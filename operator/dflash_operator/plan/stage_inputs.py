"""What a stage's child is rendered from, part by part, as short hashes: the stage's own spec
section (spec.training for training, ...), the storage settings and queue every child uses,
and the config files the stage reads. The planner restarts a running child whose inputs
changed, so that an edit of a running run takes effect (docs/operations.md, "Edits").

Not inputs, because they reach a running child without a restart: `suspend` and the stage's
`activeDeadlineSeconds` (patched onto the child), `storage.cleanupPolicy` and
`ttlSecondsAfterFinished` (read when the run ends). target, drafter, data and the storage
location are immutable (CEL).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from dflash_operator.api.constants import Stage
from dflash_operator.api.spec import STAGE_SECTIONS, DFlashRunSpec

# Config files (in `<run>-config`) a stage reads that depend on more than its own section:
# train.yaml holds tokenization.maxSeqLen and the evaluation's hold-out, eval.yaml the hold-out.
STAGE_FILES: dict[Stage, tuple[str, ...]] = {
    Stage.TRAIN: ("train.yaml",),
    Stage.EVAL: ("eval.yaml",),
}
# Kept by a restart, in the words of the SpecChanged message.
_KEPT: dict[Stage, str] = {
    Stage.CANARY: "the canary regenerates",
    Stage.REGEN: "committed shards are kept, the others regenerate with the new settings",
    Stage.TRAIN: "training resumes from its newest checkpoint",
}
# Section fields that reach the running child without a restart (the deadline is patched), or
# that a restart would not apply (the trainer account's annotations: set when it is created).
_NOT_INPUTS = {"active_deadline_seconds", "service_account_annotations"}
_PAIR_SEPARATOR = ","
_HASH_SEPARATOR = ":"


# spec.training.runtimeRef is new: left out while unset, it keeps the hashes that children of
# older operators recorded, so an upgrade restarts nothing that runs.
UNSET_NOT_HASHED = ("runtimeRef",)
# spec.training.launcher never restarts a running child (a run keeps the kind it started with,
# plan/launcher.py): hashed as the one value older operators' children recorded, its former
# default, whatever it is now.
HASHED_LAUNCHER = "pytorchjob"


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def stage_inputs(
    spec: DFlashRunSpec, stage: Stage, config_files: Mapping[str, str]
) -> dict[str, str]:
    """Part name (as a user knows it) -> hash, for the child of `stage`."""
    parts: dict[str, str] = {}
    section = spec.section_of(stage)
    if section is not None:
        dumped = section.model_dump(mode="json", by_alias=True, exclude={"active_deadline_seconds"})
        for key in UNSET_NOT_HASHED:
            if dumped.get(key, "") is None:
                del dumped[key]
        if "launcher" in dumped:
            dumped["launcher"] = HASHED_LAUNCHER
        parts[f"spec.{STAGE_SECTIONS[stage]}"] = _digest(dumped)
    storage = spec.storage.model_dump(mode="json", by_alias=True, exclude={"cleanup_policy"})
    parts["spec.storage"] = _digest(storage)
    parts["spec.queueName"] = _digest(spec.queue_name)
    parts["spec.priorityClassName"] = _digest(spec.priority_class_name)
    for name in STAGE_FILES.get(stage, ()):
        parts[name] = _digest(config_files.get(name))
    return parts


def format_inputs(parts: Mapping[str, str]) -> str:
    """The annotation value: `spec.training:1a2b...,spec.storage:...`."""
    return _PAIR_SEPARATOR.join(
        f"{name}{_HASH_SEPARATOR}{digest}" for name, digest in parts.items()
    )


def changed_inputs(recorded: str, wanted: Mapping[str, str]) -> list[str]:
    """The parts whose hash differs from the annotation's (a part either side lacks counts)."""
    old: dict[str, str] = {}
    for pair in recorded.split(_PAIR_SEPARATOR):
        name, _, digest = pair.rpartition(_HASH_SEPARATOR)
        if name:
            old[name] = digest
    return sorted(name for name in {*old, *wanted} if old.get(name) != wanted.get(name))


def kept_on_restart(stage: Stage) -> str:
    return _KEPT.get(stage, f"{stage.value} runs again")

"""The seam between the planner and the workload kind of the training stage: the small
interface every launcher implements (render, observe, suspend, restart) and what it is given.
The implementations live in `launchers.py` (PyTorchJob) and `trainjob.py` (TrainJob).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from dflash_operator.children.kinds import ChildKind
from dflash_operator.children.pod import PodContext


@dataclass(frozen=True)
class LaunchOptions:
    """Per-run settings of a training workload beyond its pods."""

    # spec.training.maxRestarts.
    max_restarts: int
    # The ClusterTrainingRuntime a TrainJob references (unused by other kinds).
    runtime: str = ""


class TrainingLauncher(Protocol):
    """One distributed workload per training attempt.

    - render: `build`;
    - observe and suspend: `kind` (`finished`, `is_suspended`, `suspend_patch`, ...);
    - restart: `restarts_in_place` says who spends spec.training.maxRestarts: the workload
      itself (a crashed pod restarts inside it), or the operator (a failed workload is
      followed by a new attempt, which resumes from the newest checkpoint).
    """

    @property
    def kind(self) -> ChildKind: ...

    @property
    def restarts_in_place(self) -> bool: ...

    @property
    def runtime_kind(self) -> str | None:
        """The kind of the runtime its workload references (looked up before creating it)."""
        ...

    def build(
        self, ctx: PodContext, run_root: str, options: LaunchOptions, suspend: bool
    ) -> dict[str, Any]: ...

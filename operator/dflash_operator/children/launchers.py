"""Training launchers by `spec.training.launcher`: the Kubeflow PyTorchJob implementation of
the launcher interface (`launch.py`), and the registry of all of them (TrainJob: `trainjob.py`).
"""

from __future__ import annotations

from typing import Any

from dflash_operator.api.constants import Stage
from dflash_operator.api.naming import child_name
from dflash_operator.api.spec_training import Launcher
from dflash_operator.children import commands
from dflash_operator.children.jobs import deadline
from dflash_operator.children.kinds import PYTORCHJOB
from dflash_operator.children.launch import LaunchOptions, TrainingLauncher
from dflash_operator.children.meta import build_metadata
from dflash_operator.children.pod import PodContext, build_container, build_pod_template
from dflash_operator.children.trainjob import TrainJobLauncher

# The training-operator finds the rendezvous port by these names (pytorch_types.go).
PYTORCH_CONTAINER = "pytorch"
PYTORCH_PORT_NAME = "pytorchjob-port"
PYTORCH_PORT = 23456


class PyTorchJobLauncher:
    """`kubeflow.org/v1` PyTorchJob: a Master plus nodes-1 Workers, torchrun in each pod;
    crashed pods restart in place (OnFailure) up to maxRestarts (runPolicy.backoffLimit)."""

    kind = PYTORCHJOB
    restarts_in_place = True
    runtime_kind = None

    def build(
        self, ctx: PodContext, run_root: str, options: LaunchOptions, suspend: bool
    ) -> dict[str, Any]:
        name = child_name(ctx.run.name, Stage.TRAIN, ctx.attempt or 1)
        port = {"name": PYTORCH_PORT_NAME, "containerPort": PYTORCH_PORT, "protocol": "TCP"}
        container = build_container(
            ctx, PYTORCH_CONTAINER, commands.build_train_args(run_root), ports=[port]
        )
        # OnFailure: a crashed process restarts in place and counts against backoffLimit.
        template = build_pod_template(ctx, container, restart_policy="OnFailure")
        replicas: dict[str, Any] = {
            "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template}
        }
        workers = ctx.spec.training.nodes - 1
        if workers:
            replicas["Worker"] = {
                "replicas": workers,
                "restartPolicy": "OnFailure",
                "template": template,
            }
        return {
            "apiVersion": PYTORCHJOB.api_version,
            "kind": PYTORCHJOB.kind,
            "metadata": build_metadata(
                ctx.run, name, Stage.TRAIN, ctx.attempt, labels=ctx.workload_labels
            ),
            "spec": {
                "nprocPerNode": str(ctx.placement.processes),
                "runPolicy": {
                    "backoffLimit": options.max_restarts,
                    # Free the GPUs of surviving replicas once the job is over; failed pods
                    # stay, so the failure reason can still be read.
                    "cleanPodPolicy": "Running",
                    "suspend": suspend,
                    **deadline(ctx),
                },
                "pytorchReplicaSpecs": replicas,
            },
        }


LAUNCHERS: dict[Launcher, TrainingLauncher] = {
    Launcher.PYTORCHJOB: PyTorchJobLauncher(),
    Launcher.TRAINJOB: TrainJobLauncher(),
}


def launcher_of_kind(kind: str) -> Launcher | None:
    """The launcher whose workload is of `kind` (an existing child's), else None."""
    for name, launcher in LAUNCHERS.items():
        if launcher.kind.kind == kind:
            return name
    return None

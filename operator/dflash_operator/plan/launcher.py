"""Which workload kind runs a run's training, decided once and kept: status.launcher, else the
kind of a training child it already has, else spec.training.launcher (or the operator's
default) against the APIs the cluster serves (API discovery: `runtime/discovery.py`). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from dflash_operator.api.constants import Stage
from dflash_operator.api.spec import DFlashRunSpec
from dflash_operator.api.spec_training import Launcher
from dflash_operator.api.status import DFlashRunStatus
from dflash_operator.children.launchers import LAUNCHERS, launcher_of_kind
from dflash_operator.plan.observed import Observed

# What each backend needs installed (docs/install-production.md has the whole list).
INSTALL: dict[Launcher, str] = {
    Launcher.TRAINJOB: (
        "install Kubeflow Trainer v2 (>= v2.3, with JobSet >= v0.12) and a "
        "ClusterTrainingRuntime; with Kueue, enable its trainer.kubeflow.org/trainjob integration"
    ),
    Launcher.PYTORCHJOB: (
        "install the Kubeflow training-operator v1 (>= v1.9); with Kueue, enable its "
        "kubeflow.org/pytorchjob integration"
    ),
}
# auto prefers the Trainer v2 API, the one platform teams install now.
AUTO_ORDER = (Launcher.TRAINJOB, Launcher.PYTORCHJOB)


@dataclass(frozen=True)
class LauncherChoice:
    """The launcher of the run's training (never auto), and why it cannot start yet (None:
    it can: its API is served, or the run already committed to it)."""

    launcher: Launcher
    missing: str | None = None


def _api(launcher: Launcher) -> str:
    kind = LAUNCHERS[launcher].kind
    return f"{kind.kind} ({kind.api_version})"


def describe_missing(launcher: Launcher, requested: Launcher, field: str) -> str:
    """'launcher trainjob (spec.training.launcher) needs TrainJob (trainer...) ...'."""
    if requested == Launcher.AUTO:
        wanted = " or ".join(_api(option) for option in AUTO_ORDER)
        how = "; or ".join(INSTALL[option] for option in AUTO_ORDER)
        return f"launcher auto ({field}) needs {wanted}, and this cluster serves neither: {how}"
    return (
        f"launcher {launcher.value} ({field}) needs {_api(launcher)}, which this cluster does "
        f"not serve: {INSTALL[launcher]}; or set {field} to auto"
    )


def committed_launcher(status: DFlashRunStatus, observed: Observed) -> Launcher | None:
    """The launcher a run already trains with: recorded in status, or (a run of an operator
    that recorded none) the kind of its training children, live or recorded."""
    if status.launcher is not None and status.launcher != Launcher.AUTO:
        return status.launcher
    kinds = [c.kind for c in observed.children if c.stage == Stage.TRAIN]
    kinds += [ref.kind for ref in status.children or () if ref.stage == Stage.TRAIN.value]
    for kind in kinds:
        launcher = launcher_of_kind(kind)
        if launcher is not None:
            return launcher
    return None


def choose_launcher(
    spec: DFlashRunSpec, status: DFlashRunStatus, observed: Observed, default: Launcher
) -> LauncherChoice:
    """The run's launcher: committed, else requested (auto: the first served of AUTO_ORDER)."""
    committed = committed_launcher(status, observed)
    if committed is not None:
        return LauncherChoice(committed)
    requested = spec.training.launcher or default
    field = "spec.training.launcher"
    if spec.training.launcher is None:
        field = "unset, so the operator's default, chart value training.defaultLauncher"
    served = observed.served_kinds
    if requested == Launcher.AUTO:
        for option in AUTO_ORDER:
            if served is None or LAUNCHERS[option].kind.kind in served:
                return LauncherChoice(option)
        return LauncherChoice(AUTO_ORDER[0], describe_missing(AUTO_ORDER[0], requested, field))
    if served is not None and LAUNCHERS[requested].kind.kind not in served:
        return LauncherChoice(requested, describe_missing(requested, requested, field))
    return LauncherChoice(requested)


def install_hint(kind: str) -> str:
    """How to get the API of a workload kind served (for a create that found no CRD)."""
    launcher = launcher_of_kind(kind)
    return INSTALL[launcher] if launcher is not None else f"install the CRD of {kind}"

"""Training progress: periodic log lines, a metrics JSONL, and the run's status patch.

The status patch (data contract section 6) is a JSON merge patch on
`dflashruns/<name>/status`, sent by rank 0 as the pod's ServiceAccount (in-cluster
config, or `KUBECONFIG` outside a cluster) when `DFLASH_RUN_NAME` and
`DFLASH_RUN_NAMESPACE` are set; at most every `progress_patch_seconds`, and right after
each checkpoint commit. A failed patch is a warning, never a training failure.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "dflash.dev", "v1alpha1", "dflashruns"


@dataclass(frozen=True)
class StepMetrics:
    step: int
    total_steps: int
    epoch: float
    loss: float
    accuracy: float
    per_position_accuracy: list[float]
    tokens_per_second: float
    eta_seconds: float
    lr: float
    anchors: int
    target_seconds: float
    drafter_seconds: float
    # DFlash2 only (None for DFlash): the selector's loss, recall@K and first-pick accuracy.
    selector_loss: float | None = None
    selector_recall: float | None = None
    selector_accuracy: float | None = None

    def log_line(self) -> str:
        pos = " ".join(f"{a:.2f}" for a in self.per_position_accuracy[:8])
        selector = ""
        if self.selector_loss is not None:
            selector = (
                f" selector loss {self.selector_loss:.4f} recall "
                f"{self.selector_recall or 0.0:.3f} acc {self.selector_accuracy or 0.0:.3f}"
            )
        return (
            f"step {self.step}/{self.total_steps} epoch {self.epoch:.2f} loss {self.loss:.4f} "
            f"acc {self.accuracy:.3f} [{pos}]{selector} tok/s {self.tokens_per_second:,.0f} "
            f"lr {self.lr:.2e} eta {format_duration(self.eta_seconds)}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "totalSteps": self.total_steps,
            "epoch": self.epoch,
            "loss": self.loss,
            "accuracy": self.accuracy,
            "perPositionAccuracy": self.per_position_accuracy,
            "tokensPerSecond": self.tokens_per_second,
            "etaSeconds": self.eta_seconds,
            "lr": self.lr,
            "anchors": self.anchors,
            "targetSeconds": self.target_seconds,
            "drafterSeconds": self.drafter_seconds,
        } | (
            {}
            if self.selector_loss is None
            else {
                "selectorLoss": self.selector_loss,
                "selectorRecall": self.selector_recall,
                "selectorAccuracy": self.selector_accuracy,
            }
        )


def format_duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def build_training_patch(
    m: StepMetrics, likelihood: dict[str, Any] | None = None
) -> dict[str, Any]:
    """`status.training` (and `status.training.likelihood`: the monitor's figures so far)."""
    extra = {"likelihood": likelihood} if likelihood else {}
    return {
        "status": {
            "training": extra
            | {
                "step": m.step,
                "totalSteps": m.total_steps,
                "epoch": round(m.epoch, 4),
                "loss": round(m.loss, 6),
                "accuracy": round(m.accuracy, 6),
                "tokensPerSecond": round(m.tokens_per_second, 1),
                "etaSeconds": int(m.eta_seconds),
                "updatedAt": datetime.now(UTC).isoformat(),
            }
        }
    }


def build_checkpoint_patch(step: int, uri: str, sha256: str) -> dict[str, Any]:
    return {
        "status": {
            "checkpoint": {
                "uri": uri,
                "step": step,
                "time": datetime.now(UTC).isoformat(),
                "sha256": sha256,
            }
        }
    }


@dataclass
class StatusPatcher:
    """Patches the run's status; inert when the run is not named in the environment."""

    interval_seconds: float
    name: str | None = field(default_factory=lambda: os.environ.get("DFLASH_RUN_NAME"))
    namespace: str | None = field(default_factory=lambda: os.environ.get("DFLASH_RUN_NAMESPACE"))
    _api: Any = None
    _last: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def enabled(self) -> bool:
        return bool(self.name and self.namespace)

    def _client(self) -> Any:
        if self._api is None:
            from kubernetes import client, config

            try:
                config.load_incluster_config()
            except config.ConfigException:
                # KUBECONFIG is read now, not at import (the client's default is frozen then)
                config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
            self._api = client.CustomObjectsApi()
        return self._api

    def send(self, patch: dict[str, Any]) -> bool:
        if not self.enabled:
            return False
        with self._lock:  # the checkpoint thread and the training loop both patch
            try:
                self._client().patch_namespaced_custom_object_status(
                    GROUP, VERSION, self.namespace, PLURAL, self.name, patch
                )
                return True
            except Exception as exc:  # any API or config failure must not stop training
                log.warning(
                    "status patch of %s/%s failed: %s",
                    self.namespace,
                    self.name,
                    str(exc).splitlines()[0][:200],
                )
                return False

    def maybe_send_progress(
        self, metrics: StepMetrics, force: bool = False, likelihood: dict[str, Any] | None = None
    ) -> None:
        now = time.monotonic()
        if force or now - self._last >= self.interval_seconds:
            self._last = now
            self.send(build_training_patch(metrics, likelihood))


class MetricsFile:
    """Appends one JSON line per step (local path; used by tests and benchmarks)."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, metrics: StepMetrics) -> None:
        if self.path:
            with self.path.open("a") as handle:
                handle.write(json.dumps(metrics.to_json()) + "\n")

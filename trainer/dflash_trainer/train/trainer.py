"""The training loop: resume, step, log, checkpoint, and export `final/` at the end.

Construction lives in `train/setup.py`, one optimizer step in `train/step.py`, the
checkpoint format in `train/checkpoint.py`. Rank 0 does all object-store writes.
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule

from dflash_trainer.model.config import DrafterConfig
from dflash_trainer.model.dflash2_drafter import DFlash2Drafter
from dflash_trainer.model.drafter import DFlashDrafter
from dflash_trainer.model.export import architecture_of, export_drafter
from dflash_trainer.model.taps import TargetTaps
from dflash_trainer.train import checkpoint as ckpt
from dflash_trainer.train.batches import DataCursor, rank_micro_batches
from dflash_trainer.train.config import TrainConfig
from dflash_trainer.train.distributed import (
    DistEnv,
    barrier,
    broadcast_object,
    gather_objects,
    wrap_drafter,
)
from dflash_trainer.train.likelihood_monitor import LikelihoodMonitor, MonitorFailure
from dflash_trainer.train.progress import (
    MetricsFile,
    StatusPatcher,
    StepMetrics,
    build_checkpoint_patch,
)
from dflash_trainer.train.setup import (
    build_drafter,
    build_drafter_config_for,
    build_objective_settings,
    build_optimizer,
    build_rows_for,
    build_scheduler,
    build_target,
    count_total_steps,
)
from dflash_trainer.train.step import StepOutcome, build_micro_batch, run_train_step

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainResult:
    step: int
    total_steps: int
    loss: float
    checkpoint_uri: str | None
    final_uri: str | None
    # Set when the likelihood monitor stopped training: the stage result's audit fields.
    audit: dict[str, Any] | None = None


def _state_options(env: DistEnv, *, loading: bool) -> StateDictOptions:
    if loading:
        return StateDictOptions(full_state_dict=True, broadcast_from_rank0=env.is_distributed)
    return StateDictOptions(full_state_dict=True, cpu_offload=True)


def full_tensors(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A gathered full state dict (empty on ranks other than 0) as plain tensors."""
    return {name: value for name, value in state.items() if isinstance(value, torch.Tensor)}


def build_metrics(
    outcome: StepOutcome,
    *,
    step: int,
    total: int,
    epoch: float,
    lr: float,
    step_seconds: float,
    elapsed: float,
    steps_done: int,
) -> StepMetrics:
    scored = sum(outcome.count[1:])
    per_pos = [
        c / n if n else 0.0 for c, n in zip(outcome.correct[1:], outcome.count[1:], strict=True)
    ]
    rate = elapsed / max(1, steps_done)
    return StepMetrics(
        step=step,
        total_steps=total,
        epoch=epoch,
        loss=outcome.loss,
        accuracy=sum(outcome.correct[1:]) / scored if scored else 0.0,
        per_position_accuracy=per_pos,
        tokens_per_second=outcome.tokens / max(step_seconds, 1e-9),
        eta_seconds=rate * (total - step),
        lr=lr,
        anchors=outcome.anchors,
        target_seconds=outcome.target_seconds,
        drafter_seconds=outcome.drafter_seconds,
        selector_loss=outcome.selector_loss,
        selector_recall=outcome.selector_recall,
        selector_accuracy=outcome.selector_accuracy,
    )


class Trainer:
    """Owns one run's objects; `run()` trains to the end (or resumes there) and exports."""

    def __init__(self, cfg: TrainConfig, env: DistEnv) -> None:
        self.cfg, self.env = cfg, env
        self.target = build_target(cfg.target, env.device)
        self.drafter_cfg: DrafterConfig = build_drafter_config_for(cfg.drafter, self.target)
        self.taps = TargetTaps(self.target, self.drafter_cfg.target_layer_ids)
        drafter = build_drafter(
            self.drafter_cfg,
            cfg.drafter.init_seed,
            env.device,
            checkpoint_layers=cfg.drafter.activation_checkpointing,
        )
        self.model: nn.Module = wrap_drafter(
            drafter, env, cfg.distributed.strategy, cfg.distributed.reduce_dtype
        )
        sharded = isinstance(self.model, FSDPModule)
        self.optimizer = build_optimizer(self.model, cfg.optim, env.device, sharded)
        self.rows, self.holdout = build_rows_for(
            cfg.data, cfg.run_root, self.target, self.drafter_cfg.mask_token_id
        )
        self.global_batch = cfg.data.batch_size * env.world_size * cfg.optim.grad_accum
        self.total_steps = count_total_steps(cfg, len(self.rows), self.global_batch)
        self.scheduler = build_scheduler(self.optimizer, cfg.optim, self.total_steps)
        self.cursor = DataCursor(len(self.rows), self.global_batch, cfg.seed, cfg.data.shuffle)
        self.settings = build_objective_settings(cfg, self.drafter_cfg)
        self.step = 0
        self.last_loss = float("nan")
        self.patcher = StatusPatcher(cfg.logging.progress_patch_seconds)
        self.metrics_file = MetricsFile(cfg.logging.metrics_file if env.is_main else None)
        self.uploader = ckpt.CheckpointUploader(
            cfg.checkpoint_uri, cfg.checkpoint.keep_last, on_commit=self._on_commit
        )
        self.last_saved_step = -1
        self.checkpoint_uri: str | None = None
        self.monitor = (
            LikelihoodMonitor(cfg.likelihood, self.target, self.rows, env)
            if cfg.likelihood.every_steps > 0
            else None
        )
        if self.monitor is not None and self.monitor.unjudged:
            log.warning(
                "likelihood monitor: sources not judged (sampling unknown: declare "
                "spec.data.sources[].sampling): %s", ", ".join(self.monitor.unjudged),
            )  # fmt: skip
        self.stopped: MonitorFailure | None = None

    # -- checkpoints -------------------------------------------------------------------
    def _on_commit(self, step: int, uri: str, sha256: str) -> None:
        self.checkpoint_uri = uri
        self.patcher.send(build_checkpoint_patch(step, uri, sha256))

    def resume(self) -> int | None:
        """Load the newest verified checkpoint, if any; returns its step."""
        if not self.cfg.checkpoint.resume:
            return None
        with tempfile.TemporaryDirectory(prefix="dflash-resume-") as tmp:
            found = None
            if self.env.is_main:
                found = ckpt.find_latest_checkpoint(self.cfg.checkpoint_uri, Path(tmp))
            state = broadcast_object(found.state if found else None, self.env)
            if state is None:
                return None
            weights = found.weights() if found else {}
            optim_state = found.optimizer() if found else {}
            rng = found.rng() if found else []
            opts = _state_options(self.env, loading=True)
            set_model_state_dict(self.model, dict(weights), options=opts)
            set_optimizer_state_dict(self.model, self.optimizer, optim_state, options=opts)
        rng = broadcast_object(rng, self.env)
        if len(rng) == self.env.world_size:
            ckpt.restore_rng_state(rng[self.env.rank])
        else:
            log.warning(
                "checkpoint has RNG states of %d ranks, this run has %d; not restoring",
                len(rng),
                self.env.world_size,
            )
        self.scheduler.load_state_dict(state["scheduler"])
        self.cursor.restore(state["data"])
        if self.monitor is not None:
            self.monitor.restore(state.get("likelihood"))
        self.step = int(state["step"])
        self.last_loss = float(state.get("loss", float("nan")))
        self.last_saved_step = self.step
        self.checkpoint_uri = found.uri if found else None
        log.info("resumed from step %d (%s)", self.step, found.uri if found else "rank 0")
        return self.step

    def save(self) -> None:
        """Gather the full state (collective), stage it on rank 0 and upload in background."""
        opts = _state_options(self.env, loading=False)
        weights = full_tensors(get_model_state_dict(self.model, options=opts))
        optim_state = get_optimizer_state_dict(self.model, self.optimizer, options=opts)
        rng = gather_objects(ckpt.capture_rng_state(), self.env)
        if self.env.is_main:
            state: dict[str, Any] = {
                "step": self.step,
                "totalSteps": self.total_steps,
                "loss": self.last_loss,
                "data": self.cursor.state(),
                "scheduler": self.scheduler.state_dict(),
                "worldSize": self.env.world_size,
                "globalBatch": self.global_batch,
                "drafter": self.drafter_cfg.to_dict(),
                "config": self.cfg.model_dump(mode="json"),
                **({"likelihood": self.monitor.state()} if self.monitor is not None else {}),
            }
            folder = ckpt.staging_folder(self.step)
            ckpt.write_checkpoint_files(
                folder,
                weights={k: v.float() for k, v in weights.items()},
                optimizer=optim_state,
                rng=rng,
                state=state,
            )
            self.uploader.submit(folder, self.step)
        self.last_saved_step = self.step

    # -- loop --------------------------------------------------------------------------
    def train_steps(self) -> None:
        cfg, env = self.cfg, self.env
        started = time.perf_counter()
        first_step = self.step
        self.model.train()
        while self.step < self.total_steps:
            step_start = time.perf_counter()
            epoch, global_rows = self.cursor.next_global_batch()
            micro = [
                build_micro_batch(self.rows, idx, epoch, self.settings, env.device)
                for idx in rank_micro_batches(
                    global_rows,
                    batch_size=cfg.data.batch_size,
                    world_size=env.world_size,
                    rank=env.rank,
                    grad_accum=cfg.optim.grad_accum,
                )
            ]
            lr = float(self.scheduler.get_last_lr()[0])
            monitored = self.monitor is not None and self.monitor.is_due(self.step + 1)
            if self.monitor is not None and monitored:
                self.monitor.start_step(self.step + 1)
            outcome = run_train_step(
                model=self.model,
                target=self.target,
                taps=self.taps,
                micro_batches=micro,
                optimizer=self.optimizer,
                scheduler=self.scheduler,
                settings=self.settings,
                grad_clip=cfg.optim.grad_clip,
                env=env,
                observe=self.monitor.observe if self.monitor is not None and monitored else None,
            )
            self.step += 1
            failure = self.monitor.finish_step(self.step) if self.monitor and monitored else None
            self.last_loss = outcome.loss
            now = time.perf_counter()
            metrics = build_metrics(
                outcome,
                step=self.step,
                total=self.total_steps,
                epoch=self.cursor.epoch_progress(),
                lr=lr,
                step_seconds=now - step_start,
                elapsed=now - started,
                steps_done=self.step - first_step,
            )
            stop = failure is not None and cfg.likelihood.enforce
            if env.is_main:
                self.metrics_file.write(metrics)
                if self.step % cfg.logging.every_steps == 0 or self.step == self.total_steps:
                    log.info("%s", metrics.log_line())
                # The monitor's figures so far ride on every progress patch (the latest ones).
                scored = self.monitor is not None and self.monitor.steps_scored > 0
                likelihood = self.monitor.snapshot() if self.monitor and scored else None
                self.patcher.maybe_send_progress(
                    metrics, force=self.step == self.total_steps or stop, likelihood=likelihood
                )
            if stop:
                self.stopped = failure
                return
            if self.step % cfg.checkpoint.every_steps == 0:
                self.save()

    def export(self) -> str:
        """Gather the full weights (collective) and have rank 0 write `final/`."""
        full = full_tensors(
            get_model_state_dict(self.model, options=_state_options(self.env, loading=False))
        )
        uri = self.cfg.export_uri
        if self.env.is_main:
            architecture = DFlashDrafter if self.drafter_cfg.dflash2 is None else DFlash2Drafter
            module = architecture(self.drafter_cfg)
            module.load_state_dict({k: v.float() for k, v in full.items()})
            data = (
                "self-distillation (target greedy continuations)"
                if self.cfg.data.self_distill
                else self.cfg.data.tokenized(self.cfg.run_root)
            )
            meta = {
                "target": self.cfg.target.name,
                "architecture": architecture_of(self.drafter_cfg),
                "targetLayerIds": list(self.drafter_cfg.target_layer_ids),
                "numLayers": self.drafter_cfg.num_hidden_layers,
                "blockSize": self.drafter_cfg.block_size,
                "layerTypes": list(self.drafter_cfg.layer_types),
                "data": data,
                "steps": self.step,
                "loss": self.last_loss,
            }
            export_drafter(module, uri, meta, dtype=self.cfg.export.dtype)
            log.info("exported the drafter to %s", uri)
        return uri

    def stop_for_likelihood(self, failure: MonitorFailure) -> TrainResult:
        """The monitor stopped training: report, no checkpoint or export (the data is bad)."""
        from dflash_trainer.storage import join_uri
        from dflash_trainer.train.likelihood_report import (
            build_report,
            build_stage_payload,
            write_report,
        )
        from dflash_trainer.train.verdict import VERDICT_FILE, build_summary, write_verdict

        assert self.monitor is not None
        uri = self.cfg.likelihood_report_uri
        payload = build_stage_payload(self.monitor, failure, uri)
        verdict_uri = join_uri(uri, VERDICT_FILE)
        if self.env.is_main:
            log.error("%s", payload["message"])
            write_report(build_report(self.monitor, failure, self.cfg.target.path), uri)
            verdict_uri = write_verdict(payload, uri)
            self.uploader.wait()
        barrier(self.env)
        return TrainResult(
            self.step, self.total_steps, self.last_loss, self.checkpoint_uri, None,
            build_summary(payload, verdict_uri),
        )  # fmt: skip

    def run(self) -> TrainResult:
        self.resume()
        self.train_steps()
        if self.stopped is not None:
            return self.stop_for_likelihood(self.stopped)
        if self.last_saved_step != self.step:
            self.save()
        if self.env.is_main:
            self.uploader.wait()
        uri = self.export()
        barrier(self.env)
        return TrainResult(self.step, self.total_steps, self.last_loss, self.checkpoint_uri, uri)

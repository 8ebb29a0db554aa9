"""Run by torchrun (test_gradient_accumulation.py), or in-process for the one-process reference:
for each strategy and grad_accum, one optimizer step of the real `run_train_step` over the same
global batch, with the collectives it issued (torch profiler, c10d ops) and the gradients the
optimizer saw. Rank 0 writes `<out>/<case>.json` and `<out>/<case>.pt`."""

from __future__ import annotations

import collections
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from dflash_trainer.train.batches import rank_micro_batches
from dflash_trainer.train.config import TrainConfig
from dflash_trainer.train.distributed import DistEnv, init_distributed, unwrap
from dflash_trainer.train.step import build_micro_batch, run_train_step
from dflash_trainer.train.trainer import Trainer

GLOBAL_BATCH = 8


class RecordingOptimizer(torch.optim.Optimizer):
    """Keeps the gradients it is asked to apply, and applies nothing."""

    def __init__(self, named: Iterable[tuple[str, torch.nn.Parameter]]) -> None:
        named = list(named)
        self.names = {id(p): name for name, p in named}
        super().__init__([p for _, p in named], {"lr": 0.0})
        self.grads: dict[str, Any] = {}

    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self.grads[self.names[id(p)]] = p.grad  # replaced, never written in place


def run_case(cfg_data: dict[str, Any], env: DistEnv, strategy: str, accum: int) -> dict[str, Any]:
    batch = GLOBAL_BATCH // (env.world_size * accum)
    data = {**cfg_data, "distributed": {"strategy": strategy}}
    data["data"] = {**data["data"], "batch_size": batch}
    data["optim"] = {**data["optim"], "grad_accum": accum}
    trainer = Trainer(TrainConfig.model_validate(data), env)
    optimizer = RecordingOptimizer(unwrap(trainer.model).named_parameters())
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    micro = [
        build_micro_batch(trainer.rows, indices, 0, trainer.settings, env.device)
        for indices in rank_micro_batches(
            np.arange(GLOBAL_BATCH),
            batch_size=batch,
            world_size=env.world_size,
            rank=env.rank,
            grad_accum=accum,
        )
    ]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        run_train_step(
            model=trainer.model,
            target=trainer.target,
            taps=trainer.taps,
            micro_batches=micro,
            optimizer=optimizer,
            scheduler=scheduler,
            settings=trainer.settings,
            grad_clip=0.0,
            env=env,
        )
    collectives = collections.Counter(
        event.name for event in prof.events() if event.name.startswith("c10d::")
    )
    grads = {
        name: (g.full_tensor() if hasattr(g, "full_tensor") else g).detach().clone()
        for name, g in sorted(optimizer.grads.items())
    }
    return {"collectives": dict(collectives), "grads": grads}


def main(config: str, out: str, cases: list[str]) -> None:
    env = init_distributed(5)
    cfg_data = yaml.safe_load(Path(config).read_text())
    for case in cases:
        strategy, accum = case.split("-")
        result = run_case(cfg_data, env, strategy, int(accum))
        if env.is_main:
            torch.save(result["grads"], Path(out) / f"{case}.pt")
            (Path(out) / f"{case}.json").write_text(json.dumps(result["collectives"]))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])

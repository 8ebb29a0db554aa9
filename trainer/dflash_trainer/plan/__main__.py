"""`python -m dflash_trainer.plan MANIFEST.yaml [--target-config config.json]
[--gpu-memory 96Gi | --pools values.yaml] [--world-size N]`: one training rank's memory,
term by term, judged against one GPU's memory.

MANIFEST is the trainer's train.yaml (what the operator renders) or a DFlashRun (rendered
here the same way; its world size is nodes x gpusPerNode). The GPU memory is `--gpu-memory`,
else the `gpuMemory` of the manifest's pool in `--pools` (the chart's values), else that of a
pool the chart ships (`capacity.py`). Exit 0: fits; 1: does not fit, with the fields to
change; 2: the manifest or target is unusable; 3: no GPU memory known, fit not judged.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflash_memplan.estimate import RankSetup, estimate_rank_memory
from dflash_memplan.fixes import SPEC_FIELDS, Fix, find_fixes, spec_value
from dflash_memplan.report import format_estimate, format_fixes
from dflash_memplan.shapes import ShapeError
from pydantic import ValidationError

from dflash_trainer.plan.capacity import load_pools, resolve_capacity, training_pool
from dflash_trainer.plan.inputs import (
    TRAIN_FIELDS,
    UnknownTargetError,
    build_plan_inputs,
    current_values,
    resolve_target_shape,
)
from dflash_trainer.train.config import (
    ConfigError,
    TrainConfig,
    format_validation_error,
    load_yaml_mapping,
)

EXIT_FITS, EXIT_WONT_FIT, EXIT_UNUSABLE, EXIT_NOT_JUDGED = 0, 1, 2, 3
# A DFlashRun's train.yaml needs a run root; the plan never reads it.
PLACEHOLDER_RUN_ROOT = "s3://plan/run"


def render_run(raw: dict[str, Any]) -> tuple[dict[str, Any], int | None, str | None]:
    """A DFlashRun -> (its train.yaml, nodes x gpusPerNode or None when gpusPerNode is unset,
    its training pool or None), rendered by the operator's own code (the `manifests` extra:
    the images leave it out)."""
    try:
        from dflash_operator.api.validation import SpecError, parse_spec
        from dflash_operator.children.commands import is_hub_model
        from dflash_operator.children.config_map import build_train_file
    except ImportError:
        raise ConfigError(
            "the manifest is a DFlashRun, and rendering one into a train.yaml takes the "
            "operator's code (package dflash-operator), which this environment does not have "
            "(the trainer and regen images leave it out). Give the run's train.yaml instead, or "
            "install dflash-trainer[manifests] (in a checkout: uv run python -m "
            "dflash_trainer.plan ...)"
        ) from None

    try:
        spec = parse_spec(raw.get("spec"))
    except SpecError as error:
        raise ConfigError("; ".join(error.problems)) from None
    training = spec.training
    world = training.nodes * training.gpus_per_node if training.gpus_per_node else None
    train = build_train_file(spec, PLACEHOLDER_RUN_ROOT)
    if is_hub_model(spec.target.model):
        # Training loads the run's copy (<run root>/model); the plan knows the target by its id.
        train["target"]["path"] = spec.target.model
    return train, world, training.node_pool


@dataclass(frozen=True)
class Manifest:
    config: TrainConfig
    # nodes x gpusPerNode of a DFlashRun (None: train.yaml, or gpusPerNode left to the pool).
    world_size: int | None
    is_run: bool
    # The DFlashRun's spec.training.nodePool (None: train.yaml, or the pool by default).
    pool: str | None = None


def load_manifest(path: Path) -> Manifest:
    raw = load_yaml_mapping(path)
    world, pool = None, None
    is_run = raw.get("kind") == "DFlashRun"
    if "kind" in raw and not is_run:
        raise ConfigError(
            f"{path} is a kind: {raw.get('kind')}, not a DFlashRun nor a train.yaml; accepted: "
            "a DFlashRun manifest or the trainer's train.yaml"
        )
    if is_run:
        raw, world, pool = render_run(raw)
    raw.setdefault("run_root", PLACEHOLDER_RUN_ROOT)
    try:
        return Manifest(TrainConfig.model_validate(raw), world, is_run, pool)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(str(path), exc)) from None


def describe_fixes(fixes: list[Fix], setup: RankSetup, is_run: bool) -> str:
    """In the manifest's own words: train.yaml keys, or a DFlashRun's spec fields (where the
    loss chunk is no field: the trainer sizes it by the vocabulary)."""
    current = current_values(setup)
    if not is_run:
        return format_fixes(fixes, TRAIN_FIELDS, current)
    spec_fixes = [
        Fix(fix.knob, spec_value(fix.value), fix.total_bytes)
        for fix in fixes
        if fix.knob in SPEC_FIELDS
    ]
    current["strategy"] = spec_value(setup.strategy)
    return format_fixes(spec_fixes, SPEC_FIELDS, current)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m dflash_trainer.plan", description=__doc__.splitlines()[0]
    )
    parser.add_argument("manifest", type=Path, help="train.yaml, or a DFlashRun manifest")
    parser.add_argument("--target-config", type=Path, help="the target's HF config.json")
    parser.add_argument("--gpu-memory", help="memory of one GPU, e.g. 96Gi, 180G, 96GB")
    parser.add_argument(
        "--pools", type=Path,
        help="the operator's Helm values (nodePools): the pool's gpuMemory and env",
    )  # fmt: skip
    parser.add_argument(
        "--pool", help="the training pool of a train.yaml (a DFlashRun names its own)"
    )
    parser.add_argument(
        "--alloc-conf", metavar="PYTORCH_CUDA_ALLOC_CONF",
        help="the pods' allocator setting (default: the pool's env, else what trainer pods "
        "get: expandable_segments:True)",
    )  # fmt: skip
    parser.add_argument("--world-size", type=int, help="training ranks (GPUs) in all")
    parser.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda", help="cpu: the CPU debug run"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        manifest = load_manifest(args.manifest)
        values = load_pools(args.pools) if args.pools else None
        pool = training_pool(manifest.pool, values) if manifest.is_run else args.pool or None
        capacity = resolve_capacity(args.gpu_memory, pool, values, args.alloc_conf)
        cfg, world = manifest.config, args.world_size or manifest.world_size
        if world is None:
            raise ConfigError(
                "the DFlashRun leaves training.gpusPerNode to its pool: pass --world-size"
                if manifest.is_run
                else "a train.yaml does not say how many ranks train: pass --world-size"
            )
        target = resolve_target_shape(cfg, args.target_config)
    except UnknownTargetError as exc:
        print(f"memory check skipped: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    except (ConfigError, ShapeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    inputs = build_plan_inputs(cfg, target, world, args.device, capacity.expandable_segments)
    estimate = estimate_rank_memory(inputs.target, inputs.drafter, inputs.setup)
    print("\n".join(format_estimate(estimate, capacity.bytes, capacity.source)))
    if capacity.bytes is None:
        print(
            f"fit NOT judged: no GPU memory is known ({capacity.source}); pass --gpu-memory "
            "<one GPU's memory, e.g. 95Gi>, or --pools <the operator's Helm values>",
            file=sys.stderr,
        )
        return EXIT_NOT_JUDGED
    if estimate.fits(capacity.bytes):
        return EXIT_FITS
    fixes = find_fixes(inputs.target, inputs.drafter, inputs.setup, capacity.bytes)
    print(describe_fixes(fixes, inputs.setup, manifest.is_run), file=sys.stderr)
    return EXIT_WONT_FIT


if __name__ == "__main__":
    sys.exit(main())

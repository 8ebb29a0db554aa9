"""`python -m dflash_trainer.plan MANIFEST.yaml [--target-config config.json]
[--gpu-memory 96Gi] [--world-size N]`: print one training rank's memory, term by term.

MANIFEST is the trainer's train.yaml (what the operator renders) or a DFlashRun (rendered
here the same way; its world size is nodes x gpusPerNode). Exit 0: fits (or no GPU memory
given); 1: does not fit, with the fields to change; 2: the manifest or target is unusable.
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
from dflash_memplan.units import parse_memory_size
from pydantic import ValidationError

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

EXIT_FITS, EXIT_WONT_FIT, EXIT_UNUSABLE = 0, 1, 2
# A DFlashRun's train.yaml needs a run root; the plan never reads it.
PLACEHOLDER_RUN_ROOT = "s3://plan/run"


def render_run(raw: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """A DFlashRun -> (its train.yaml, nodes x gpusPerNode or None when gpusPerNode is unset),
    rendered by the operator's own code (the `manifests` extra: the images leave it out)."""
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
    return train, world


@dataclass(frozen=True)
class Manifest:
    config: TrainConfig
    # nodes x gpusPerNode of a DFlashRun (None: train.yaml, or gpusPerNode left to the pool).
    world_size: int | None
    is_run: bool


def load_manifest(path: Path) -> Manifest:
    raw = load_yaml_mapping(path)
    world = None
    is_run = raw.get("kind") == "DFlashRun"
    if is_run:
        raw, world = render_run(raw)
    raw.setdefault("run_root", PLACEHOLDER_RUN_ROOT)
    try:
        return Manifest(TrainConfig.model_validate(raw), world, is_run)
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
    parser.add_argument("--world-size", type=int, help="training ranks (GPUs) in all")
    parser.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda", help="cpu: the CPU debug run"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        capacity = parse_memory_size(args.gpu_memory) if args.gpu_memory else None
        manifest = load_manifest(args.manifest)
        cfg, world = manifest.config, args.world_size or manifest.world_size
        if world is None:
            raise ConfigError(
                "the DFlashRun leaves training.gpusPerNode to its pool: pass --world-size"
            )
        target = resolve_target_shape(cfg, args.target_config)
    except UnknownTargetError as exc:
        print(f"memory check skipped: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    except (ConfigError, ShapeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    inputs = build_plan_inputs(cfg, target, world or 1, args.device)
    estimate = estimate_rank_memory(inputs.target, inputs.drafter, inputs.setup)
    print("\n".join(format_estimate(estimate, capacity)))
    if capacity is None or estimate.fits(capacity):
        return EXIT_FITS
    fixes = find_fixes(inputs.target, inputs.drafter, inputs.setup, capacity)
    print(describe_fixes(fixes, inputs.setup, manifest.is_run), file=sys.stderr)
    return EXIT_WONT_FIT


if __name__ == "__main__":
    sys.exit(main())

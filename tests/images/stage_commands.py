"""Every container the operator renders for every DFlashRun in examples/, with the operator's
own builders (plan.stages: each stage's child, and both cleanup Jobs), placed on the chart's
default pools. No hand-written command lists: a changed CLI shows up here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from dflash_operator.api.spec_storage import CleanupPolicy
from dflash_operator.api.validation import parse_spec
from dflash_operator.children.meta import RunRef, build_run_root
from dflash_operator.plan.placement import place_stage
from dflash_operator.plan.stages import (
    PlanSettings,
    StageContext,
    build_cleanup_child,
    build_pipeline,
    build_stage_child,
)
from dflash_operator.pools import parse_pools

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
CHART_VALUES = ROOT / "charts" / "dflash-operator" / "values.yaml"


@dataclass(frozen=True)
class Rendered:
    example: str
    child: str
    image: str
    container: dict[str, Any]

    @property
    def id(self) -> str:
        return f"{self.example}:{self.child}"


def example_runs() -> list[tuple[str, dict[str, Any]]]:
    """(file, DFlashRun) for every DFlashRun document under examples/."""
    runs = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "DFlashRun":
                runs.append((str(path.relative_to(EXAMPLES)), doc))
    return runs


def chart_pools() -> Any:
    """The chart's default pools file (values nodePools + defaultPools), as the operator reads it."""
    values = yaml.safe_load(CHART_VALUES.read_text())
    defaults = {k: v for k, v in (values.get("defaultPools") or {}).items() if v}
    return parse_pools({"nodePools": values["nodePools"], "defaults": defaults})


def _containers(child: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    spec = child["spec"]
    if "pytorchReplicaSpecs" in spec:
        return [
            (f"{child['metadata']['name']}/{role}", c)
            for role, replica in spec["pytorchReplicaSpecs"].items()
            for c in replica["template"]["spec"]["containers"]
        ]
    return [(child["metadata"]["name"], c) for c in spec["template"]["spec"]["containers"]]


def rendered_containers(regen_image: str, trainer_image: str) -> list[Rendered]:
    """Every stage container of every example, with the operator's images set to these."""
    settings = PlanSettings(regen_image=regen_image, trainer_image=trainer_image)
    pools = chart_pools()
    out = []
    for file, run in example_runs():
        spec = parse_spec(run["spec"])
        ref = RunRef(run["metadata"]["name"], run["metadata"].get("namespace", "ns"), "uid-1")
        stages = build_pipeline(spec)
        placements = {}
        for stage in (*stages, *_cleanup_stages()):
            placed = place_stage(spec, stage, pools)
            assert not hasattr(placed, "reason"), f"{file}: {stage}: {placed}"
            placements[stage] = placed
        ctx = StageContext(ref, spec, build_run_root(spec.storage, ref), placements, settings)
        children = [build_stage_child(ctx, stage, 1, suspend=False) for stage in stages]
        children += [
            build_cleanup_child(ctx, policy)
            for policy in (CleanupPolicy.DELETE, CleanupPolicy.DELETE_INTERMEDIATE)
        ]
        for child in children:
            for name, container in _containers(child):
                out.append(Rendered(file, name, container["image"], container))
    return out


def _cleanup_stages() -> tuple[Any, ...]:
    from dflash_operator.api.constants import Stage

    return (Stage.CLEANUP, Stage.PRUNE)

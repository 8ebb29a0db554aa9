"""What the operator renders for the TrainJob backend, on the real API server with the Kubeflow
Trainer v2.3.0 CRDs (from the module proxy; no Trainer controller or webhook runs): every
TrainJob passes the CRD's schema and CEL rules in a server-side dry run, with nothing pruned.
(The chart's ClusterTrainingRuntime: tests/integration/chart/test_training_runtime.py. The e2e
with the Trainer running: the operator suite under DFLASH_TEST_LAUNCHER=trainjob.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
from dflash_dev import operator_local
from dflash_dev.pytest_plugin import ClusterHandle
from dflash_operator.api.constants import Stage
from dflash_operator.api.spec_training import Launcher
from dflash_operator.api.validation import parse_spec
from dflash_operator.children.meta import RunRef
from dflash_operator.plan.placement import place_stages
from dflash_operator.plan.stages import (
    PlanSettings,
    StageContext,
    build_pipeline,
    build_stage_child,
)
from dflash_operator.pools import parse_pools

from .conftest import base_spec, minimal_runtime

TOPOLOGY = {"levelLabel": "cloud.example.com/rack", "mode": "required"}


def render(namespace: str, training: dict[str, Any], suspend: bool) -> dict[str, Any]:
    pools = operator_local.chart_pools()
    pools["nodePools"]["rtx-pro-6000"]["topology"] = TOPOLOGY
    spec = parse_spec(base_spec(training={"launcher": "trainjob", **training}))
    placements, errors = place_stages(spec, build_pipeline(spec), parse_pools(pools))
    assert not errors
    run = RunRef("r1", namespace, "0b6c1a0e-0000-4000-8000-000000000001")
    ctx = StageContext(run, spec, "s3://artifacts/r1", placements, PlanSettings(),
                       launcher=Launcher.TRAINJOB)  # fmt: skip
    return build_stage_child(ctx, Stage.TRAIN, 2, suspend)


@pytest.mark.parametrize(
    "training",
    [{"nodes": 2, "gpusPerNode": 1}, {"nodes": 1, "runtimeRef": "torch-distributed",
                                      "activeDeadlineSeconds": 600}],
    ids=["chart-runtime", "platform-runtime"],
)  # fmt: skip
def test_a_rendered_trainjob_passes_the_api_servers_schema_and_rules(
    trainer_crds: ClusterHandle, namespace: str, training: dict[str, Any]
) -> None:
    job = render(namespace, training, suspend=True)
    # The Trainer's webhook admits a TrainJob only when its runtime exists.
    runtime = job["spec"]["runtimeRef"]["name"]
    body = minimal_runtime(runtime)
    existed = trainer_crds.kubectl("get", "clustertrainingruntime", runtime, check=False)
    if existed.returncode != 0:
        trainer_crds.kubectl("apply", "-f", "-", input=json.dumps(body))
    try:
        result = trainer_crds.kubectl(
            "create", "--dry-run=server", "--validate=strict", "-n", namespace, "-o", "json",
            "-f", "-", input=json.dumps(job), check=False,
        )  # fmt: skip
    finally:
        if existed.returncode != 0:
            trainer_crds.kubectl("delete", "clustertrainingruntime", runtime, "--ignore-not-found")
    assert result.returncode == 0, result.stderr
    stored = json.loads(result.stdout)
    # Nothing pruned: what was sent is what would be stored (Kueue's webhook adds its own
    # patch beside ours; the Trainer stamps each patch's `time`).
    ours = [
        {k: v for k, v in p.items() if k != "time"}
        for p in stored["spec"]["runtimePatches"]
        if p["manager"] == "dflash.dev/operator"
    ]
    assert ours == job["spec"]["runtimePatches"]
    assert stored["spec"]["trainer"] == job["spec"]["trainer"]

"""GPU-hours and the budget on the real control plane: status.gpuHours counts the regen pods'
requested GPUs x wall time, and a budget that runs out suspends the run (its Job suspended,
its pods gone) until annotation dflash.dev/extra-gpu-hours raises it."""

from __future__ import annotations

from typing import Any

from dflash_dev.kube_wait import get_json, wait_for


def test_a_run_out_of_gpu_hours_is_suspended_and_resumes_when_granted_more(
    harness: Any, make_spec: Any
) -> None:
    operator = harness.start_operator()
    harness.apply_run("r1", make_spec(budget={"maxGpuHours": 0.001}))  # 3.6 GPU-seconds
    pods = harness.running_pods("r1-regen", 2)
    assert all(
        p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "1" for p in pods
    )

    status = harness.wait_phase("r1", "Suspended", timeout=90)
    assert status["gpuHours"]["total"] >= 0.001, status.get("gpuHours")
    assert set(status["gpuHours"]["byStage"]) == {"regen"}
    budget = next(c for c in status["conditions"] if c["type"] == "BudgetExceeded")
    assert budget["status"] == "True" and "dflash.dev/extra-gpu-hours" in budget["message"]
    wait_for(
        "the regen Job to be suspended",
        lambda: get_json(harness.cluster, "job", "r1-regen", "-n", harness.namespace)["spec"].get(
            "suspend"
        ),
    )
    wait_for("its pods to go", lambda: not harness.running_pods_now("r1-regen"))
    exported = f'dflash_run_gpu_hours{{namespace="{harness.namespace}",run="r1"}}'
    wait_for("the run's GPU-hours in /metrics", lambda: exported in operator.metrics())

    harness.annotate("r1", "dflash.dev/extra-gpu-hours", "100")
    harness.wait_phase("r1", "Regenerating")
    harness.running_pods("r1-regen", 2)
    assert harness.condition("r1", "BudgetExceeded")["status"] == "False"
    printed = harness.kubectl("get", "dfr", "r1").stdout.splitlines()[0]
    assert "GPU-H" in printed

"""The GPU smoke command runs every step on CPU with --dry-run (same steps, tiny sizes) and
writes its figures as JSON; only vLLM's own `method: dflash` evaluation and the compiled flex
kernel are left to the GPU. Without vLLM, regeneration falls back to the transformers engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "gpu_smoke.sh"
GPU_ONLY_STEPS = {"eval-vllm", "flex-256"}
STEPS = [
    "build-qwen3", "regen-qwen3", "tokenize", "build-qwen3_5", "regen-qwen3_5",
    "train", "export", "train-qwen3_5", "flex-256", "loss-vocab", "monitor-vocab",
    "eval-builtin", "eval-vllm",
]  # fmt: skip
FIGURES_OF_THE_DRY_RUN = [
    "regen_qwen3_output_tokens_per_s",
    "regen_qwen3_5_output_tokens_per_s",
    "train_tokens_per_s",
    "train_step_ms",
    "peak_memory_mib",
    "plan_memory_mib",
    "peak_over_plan",
    "acceptance_builtin",
    "train_qwen3_5_step_ms",
    "loss_bytes_per_logit",
    "monitor_bytes_per_logit",
]


def test_the_gpu_smoke_dry_run_passes_every_step_and_writes_the_figures(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "gpu_smoke.json").read_text())
    statuses = {step["name"]: step["status"] for step in result["steps"]}
    assert list(statuses) == STEPS
    assert all(statuses[name] == "OK" for name in STEPS if name not in GPU_ONLY_STEPS), statuses
    assert statuses["eval-vllm"] == statuses["flex-256"] == "SKIPPED"
    assert result["ok"] and result["mode"] == "dry-run"
    steps = {step["name"]: step["figures"] for step in result["steps"]}
    # The production drafter's shapes ran: FSDP2 on one rank, wide heads, a sliding layer.
    assert steps["train"]["wrapped"].startswith("FSDP")
    assert result["figures"]["regen_engine"] == "transformers"
    assert steps["loss-vocab"]["vocab"] == 248_320
    # The monitor's two LM-head chunks hold one chunk's bytes (the plan's 9 B per logit).
    monitor = steps["monitor-vocab"]
    assert monitor["vocab"] == 248_320
    assert abs(monitor["bytes_per_logit"] / monitor["plan_bytes_per_logit"] - 1) <= 0.1, monitor
    for key in FIGURES_OF_THE_DRY_RUN:
        assert isinstance(result["figures"][key], (int, float)), (key, result["figures"])
        assert result["figures"][key] > 0, (key, result["figures"])
    assert "figure" in done.stdout and "train_step_ms" in done.stdout  # the printed table


def test_a_failed_step_is_reported_with_its_error_and_the_next_step_still_runs(
    tmp_path: Path,
) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_smoke", SCRIPT.with_suffix(".py"))
    assert spec and spec.loader
    smoke_module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_smoke"] = smoke_module  # dataclasses look their module up there
    spec.loader.exec_module(smoke_module)
    smoke = smoke_module.Smoke(smoke_module.DRY, tmp_path)

    def broken() -> dict[str, object]:
        raise RuntimeError("the regen engine died\nsecond line")

    smoke.run_step("regen-qwen3", broken)
    smoke.run_step("tokenize", lambda: smoke.need("run-qwen3", "regen-qwen3"))
    smoke.run_step("export", lambda: {"files": 1})
    failed, skipped, ok = smoke.reports
    assert failed.status == "FAILED" and "RuntimeError: the regen engine died" in failed.detail
    assert skipped.status == "SKIPPED" and "needs the regen-qwen3 step" in skipped.detail
    assert ok.status == "OK" and ok.figures == {"files": 1}

"""The GPU smoke command runs every step on CPU with --dry-run (same steps, tiny sizes) and
writes its figures as JSON; only vLLM's own `method: dflash` evaluation and the compiled flex
kernel are left to the GPU. Without vLLM, regeneration falls back to the transformers engine.
The DFlash2 variant trains, exports and evaluates (greedy and T = 0.6) beside DFlash, and the
table of both is in the JSON and the printout. The device wrapper returns four files whatever
happens, and a run boxed by its budget still writes its steps and its final figures (issue 29)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "gpu_smoke.sh"
DEVICE_SCRIPT = SCRIPT.with_name("gpu_smoke_device.sh")
GPU_ONLY_STEPS = {"eval-vllm", "flex-256"}
# The figures that matter most first: train, flex-256, loss-vocab, export, acceptance.
STEPS = [
    "build-qwen3", "regen-qwen3", "tokenize", "train", "flex-256", "loss-vocab",
    "loss-vocab-dflash2", "export", "train-dflash2", "export-dflash2", "eval-builtin",
    "eval-builtin-dflash2", "eval-sampled", "eval-sampled-dflash2", "architectures", "eval-vllm",
    "monitor-vocab", "build-qwen3_5", "regen-qwen3_5", "train-qwen3_5",
]  # fmt: skip
# What the device returns: the log, the steps, the final JSON and the rest as a tarball.
OUT_FILES = {"gpu_smoke.log", "steps.json", "gpu_smoke.json", "gpu_smoke_rest.tar.gz"}
# A backstop only: the full dry run must finish every step (about 4 min on 2 idle cores).
DRY_RUN_BUDGET_S = 900
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
    "loss_dflash2_bytes_per_logit",
    "train_dflash2_step_ms",
    "peak_memory_dflash2_mib",
    "peak_over_plan_dflash2",
    "acceptance_builtin_dflash2",
    "acceptance_sampled",
    "acceptance_sampled_dflash2",
]


@pytest.mark.timeout(1080)
def test_the_gpu_smoke_dry_run_passes_every_step_and_writes_the_figures(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", "--budget-s", str(DRY_RUN_BUDGET_S), "--work",
         str(tmp_path / "work"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=DRY_RUN_BUDGET_S + 60,
        check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "out"
    assert {p.name for p in out.iterdir()} == OUT_FILES - {"gpu_smoke.log"}  # no wrapper here
    result = json.loads((out / "gpu_smoke.json").read_text())
    assert json.loads((out / "steps.json").read_text())["steps"] == result["steps"]
    statuses = {step["name"]: step["status"] for step in result["steps"]}
    assert list(statuses) == STEPS
    assert all(statuses[name] == "OK" for name in STEPS if name not in GPU_ONLY_STEPS), statuses
    assert statuses["eval-vllm"] == statuses["flex-256"] == "SKIPPED"
    assert result["ok"] and result["mode"] == "dry-run" and not result["cut_by_budget"]
    steps = {step["name"]: step["figures"] for step in result["steps"]}
    # Honest figures: the window bites (rows longer than it), the peak is held against the
    # plan's total, and greedy speculative decoding was checked exact.
    over, rows = (int(n) for n in steps["train"]["rows_over_window"].split("/"))
    assert 0 < over <= rows
    assert steps["train"]["plan_memory_mib"] > 0 and steps["eval-builtin"]["greedy_mismatches"] == 0
    # The rest comes back as a tarball without weights.
    with tarfile.open(out / "gpu_smoke_rest.tar.gz") as archive:
        names = archive.getnames()
    assert "train/metrics.jsonl" in names and "acceptance-builtin.json" in names
    assert not [n for n in names if n.endswith((".safetensors", ".pt", ".bin"))], names
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
    # The DFlash2 variant: the same training, its own export and evals, and the table of both.
    assert steps["train-dflash2"]["architecture"] == "dflash2"
    assert steps["train-dflash2"]["steps"] == steps["train"]["steps"]
    assert steps["train-dflash2"]["last_selector_loss"] is not None
    assert steps["train"]["last_selector_loss"] is None
    assert steps["export-dflash2"]["architectures"] == ["DFlash2DraftModel"]
    assert steps["eval-builtin-dflash2"]["greedy_mismatches"] == 0
    assert steps["eval-sampled-dflash2"]["temperature"] == 0.6
    assert steps["eval-sampled-dflash2"]["architecture"] == "DFlash2DraftModel"
    # The chunk with the selector's top-K holds the plan's 16 B per logit (within 10%).
    chunk2 = steps["loss-vocab-dflash2"]
    assert abs(chunk2["bytes_per_logit"] / chunk2["plan_bytes_per_logit"] - 1) <= 0.1, chunk2
    table = result["architectures"]
    assert set(table) == {"acceptance greedy", "acceptance T=0.6", "step time (ms)",
                          "peak memory (MiB)"}  # fmt: skip
    for name, row in table.items():
        assert row["ratio"] == round(row["dflash2"] / row["dflash"], 3), name
    assert (
        table["acceptance greedy"]["dflash2"] == steps["eval-builtin-dflash2"]["acceptance_length"]
    )
    assert "DFlash vs DFlash2" in done.stdout and "| peak memory (MiB) |" in done.stdout


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


def build_fake_kit(folder: Path) -> Path:
    """A kit of one tiny wheel, its manifest as `gpu_smoke_kit.py build` writes it: the device
    wrapper installs it offline, then runs the smoke with the machine's (here: our) Python."""
    folder.mkdir()
    wheel = folder / "smokekit_probe-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("smokekit_probe/__init__.py", "")
        archive.writestr("smokekit_probe-1.0.dist-info/METADATA",
                         "Metadata-Version: 2.1\nName: smokekit-probe\nVersion: 1.0\n")  # fmt: skip
        archive.writestr("smokekit_probe-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
        archive.writestr("smokekit_probe-1.0.dist-info/RECORD", "")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    entry = {"name": wheel.name, "size": wheel.stat().st_size, "sha256": digest}
    (folder / "kit.json").write_text(json.dumps({"files": [entry]}))
    return folder


@pytest.mark.parametrize("budget_s", [1, 8])  # the whole dry run takes 20-320 s
def test_a_run_cut_by_its_budget_still_returns_its_steps_and_final_figures(
    tmp_path: Path, budget_s: int
) -> None:
    """The device wrapper under a forced short budget: the running step is stopped (or never
    started), the rest are skipped, and the four files come back; the run is not ok (exit 1)."""
    kit = build_fake_kit(tmp_path / "kit")
    out = tmp_path / "out"
    done = subprocess.run(
        ["bash", str(DEVICE_SCRIPT), "--dry-run", "--budget-s", str(budget_s)],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "OUT": str(out), "GPU_SMOKE_KIT": str(kit), "PYTHON": sys.executable,
             "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert {p.name for p in out.iterdir()} == OUT_FILES
    result = json.loads((out / "gpu_smoke.json").read_text())
    steps = json.loads((out / "steps.json").read_text())
    assert not result["ok"] and result["budget_s"] == budget_s
    assert [s["name"] for s in steps["steps"]] == STEPS == [s["name"] for s in result["steps"]]
    assert result["cut_by_budget"] and set(result["cut_by_budget"]) <= set(STEPS)
    assert all(s["detail"].startswith("budget:") for s in result["steps"]
               if s["name"] in result["cut_by_budget"])  # fmt: skip
    assert steps["running"] is None  # the last write was after the last step
    log = (out / "gpu_smoke.log").read_text()
    assert "cut by the budget" in log and "kit installed" in log


def test_regeneration_retries_with_static_batches_when_continuous_batching_fails(
    tmp_path: Path,
) -> None:
    """The training figures depend on regeneration: a transformers engine whose continuous
    batching fails on the machine gets one more try with `--batching static`."""
    import importlib.util
    from types import SimpleNamespace

    from dflash_trainer.data.regenerate.shard_store import ShardStore

    spec = importlib.util.spec_from_file_location("gpu_smoke", SCRIPT.with_suffix(".py"))
    assert spec and spec.loader
    smoke_module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_smoke"] = smoke_module
    spec.loader.exec_module(smoke_module)
    smoke = smoke_module.Smoke(smoke_module.DRY, tmp_path)
    smoke.state["target-qwen3"] = SimpleNamespace(path=tmp_path / "tiny")
    calls: list[tuple[str, ...]] = []

    def fake_cli(module: str, *args: str, log: str) -> None:
        calls.append(args)
        if len(calls) == 1:
            raise smoke_module.StepError("exit 1\nTypeError: unexpected keyword 'page_size'")
        commit = Path(ShardStore(str(tmp_path / "run-qwen3"), 0, 1).commit_uri)
        commit.parent.mkdir(parents=True, exist_ok=True)
        commit.write_text(json.dumps({"samples": smoke.sizes.prompts, "outputTokens": 64}))

    smoke.cli = fake_cli
    figures = smoke_module.regenerate(smoke, "qwen3")
    assert len(calls) == 2 and "--batching" not in calls[0]
    assert calls[1][-2:] == ("--batching", "static")
    assert "page_size" in figures["retried_static_after"]
    assert figures["samples"] == smoke.sizes.prompts

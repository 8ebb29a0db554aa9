"""One GPU smoke run of the whole trainer pipeline, every step timed, figures in one table.

Tiny random targets built here (nothing downloaded): regeneration of 256 prompts through the
project's regeneration CLI on a Qwen3 and a Qwen3.5 (Gated DeltaNet; fla kernels where `fla` is
importable, transformers' torch fallback otherwise) target, with vLLM where it is importable and
the transformers engine otherwise; tokenization; 50 bf16 training steps with the production
drafter's shapes at small depth (heads 256 wide, a sliding-window layer and a full one,
activation checkpointing, FSDP2 on one rank, flex attention with the kernel options chosen for
this GPU): step time, tokens/s, MFU, peak memory against the memory plan; a few steps on the
Gated DeltaNet target; the flex backward at width 256 with this GPU's options and with sm_12x's;
one loss chunk at a 248,320-token vocabulary (bytes per logit against the plan); export; and
acceptance with the project's eval (builtin engine, and vLLM `method: dflash` where importable).
A failed step is reported (name, first lines of its error) and the others run where they can;
exit 1 if any step failed. `--dry-run` runs the same steps on CPU (float32, dense/SDPA
attention, tiny sizes) in about a minute; tests/unit/trainer/test_gpu_smoke_script.py runs it.
Wrapper: bench/gpu_smoke.sh [--dry-run] [OUT_DIR] (default $OUT, else ./gpu-smoke-out), and
its --kit / --offline modes for an air-gapped machine (bench/gpu_smoke_kit.py).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
REGEN_DOCKERFILE = REPO / "images" / "regen" / "Dockerfile"
JSON_NAME = "gpu_smoke.json"
ERROR_LINES = 6
# The module holding each stage CLI's `main(argv)` (for the dry run's in-process calls).
CLI_MAINS = {
    "dflash_trainer.data.regenerate": "dflash_trainer.data.regenerate.cli",
    "dflash_trainer.data.tokenize": "dflash_trainer.data.tokenize.cli",
    "dflash_trainer.eval": "dflash_trainer.eval.__main__",
}  # lines of a failed step's error kept in the report


@dataclass(frozen=True)
class Sizes:
    """Everything the GPU run and the dry run do differently."""

    device: str
    dtype: str
    backend: str  # drafter attention: flex on GPU; auto is dense/SDPA on CPU
    engine: str  # regeneration engine
    prompts: int
    max_tokens: int
    hidden: int  # 256 with 4 heads: head_dim 64, the smallest vLLM's kernels take
    layers: int
    steps: int
    warmup: int  # excluded from step time (flex attention compiles on its first call)
    batch: int
    max_seq_len: int
    block: int
    drafter_layers: int
    eval_prompts: int
    eval_tokens: int
    # The production drafter's attention at small depth: heads as wide as the Qwen3.6-27B
    # drafter's, one sliding-window layer (window below max_seq_len so it bites) and one full.
    head_dim: int = 256
    sliding_window: int = 256
    # One loss chunk at the Qwen3.5/3.6 vocabulary: its rows (the default chunk on a GPU).
    loss_vocab: int = 248_320
    loss_rows: int = 1024
    hybrid_steps: int = 10


GPU = Sizes("cuda", "bfloat16", "flex", "vllm", 256, 128, 256, 8, 50, 5, 8, 512, 16, 2, 16, 128)
DRY = Sizes(
    "cpu", "float32", "auto", "transformers", 16, 16, 64, 8, 8, 2, 4, 96, 8, 2, 3, 16,
    head_dim=256, sliding_window=48, loss_rows=128, hybrid_steps=2,
)  # fmt: skip
# Trainer pods' allocator setting (operator children/pod.py); the plan's fragmentation assumes it.
ALLOC_CONF = ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")


@dataclass
class StepReport:
    name: str
    status: str = "PENDING"  # OK, FAILED or SKIPPED
    seconds: float = 0.0
    detail: str = ""
    figures: dict[str, Any] = field(default_factory=dict)


class SkipStepError(Exception):
    """A step that cannot run here; the message says why."""


class StepError(Exception):
    """A step that ran and failed; the message holds the first lines of what went wrong."""


@dataclass
class Smoke:
    sizes: Sizes
    out: Path
    python: str = sys.executable
    state: dict[str, Any] = field(default_factory=dict)
    reports: list[StepReport] = field(default_factory=list)

    def run_step(self, name: str, fn: Callable[[], dict[str, Any] | None]) -> StepReport:
        report = StepReport(name)
        print(f"--- {name}", flush=True)
        start = time.perf_counter()
        try:
            report.figures = fn() or {}
            report.status = "OK"
        except SkipStepError as exc:
            report.status, report.detail = "SKIPPED", str(exc)
        except (Exception, SystemExit) as exc:  # reported; the next step still runs
            report.status = "FAILED"
            text = str(exc) if isinstance(exc, StepError) else traceback.format_exc()
            report.detail = "\n".join(text.strip().splitlines()[-ERROR_LINES:])
        report.seconds = round(time.perf_counter() - start, 2)
        self.reports.append(report)
        tail = f": {report.detail}" if report.detail else ""
        print(f"    {report.status} in {report.seconds:.1f}s{tail}", flush=True)
        return report

    def need(self, key: str, step: str) -> Any:
        if key not in self.state:
            raise SkipStepError(f"needs the {step} step, which did not succeed")
        return self.state[key]

    def cli(self, module: str, *args: str, log: str) -> None:
        """`python -m module args`; stdout+stderr to OUT/logs/<log>.log; StepError on exit != 0.

        The dry run calls the same CLI's `main(argv)` in this process instead: on 2 busy cores
        each fresh interpreter spends ~15 s importing torch and transformers."""
        if self.sizes.device == "cpu":
            code = importlib.import_module(CLI_MAINS[module]).main(list(args))
            if code != 0:
                raise StepError(f"{module} exited {code}; its log lines are above")
            return
        logs = self.out / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        path = logs / f"{log}.log"
        with path.open("w") as handle:
            code = subprocess.run(
                [self.python, "-m", module, *args],
                stdout=handle,
                stderr=subprocess.STDOUT,
                check=False,
                env={**os.environ, "HF_HUB_OFFLINE": "1"},
            ).returncode
        if code != 0:
            lines = path.read_text(errors="replace").strip().splitlines()
            raise StepError("\n".join([f"exit {code} (log {path})", *lines[-ERROR_LINES + 1 :]]))


# -- steps ---------------------------------------------------------------------------------
def vllm_version() -> str:
    match = re.search(r"vllm/vllm-openai:v([\w.]+)", REGEN_DOCKERFILE.read_text())
    return match.group(1) if match else "<the tag in images/regen/Dockerfile>"


def vllm_importable() -> bool:
    return importlib.util.find_spec("vllm") is not None


def gdn_kernels() -> str:
    """What runs the Gated DeltaNet layers of the qwen3_5 target."""
    return "fla" if importlib.util.find_spec("fla") is not None else "torch fallback"


def build_target(smoke: Smoke, arch: str) -> dict[str, Any]:
    from dflash_trainer.tiny.build import build_tiny_target
    from dflash_trainer.tiny.model import TinySize
    from dflash_trainer.tiny.prompts import build_prompt_records

    s = smoke.sizes
    target = build_tiny_target(
        smoke.out / f"tiny-{arch}", arch=arch, size=TinySize(layers=s.layers, hidden=s.hidden)
    )
    prompts = smoke.out / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in build_prompt_records(s.prompts)))
    sources = smoke.out / "sources.yaml"
    sources.write_text(f"- {{name: smoke, uri: {prompts}, format: openai-messages}}\n")
    smoke.state[f"target-{arch}"] = target
    return {"vocab": target.vocab_size, "layers": target.layers, "hidden": target.hidden}


def regenerate(smoke: Smoke, arch: str) -> dict[str, Any]:
    from dflash_trainer.data.regenerate.shard_store import ShardStore
    from dflash_trainer.storage import read_json

    target = smoke.need(f"target-{arch}", f"build-{arch}")
    s = smoke.sizes
    # Without vLLM the transformers engine regenerates (on the GPU when there is one), so
    # every later step still runs; the report names the engine.
    engine = s.engine if s.engine != "vllm" or vllm_importable() else "transformers"
    root = smoke.out / f"run-{arch}"
    engine_args = (
        ["--gpu-memory-utilization", "0.3", "--enforce-eager"]
        if engine == "vllm"
        else ["--batch-size", "32" if s.device == "cuda" else "8"]
    )
    start = time.perf_counter()
    smoke.cli(
        "dflash_trainer.data.regenerate",
        "--run-root", str(root), "--sources", str(smoke.out / "sources.yaml"),
        "--model", str(target.path), "--engine", engine, "--dtype", s.dtype,
        "--max-tokens", str(s.max_tokens), "--termination-log", str(root / "regen.result.json"),
        *engine_args,
        log=f"regen-{arch}",
    )  # fmt: skip
    seconds = time.perf_counter() - start
    manifest = read_json(ShardStore(str(root), 0, 1).commit_uri)
    if manifest["samples"] != s.prompts or manifest["outputTokens"] <= 0:
        raise StepError(f"regenerated {manifest['samples']} of {s.prompts} prompts: {manifest}")
    smoke.state[f"run-{arch}"] = root
    return {
        "engine": engine,
        "samples": manifest["samples"],
        "output_tokens": manifest["outputTokens"],
        "output_tokens_per_s": round(manifest["outputTokens"] / seconds, 1),
    }


def tokenize(smoke: Smoke) -> dict[str, Any]:
    from dflash_trainer.storage import read_json

    root = smoke.need("run-qwen3", "regen-qwen3")
    target = smoke.state["target-qwen3"]
    smoke.cli(
        "dflash_trainer.data.tokenize",
        "--run-root", str(root), "--model", str(target.path),
        "--max-seq-len", str(smoke.sizes.max_seq_len), "--truncated-answers", "keep",
        "--max-new-tokens", str(smoke.sizes.max_tokens),
        "--termination-log", str(root / "tokenize.result.json"),
        log="tokenize",
    )  # fmt: skip
    manifest = read_json(str(root / "tokenized" / "_SUCCESS.json"))
    smoke.state["tokenized"] = root / "tokenized"
    return {"rows": manifest.get("samples")}


def build_drafter_section(smoke: Smoke, mask_token_id: int) -> dict[str, Any]:
    """The production drafter's attention at small depth: wide heads, one sliding-window layer
    and one full layer, activation checkpointing (the Qwen3.6-27B example's setting)."""
    s = smoke.sizes
    return {
        "num_layers": s.drafter_layers, "block_size": s.block, "mask_token_id": mask_token_id,
        "attention_backend": s.backend, "head_dim": s.head_dim, "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "layer_types": ["sliding_attention"] * (s.drafter_layers - 1) + ["full_attention"],
        "sliding_window": s.sliding_window, "activation_checkpointing": True,
    }  # fmt: skip


def init_one_rank_group(device: str) -> None:
    """A process group of one rank, so the drafter is wrapped in FSDP2 as in production."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return
    if device == "cuda":
        dist.init_process_group(
            "nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=torch.device("cuda", 0)
        )
    else:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def build_train_config(smoke: Smoke) -> Any:
    from dflash_trainer.train.config import TrainConfig

    s = smoke.sizes
    target = smoke.state["target-qwen3"]
    root = smoke.out / "train"
    return TrainConfig.model_validate({
        "run_root": str(root),
        "target": {"path": str(target.path), "dtype": s.dtype},
        "drafter": build_drafter_section(smoke, target.mask_token_id),
        "distributed": {"strategy": "fsdp2"},
        "data": {"tokenized_uri": str(smoke.state["tokenized"]), "max_seq_len": s.max_seq_len,
                 "batch_size": s.batch},
        "objective": {"anchors_per_sequence": s.max_seq_len // 4},
        "optim": {"lr": 3e-3, "max_steps": s.steps, "warmup_ratio": 0.0},
        "checkpoint": {"every_steps": 10_000, "resume": False},
        "export": {"dtype": "bfloat16" if s.device == "cuda" else "float32"},
        "logging": {"every_steps": 10, "metrics_file": str(root / "metrics.jsonl")},
    })  # fmt: skip


def longest_row(tokenized: Path) -> int:
    import pyarrow.parquet as pq

    return max(
        int(max(pq.read_table(shard, columns=["seq_len"]).column("seq_len").to_pylist() or [0]))
        for shard in sorted(tokenized.glob("*.parquet"))
    )


def plan_bytes(cfg: Any, device: str, longest: int) -> int:
    """The memory plan's peak of live tensors for the same shapes (no CUDA workspace). The plan
    pads every row to max_seq_len; the batches here are no longer than the longest row."""
    from dflash_memplan.estimate import estimate_rank_memory
    from dflash_trainer.plan.inputs import build_plan_inputs, resolve_target_shape

    seq = min(cfg.data.max_seq_len, longest)
    cfg = cfg.model_copy(update={"data": cfg.data.model_copy(update={"max_seq_len": seq})})
    inputs = build_plan_inputs(cfg, resolve_target_shape(cfg, None), 1, device)
    return estimate_rank_memory(inputs.target, inputs.drafter, inputs.setup).tensor_bytes


def train(smoke: Smoke) -> dict[str, Any]:
    import numpy as np
    import torch
    from bench_trainer_gpu import count_step_flops, peak_tflops
    from dflash_trainer.plan.meter import LiveTensorMeter
    from dflash_trainer.train.distributed import init_distributed
    from dflash_trainer.train.step import build_micro_batch
    from dflash_trainer.train.trainer import Trainer

    smoke.need("tokenized", "tokenize")
    s = smoke.sizes
    if s.device == "cuda" and not torch.cuda.is_available():
        raise StepError("no CUDA GPU visible (run with --dry-run on CPU)")
    torch.manual_seed(0)
    cfg = build_train_config(smoke)
    init_one_rank_group(s.device)
    env = init_distributed(cfg.distributed.timeout_minutes)
    device = env.device
    trainer = Trainer(cfg, env)
    smoke.state["trainer"] = trainer
    # Warm up (flex compiles on its first call), then time the remaining steps. On CPU the
    # peak is counted over the warmup steps (the meter slows every op, so not while timed).
    meter = LiveTensorMeter()
    meter.track(p for module in (trainer.target.model, trainer.model) for p in module.parameters())
    trainer.total_steps = s.warmup
    if device.type == "cuda":
        trainer.train_steps()
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        torch.cuda.empty_cache()
    else:
        with meter:
            trainer.train_steps()
    trainer.total_steps = s.steps
    start = time.perf_counter()
    trainer.train_steps()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    step_s = (time.perf_counter() - start) / (s.steps - s.warmup)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else meter.peak_bytes
    reserved = torch.cuda.max_memory_reserved(device) if device.type == "cuda" else None
    metrics = [json.loads(line) for line in Path(cfg.logging.metrics_file).read_text().splitlines()]
    timed = metrics[s.warmup :]
    mb = build_micro_batch(trainer.rows, np.arange(s.batch), 0, trainer.settings, device)
    module = getattr(trainer.model, "module", trainer.model)
    target_flops, drafter_flops = count_step_flops(trainer.target, trainer.drafter_cfg, module, mb)
    planned = plan_bytes(cfg, device.type, longest_row(smoke.state["tokenized"]))
    try:
        peak_flops: float | None = peak_tflops(device, None) * 1e12
    except SystemExit as exc:  # a GPU missing from the datasheet table: no MFU, say why
        print(f"    MFU not computed: {exc}", flush=True)
        peak_flops = None
    mfu = (target_flops + drafter_flops) / step_s / peak_flops if peak_flops else None
    return {
        "steps": s.steps,
        "timed_steps": len(timed),
        "step_ms": round(step_s * 1e3, 2),
        "tokens_per_s": round(statistics.median(m["tokensPerSecond"] for m in timed), 1),
        "tflops_per_step": round((target_flops + drafter_flops) / 1e12, 6),
        "mfu": round(mfu, 6) if mfu and device.type == "cuda" else None,  # no CPU peak
        "peak_memory_mib": round(peak / 2**20, 2),
        "plan_memory_mib": round(planned / 2**20, 2),
        "peak_over_plan": round(peak / planned, 3),
        # What the caching allocator held at most over what tensors used: its fragmentation
        # under expandable segments (the plan allows 5%).
        "reserved_over_allocated": round(reserved / peak, 3) if reserved else None,
        "wrapped": type(trainer.model).__name__,
        "first_loss": round(metrics[0]["loss"], 4),
        "last_loss": round(metrics[-1]["loss"], 4),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
    }


def train_hybrid(smoke: Smoke) -> dict[str, Any]:
    """A few steps on the Gated DeltaNet target (fla or the torch fallback), self-distilled."""
    import torch
    from dflash_trainer.train.config import TrainConfig
    from dflash_trainer.train.distributed import init_distributed
    from dflash_trainer.train.trainer import Trainer

    s = smoke.sizes
    target = smoke.need("target-qwen3_5", "build-qwen3_5")
    init_one_rank_group(s.device)
    cfg = TrainConfig.model_validate({
        "run_root": str(smoke.out / "train-qwen3_5"),
        "target": {"path": str(target.path), "dtype": s.dtype},
        "drafter": build_drafter_section(smoke, target.mask_token_id),
        "distributed": {"strategy": "fsdp2"},
        "data": {"self_distill": {"samples": s.batch * s.hybrid_steps, "prompt_tokens": 16,
                                  "answer_tokens": 48}, "max_seq_len": 64, "batch_size": s.batch},
        "objective": {"anchors_per_sequence": 16},
        "optim": {"lr": 3e-3, "max_steps": s.hybrid_steps, "warmup_ratio": 0.0},
        "checkpoint": {"every_steps": 10_000, "resume": False},
        "logging": {"every_steps": 1, "metrics_file": str(smoke.out / "train-qwen3_5.jsonl")},
    })  # fmt: skip
    trainer = Trainer(cfg, init_distributed(cfg.distributed.timeout_minutes))
    start = time.perf_counter()
    trainer.train_steps()
    seconds = time.perf_counter() - start
    del trainer
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return {"steps": s.hybrid_steps, "step_ms": round(seconds / s.hybrid_steps * 1e3, 1),
            "gdn_kernels": gdn_kernels()}  # fmt: skip


def flex_256(smoke: Smoke) -> dict[str, Any]:
    """The flex backward at head width 256: this GPU's kernel options (model/flex_options.py)
    and sm_12x's (the RTX PRO 6000 rule), each against the chunked SDPA kernel."""
    import torch
    from dflash_trainer.model import block_attention as ba
    from dflash_trainer.model.flex_options import SMALL_TILE_BACKWARD, matching_rules, torch_release

    if smoke.sizes.device != "cuda":
        raise SkipStepError("flex attention is compiled for the GPU (the dry run uses SDPA)")
    device = torch.device("cuda", 0)
    torch.manual_seed(0)
    seq, anchors, block, heads, width = 1024, 64, 16, 4, 256
    layout = ba.BlockLayout(
        torch.sort(torch.randint(1, seq - block, (1, anchors), device=device)).values, seq, block
    )
    keys = seq + anchors * block

    def grads(backend: str, options: dict[str, int] | None) -> tuple[list[Any], float]:
        torch.manual_seed(1)
        q = torch.randn(1, heads, anchors * block, width, device=device, dtype=torch.bfloat16)
        k, v = (torch.randn(1, 2, keys, width, device=device, dtype=torch.bfloat16)
                for _ in range(2))  # fmt: skip
        tensors = [t.requires_grad_() for t in (q, k, v)]
        saved = dict(ba._KERNEL_OPTIONS)
        if options is not None:
            ba._KERNEL_OPTIONS[(str(device), width, 2)] = options
        try:
            for _ in range(2):  # the first call compiles
                for t in tensors:
                    t.grad = None
                torch.cuda.synchronize(device)
                start = time.perf_counter()
                ba.block_attention(
                    *tensors, layout, backend=backend, window=None
                ).float().square().sum().backward()
                torch.cuda.synchronize(device)
        finally:
            ba._KERNEL_OPTIONS.clear()
            ba._KERNEL_OPTIONS.update(saved)
        return [t.grad.float() for t in tensors], (time.perf_counter() - start) * 1e3

    reference, sdpa_ms = grads("sdpa", None)
    chosen, chosen_ms = grads("flex", None)
    forced, forced_ms = grads("flex", SMALL_TILE_BACKWARD)
    worst = max(
        float((a - r).abs().max() / r.abs().max().clamp_min(1e-6))
        for got in (chosen, forced) for a, r in zip(got, reference, strict=True)
    )  # fmt: skip
    capability = torch.cuda.get_device_capability(device)
    rules = [r.name for r in matching_rules(capability, width, torch_release(torch.__version__))]
    if worst > 0.05:
        raise StepError(f"flex gradients differ from SDPA's by {worst:.3f} of their scale")
    return {"capability": f"sm_{capability[0]}{capability[1]}", "rules": rules or "none",
            "fwd_bwd_ms_this_gpu": round(chosen_ms, 2), "fwd_bwd_ms_sm12x_options":
            round(forced_ms, 2), "fwd_bwd_ms_sdpa": round(sdpa_ms, 2),
            "max_grad_diff_vs_sdpa": round(worst, 5)}  # fmt: skip


def loss_vocab(smoke: Smoke) -> dict[str, Any]:
    """One loss chunk at the Qwen3.5/3.6 vocabulary: the bytes its backward holds per logit
    (against the plan's LOSS_BYTES_PER_LOGIT) and its time."""
    import contextlib

    import torch
    from dflash_memplan.estimate import LOSS_BYTES_PER_LOGIT
    from dflash_trainer.plan.meter import LiveTensorMeter
    from dflash_trainer.train.loss import build_block_loss

    s = smoke.sizes
    device = torch.device(s.device, 0) if s.device == "cuda" else torch.device("cpu")
    dtype = torch.bfloat16 if s.device == "cuda" else torch.float32
    hidden_size, rows, vocab = 1024, s.loss_rows, s.loss_vocab
    torch.manual_seed(0)
    hidden = torch.randn(1, rows, hidden_size, device=device, requires_grad=True)
    weight = (torch.randn(vocab, hidden_size, device=device) * 0.02).to(dtype)
    labels = torch.randint(0, vocab, (1, rows), device=device)
    weights = torch.ones(1, rows, device=device)
    mixed = (torch.autocast("cuda", dtype=torch.bfloat16) if s.device == "cuda"
             else contextlib.nullcontext())  # fmt: skip
    meter = LiveTensorMeter()
    with meter if s.device == "cpu" else contextlib.nullcontext():
        with mixed:
            parts = build_block_loss(hidden, weight, labels, weights, block_size=16,
                                     normaliser=1.0, chunk_tokens=rows)  # fmt: skip
        if s.device == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
        else:
            before = meter.current_bytes
            meter.reset_peak()
        start = time.perf_counter()
        parts.scaled_loss.backward()
        if s.device == "cuda":
            torch.cuda.synchronize(device)
            peak = torch.cuda.max_memory_allocated(device)
        else:
            peak = meter.peak_bytes
    seconds = time.perf_counter() - start
    per_logit = (peak - before) / (rows * vocab)
    return {"vocab": vocab, "rows": rows, "bytes_per_logit": round(per_logit, 2),
            "plan_bytes_per_logit": LOSS_BYTES_PER_LOGIT, "backward_ms": round(seconds * 1e3, 2)}  # fmt: skip


def monitor_vocab(smoke: Smoke) -> dict[str, Any]:
    """The likelihood monitor's LM head at the Qwen3.5/3.6 vocabulary: `score_positions` on two
    chunks of rows in the target's dtype, the bytes it holds per logit of one chunk (against
    the plan's MONITOR_HEAD_BYTES_PER_LOGIT: one chunk's tensors at a time) and its time."""
    import contextlib

    import torch
    from dflash_memplan.estimate import MONITOR_HEAD_BYTES_PER_LOGIT
    from dflash_trainer.data.likelihood.hf_scorer import score_positions
    from dflash_trainer.data.likelihood.rule import SamplingRule
    from dflash_trainer.plan.meter import LiveTensorMeter

    s = smoke.sizes
    device = torch.device(s.device, 0) if s.device == "cuda" else torch.device("cpu")
    dtype = torch.bfloat16 if s.device == "cuda" else torch.float32
    hidden_size, rows, vocab = 1024, s.loss_rows, s.loss_vocab
    torch.manual_seed(0)
    head = torch.nn.Linear(hidden_size, vocab, bias=False, device=device, dtype=dtype)
    hidden = torch.randn(2 * rows, hidden_size, device=device, dtype=dtype)
    targets = torch.randint(0, vocab, (2 * rows,), device=device)
    meter = LiveTensorMeter()
    meter.track([head.weight, hidden, targets])  # counted before, so views of them are not new
    with meter if s.device == "cpu" else contextlib.nullcontext():
        if s.device == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
        else:
            before = meter.current_bytes
            meter.reset_peak()
        start = time.perf_counter()
        scores = score_positions(hidden, targets, head, SamplingRule(), chunk_rows=rows)
        if s.device == "cuda":
            torch.cuda.synchronize(device)
            peak = torch.cuda.max_memory_allocated(device)
        else:
            peak = meter.peak_bytes
    seconds = time.perf_counter() - start
    if scores.lp.shape[0] != 2 * rows:
        raise StepError(f"score_positions scored {scores.lp.shape[0]} of {2 * rows} positions")
    per_logit = (peak - before) / (rows * vocab)
    return {"vocab": vocab, "rows": rows, "chunks": 2, "bytes_per_logit": round(per_logit, 2),
            "plan_bytes_per_logit": MONITOR_HEAD_BYTES_PER_LOGIT,
            "ms_per_chunk": round(seconds * 1e3 / 2, 2)}  # fmt: skip


def export(smoke: Smoke) -> dict[str, Any]:
    import torch
    from dflash_trainer.model.export import drafter_config_from_export
    from dflash_trainer.storage import read_json

    trainer = smoke.need("trainer", "train")
    uri = trainer.export()
    config = drafter_config_from_export(read_json(str(Path(uri) / "config.json")))
    weights = sorted(p.name for p in Path(uri).glob("*.safetensors"))
    if not weights:
        raise StepError(f"no *.safetensors in the export {uri}")
    smoke.state["final"] = Path(uri)
    del smoke.state["trainer"], trainer
    gc.collect()  # free the GPU for vLLM in the next steps
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return {"uri": uri, "block_size": config.block_size, "files": weights}


def evaluate(smoke: Smoke, engine: str) -> dict[str, Any]:
    s = smoke.sizes
    if engine == "vllm":
        if s.device != "cuda":
            raise SkipStepError(
                "vLLM method: dflash needs a GPU (the dry run measures the builtin engine)"
            )
        if importlib.util.find_spec("vllm") is None:
            raise SkipStepError(f"vLLM is not installed (uv pip install vllm=={vllm_version()})")
    final = smoke.need("final", "export")
    target = smoke.state["target-qwen3"]
    out = smoke.out / f"acceptance-{engine}.json"
    config = {
        "run_root": str(smoke.out / "train"),
        "target": {"path": str(target.path), "dtype": s.dtype},
        "drafter_uri": str(final),
        "prompts": {"tokenized_uri": str(smoke.state["tokenized"]), "num_prompts": s.eval_prompts,
                    "max_prompt_tokens": s.max_seq_len // 2},
        "max_new_tokens": s.eval_tokens,
        "engine": "builtin" if engine == "builtin" else "vllm",
        "check_greedy": s.device == "cuda",  # the check decodes every prompt twice more
        "update_model_card": engine == "builtin",
        "output_uri": str(out),
        "vllm": {"gpu_memory_utilization": 0.3, "max_model_len": 1024},
    }  # fmt: skip
    path = smoke.out / f"eval-{engine}.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    smoke.cli(
        "dflash_trainer.eval", "--config", str(path),
        "--termination-log", str(smoke.out / f"eval-{engine}.result.json"),
        log=f"eval-{engine}",
    )  # fmt: skip
    report = json.loads(out.read_text())
    return {"acceptance_length": round(report["acceptanceLength"], 3), "prompts": report["prompts"]}


# -- the run -------------------------------------------------------------------------------
def run_all(smoke: Smoke) -> None:
    smoke.run_step("build-qwen3", lambda: build_target(smoke, "qwen3"))
    smoke.run_step("regen-qwen3", lambda: regenerate(smoke, "qwen3"))
    smoke.run_step("tokenize", lambda: tokenize(smoke))
    smoke.run_step("build-qwen3_5", lambda: build_target(smoke, "qwen3_5"))
    smoke.run_step("regen-qwen3_5", lambda: regenerate(smoke, "qwen3_5"))
    smoke.run_step("train", lambda: train(smoke))
    smoke.run_step("export", lambda: export(smoke))
    smoke.run_step("train-qwen3_5", lambda: train_hybrid(smoke))
    smoke.run_step("flex-256", lambda: flex_256(smoke))
    smoke.run_step("loss-vocab", lambda: loss_vocab(smoke))
    smoke.run_step("monitor-vocab", lambda: monitor_vocab(smoke))
    smoke.run_step("eval-builtin", lambda: evaluate(smoke, "builtin"))
    smoke.run_step("eval-vllm", lambda: evaluate(smoke, "vllm"))


def figure(smoke: Smoke, step: str, key: str) -> Any:
    report = next((r for r in smoke.reports if r.name == step), None)
    return report.figures.get(key) if report else None


def build_figures(smoke: Smoke) -> dict[str, Any]:
    return {
        "regen_engine": figure(smoke, "regen-qwen3", "engine"),
        "regen_qwen3_output_tokens_per_s": figure(smoke, "regen-qwen3", "output_tokens_per_s"),
        "regen_qwen3_5_output_tokens_per_s": figure(smoke, "regen-qwen3_5", "output_tokens_per_s"),
        "train_tokens_per_s": figure(smoke, "train", "tokens_per_s"),
        "train_step_ms": figure(smoke, "train", "step_ms"),
        "train_mfu": figure(smoke, "train", "mfu"),
        "peak_memory_mib": figure(smoke, "train", "peak_memory_mib"),
        "plan_memory_mib": figure(smoke, "train", "plan_memory_mib"),
        "peak_over_plan": figure(smoke, "train", "peak_over_plan"),
        "reserved_over_allocated": figure(smoke, "train", "reserved_over_allocated"),
        "train_qwen3_5_step_ms": figure(smoke, "train-qwen3_5", "step_ms"),
        "gdn_kernels": figure(smoke, "train-qwen3_5", "gdn_kernels"),
        "flex256_ms_this_gpu": figure(smoke, "flex-256", "fwd_bwd_ms_this_gpu"),
        "flex256_ms_sm12x_options": figure(smoke, "flex-256", "fwd_bwd_ms_sm12x_options"),
        "flex256_max_grad_diff": figure(smoke, "flex-256", "max_grad_diff_vs_sdpa"),
        "loss_bytes_per_logit": figure(smoke, "loss-vocab", "bytes_per_logit"),
        "monitor_bytes_per_logit": figure(smoke, "monitor-vocab", "bytes_per_logit"),
        "acceptance_builtin": figure(smoke, "eval-builtin", "acceptance_length"),
        "acceptance_vllm_dflash": figure(smoke, "eval-vllm", "acceptance_length"),
    }


def format_table(smoke: Smoke, figures: dict[str, Any]) -> list[str]:
    lines = [f"{'step':<15} {'status':<8} {'seconds':>8}  detail"]
    for r in smoke.reports:
        detail = r.detail.splitlines()[0][:90] if r.detail else ""
        lines.append(f"{r.name:<15} {r.status:<8} {r.seconds:>8.1f}  {detail}")
    lines.append("")
    lines.append(f"{'figure':<34} value")
    for key, value in figures.items():
        lines.append(f"{key:<34} {'-' if value is None else value}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "out", nargs="?", help="output folder (default: $OUT, else ./gpu-smoke-out)"
    )
    parser.add_argument("--dry-run", action="store_true", help="CPU, transformers engine, float32")
    args = parser.parse_args(argv)
    if args.dry_run:  # the CPU path even on a GPU machine (training picks CUDA when it sees one)
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ.setdefault(*ALLOC_CONF)  # before torch is imported, as in a trainer pod
    out = Path(args.out or os.environ.get("OUT") or "gpu-smoke-out").resolve()
    out.mkdir(parents=True, exist_ok=True)
    smoke = Smoke(DRY if args.dry_run else GPU, out)
    started = time.perf_counter()
    run_all(smoke)
    figures = build_figures(smoke)
    failed = [r.name for r in smoke.reports if r.status == "FAILED"]
    result = {
        "mode": "dry-run" if args.dry_run else "gpu",
        "sizes": asdict(smoke.sizes),
        "seconds": round(time.perf_counter() - started, 1),
        "ok": not failed,
        "failed": failed,
        "figures": figures,
        "steps": [asdict(r) for r in smoke.reports],
    }
    (out / JSON_NAME).write_text(json.dumps(result, indent=2, default=str) + "\n")
    print("\n".join(format_table(smoke, figures)))
    print(f"total {result['seconds']}s; JSON at {out / JSON_NAME}")
    if failed:
        print(f"FAILED steps: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""One GPU smoke run of the whole trainer pipeline, every step timed, figures in one table.

Tiny random targets built here (nothing downloaded): regeneration of 256 prompts through the
project's regeneration CLI on a Qwen3 and a Qwen3.5 (Gated DeltaNet; fla kernels where `fla` is
importable, transformers' torch fallback otherwise) target, with vLLM where it is importable and
the transformers engine otherwise; tokenization; 40 bf16 training steps with the production
drafter's shapes at small depth (heads 256 wide, a sliding-window layer and a full one,
activation checkpointing, FSDP2 on one rank, flex attention with the kernel options chosen for
this GPU): step time, tokens/s, MFU, peak memory against the memory plan; a few steps on the
Gated DeltaNet target; the flex backward at width 256 with this GPU's options and with sm_12x's;
one loss chunk at a 248,320-token vocabulary (bytes per logit against the plan), DFlash's and
DFlash2's; export; and acceptance with the project's eval (builtin engine, and vLLM
`method: dflash` where importable). The same 40 steps train a DFlash2 drafter on the same
target, data and seed, and both are evaluated greedy and at T = 0.6: the DFlash vs DFlash2
table (bench/gpu_smoke_compare.py; ratios DFlash2 / DFlash) fails the run when a figure of it
is missing. A failed step is reported (name, first lines of its error) and the others run
where they can; exit 1 if any step failed or was cut by the budget. `--dry-run` runs the same
steps on CPU (float32, dense/SDPA attention, tiny sizes) in a few minutes;
tests/unit/trainer/test_gpu_smoke_script.py runs it.

Built for a lent GPU machine's limits (issue 29): the run boxes itself in `--budget-s` (a step
that would start too late is SKIPPED, one that runs past the budget is stopped), the steps whose
figures matter most run first (train, flex-256, loss-vocab, export, the DFlash2 variant,
acceptance and the DFlash vs DFlash2 table), and the output
folder gets at most four files: `steps.json` (rewritten after every step, so a run killed from
outside still returns what it measured), `gpu_smoke.json` (the final figures), the tarball
`gpu_smoke_rest.tar.gz` of the work folder without weights, and the log its wrapper writes.
Wrappers: bench/gpu_smoke_device.sh (the GPU machine, kit carried as .gpu-kit) and
bench/gpu_smoke.sh [--dry-run] [OUT_DIR] with its --kit / --offline modes.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib
import importlib.util
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
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
STEPS_NAME = "steps.json"
TARBALL_NAME = "gpu_smoke_rest.tar.gz"
# The wrapper's log (bench/gpu_smoke_device.sh tees into it): the fourth file of the output.
LOG_NAME = "gpu_smoke.log"
# What a lent GPU machine returns: at most 8 files of 16 MiB. The tarball stays well inside.
TARBALL_BUDGET_BYTES = 12 << 20
# Weights and checkpoints stay out of the tarball (the figures are in the JSON).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".distcp", ".ckpt")
# The default time box: the device runs one command for at most 600 s; the kit's install and
# the interpreter's start take about 30 s of it, and the tarball a few more. 480 since the
# DFlash2 variant (a second training, export and three more evals) joined the run.
DEFAULT_BUDGET_S = 480.0
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
    # drafter's, one sliding-window layer and one full. The window must be shorter than the
    # rows (the train step checks that some are longer, else the window never bites).
    head_dim: int = 256
    sliding_window: int = 128
    # One loss chunk at the Qwen3.5/3.6 vocabulary: its rows (the default chunk on a GPU).
    loss_vocab: int = 248_320
    loss_rows: int = 1024
    hybrid_steps: int = 10


# 160 new tokens after prompts of 20-60: rows of about 180-220 tokens, over the 128 window.
# 40 steps (5 of warmup) per architecture: two trainings where one of 50 was, inside the budget.
GPU = Sizes("cuda", "bfloat16", "flex", "vllm", 256, 160, 256, 8, 40, 5, 8, 512, 16, 2, 16, 128)
DRY = Sizes(
    "cpu", "float32", "auto", "transformers", 16, 16, 64, 8, 8, 2, 4, 96, 8, 2, 3, 16,
    head_dim=256, sliding_window=48, loss_rows=128, hybrid_steps=2,
)  # fmt: skip
# Trainer pods' allocator setting (operator children/pod.py); the plan's fragmentation assumes it.
ALLOC_CONF = ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
# DFlash2's knobs in the comparison: speculators 0.9.0's defaults, the trainer's and the CRD's
# (train.yaml `drafter.dflash2: {}`); the block size stays DFlash's, so that the architecture is
# the only difference. The sampled evals' temperature, as bench_drafter_architectures.py's.
DFLASH2_SECTION: dict[str, Any] = {}
SAMPLED_TEMPERATURE = 0.6


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
    """A step that ran and failed; the message holds the first lines of what went wrong, and
    `figures` what it measured before it failed (kept in the report)."""

    def __init__(self, message: str, figures: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.figures = figures or {}


# The start of the detail of a step the time box skipped or stopped.
BUDGET_SKIP = "budget:"


class BudgetExceededError(Exception):
    """The run's time box ended while a step was running."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise BudgetExceededError(f"{BUDGET_SKIP} the run's time budget ended during this step")


@dataclass
class Smoke:
    """One run: `work` holds what the steps write, `out` only the run's four files."""

    sizes: Sizes
    out: Path
    work: Path | None = None
    budget_s: float = float("inf")
    python: str = sys.executable
    state: dict[str, Any] = field(default_factory=dict)
    reports: list[StepReport] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        self.work = self.work or self.out

    @property
    def remaining_s(self) -> float:
        return self.budget_s - (time.perf_counter() - self.started)

    def run_step(
        self, name: str, fn: Callable[[], dict[str, Any] | None], min_s: float = 0.0
    ) -> StepReport:
        """Run one step inside what is left of the budget; `min_s`: the least it takes, so a
        step that cannot finish in time is skipped rather than cut."""
        report = StepReport(name)
        print(f"--- {name}", flush=True)
        left = self.remaining_s
        if left < max(min_s, 1.0):
            report.status = "SKIPPED"
            needs = f", the step needs about {min_s:.0f} s" if min_s else ""
            report.detail = f"{BUDGET_SKIP} {max(left, 0):.0f} s of the budget left{needs}"
            return self._record(report)
        self.write_steps(running=name)
        start = time.perf_counter()
        previous = signal.signal(signal.SIGALRM, _on_alarm)
        if left != float("inf"):
            signal.setitimer(signal.ITIMER_REAL, left)
        try:
            report.figures = fn() or {}
            report.status = "OK"
        except SkipStepError as exc:
            report.status, report.detail = "SKIPPED", str(exc)
        except (Exception, SystemExit) as exc:  # reported; the next step still runs
            report.status = "FAILED"
            if isinstance(exc, StepError):
                report.figures = exc.figures
            known = isinstance(exc, (StepError, BudgetExceededError))
            text = str(exc) if known else traceback.format_exc()
            report.detail = "\n".join(text.strip().splitlines()[-ERROR_LINES:])
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        report.seconds = round(time.perf_counter() - start, 2)
        return self._record(report)

    def _record(self, report: StepReport) -> StepReport:
        self.reports.append(report)
        tail = f": {report.detail}" if report.detail else ""
        print(f"    {report.status} in {report.seconds:.1f}s{tail}", flush=True)
        self.write_steps()
        return report

    def write_steps(self, running: str | None = None) -> None:
        """OUT/steps.json, rewritten (atomically) before and after every step."""
        write_json(self.out / STEPS_NAME, {
            "mode": "dry-run" if self.sizes.device == "cpu" else "gpu",
            "budget_s": self.budget_s, "elapsed_s": round(time.perf_counter() - self.started, 1),
            "running": running, "steps": [asdict(r) for r in self.reports],
        })  # fmt: skip

    @property
    def dir(self) -> Path:
        """Where the steps write (targets, runs, logs): the work folder."""
        assert self.work is not None
        return self.work

    def need(self, key: str, step: str) -> Any:
        if key not in self.state:
            raise SkipStepError(f"needs the {step} step, which did not succeed")
        return self.state[key]

    def cli(self, module: str, *args: str, log: str) -> None:
        """`python -m module args`; stdout+stderr to WORK/logs/<log>.log; StepError on exit != 0.

        The dry run calls the same CLI's `main(argv)` in this process instead: on 2 busy cores
        each fresh interpreter spends ~15 s importing torch and transformers."""
        if self.sizes.device == "cpu":
            code = importlib.import_module(CLI_MAINS[module]).main(list(args))
            if code != 0:
                raise StepError(f"{module} exited {code}; its log lines are above")
            return
        logs = self.dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        path = logs / f"{log}.log"
        with path.open("w") as handle:
            child = subprocess.Popen(
                [self.python, "-m", module, *args],
                stdout=handle,
                stderr=subprocess.STDOUT,
                env={**os.environ, "HF_HUB_OFFLINE": "1"},
            )
            try:
                code = child.wait()
            finally:  # the budget's alarm: the child goes with the step
                if child.poll() is None:
                    child.kill()
                    child.wait()
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
        smoke.dir / f"tiny-{arch}", arch=arch, size=TinySize(layers=s.layers, hidden=s.hidden)
    )
    prompts = smoke.dir / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in build_prompt_records(s.prompts)))
    sources = smoke.dir / "sources.yaml"
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
    root = smoke.dir / f"run-{arch}"
    engine_args = (
        ["--gpu-memory-utilization", "0.3", "--enforce-eager"]
        if engine == "vllm"
        else ["--batch-size", "32" if s.device == "cuda" else "8"]
    )

    def run(*extra: str) -> float:
        start = time.perf_counter()
        smoke.cli(
            "dflash_trainer.data.regenerate",
            "--run-root", str(root), "--sources", str(smoke.dir / "sources.yaml"),
            "--model", str(target.path), "--engine", engine, "--dtype", s.dtype,
            "--max-tokens", str(s.max_tokens), "--termination-log",
            str(root / "regen.result.json"), *engine_args, *extra,
            log=f"regen-{arch}{'-'.join(['', *extra[1:]])}",
        )  # fmt: skip
        return time.perf_counter() - start

    retried = None
    try:
        seconds = run()
    except StepError as exc:
        if engine != "transformers":
            raise
        # The training figures depend on this step: where transformers' continuous batching
        # fails on this machine, static batches of `generate` still give the rows (the first
        # error is kept in the figures).
        retried = str(exc).splitlines()[-1][:300]
        print(f"    continuous batching failed ({retried}); again with --batching static")
        seconds = run("--batching", "static")
    manifest = read_json(ShardStore(str(root), 0, 1).commit_uri)
    if manifest["samples"] != s.prompts or manifest["outputTokens"] <= 0:
        raise StepError(f"regenerated {manifest['samples']} of {s.prompts} prompts: {manifest}")
    smoke.state[f"run-{arch}"] = root
    return {
        "engine": engine,
        "samples": manifest["samples"],
        "output_tokens": manifest["outputTokens"],
        "output_tokens_per_s": round(manifest["outputTokens"] / seconds, 1),
        "retried_static_after": retried,
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


def build_drafter_section(
    smoke: Smoke, mask_token_id: int, architecture: str = "dflash"
) -> dict[str, Any]:
    """The production drafter's attention at small depth: wide heads, one sliding-window layer
    and one full layer, activation checkpointing (the Qwen3.6-27B example's setting); DFlash2
    adds its section and nothing else."""
    s = smoke.sizes
    extra = {"dflash2": DFLASH2_SECTION} if architecture == "dflash2" else {}
    return extra | {
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


def suffix(architecture: str) -> str:
    """What the DFlash2 variant's step names, state keys and folders end with."""
    return "" if architecture == "dflash" else f"-{architecture}"


def build_train_config(smoke: Smoke, architecture: str = "dflash") -> Any:
    from dflash_trainer.train.config import TrainConfig

    s = smoke.sizes
    target = smoke.state["target-qwen3"]
    root = smoke.dir / f"train{suffix(architecture)}"
    return TrainConfig.model_validate({
        "run_root": str(root),
        "target": {"path": str(target.path), "dtype": s.dtype},
        "drafter": build_drafter_section(smoke, target.mask_token_id, architecture),
        "distributed": {"strategy": "fsdp2"},
        "data": {"tokenized_uri": str(smoke.state["tokenized"]), "max_seq_len": s.max_seq_len,
                 "batch_size": s.batch},
        "objective": {"anchors_per_sequence": s.max_seq_len // 4},
        "optim": {"lr": 3e-3, "max_steps": s.steps, "warmup_ratio": 0.0},
        "checkpoint": {"every_steps": 10_000, "resume": False},
        "export": {"dtype": "bfloat16" if s.device == "cuda" else "float32"},
        "logging": {"every_steps": 10, "metrics_file": str(root / "metrics.jsonl")},
    })  # fmt: skip


def row_lengths(tokenized: Path) -> list[int]:
    import pyarrow.parquet as pq

    return [
        int(n)
        for shard in sorted(tokenized.glob("*.parquet"))
        for n in pq.read_table(shard, columns=["seq_len"]).column("seq_len").to_pylist()
    ]


def plan_estimate(cfg: Any, device: str, longest: int) -> Any:
    """The memory plan for the same shapes. The plan pads every row to max_seq_len; the batches
    here are no longer than the longest row."""
    from dflash_memplan.estimate import estimate_rank_memory
    from dflash_trainer.plan.inputs import build_plan_inputs, resolve_target_shape

    seq = min(cfg.data.max_seq_len, longest)
    cfg = cfg.model_copy(update={"data": cfg.data.model_copy(update={"max_seq_len": seq})})
    inputs = build_plan_inputs(cfg, resolve_target_shape(cfg, None), 1, device)
    return estimate_rank_memory(inputs.target, inputs.drafter, inputs.setup)


def device_peak_bytes(device: Any) -> tuple[int, int]:
    """(what the process held on the GPU at its peak, outside the caching allocator): the
    allocator's reserved peak plus what the GPU has in use beyond the allocator now (the CUDA
    context, kernel images, NCCL and cuBLAS workspaces), the plan's `total` counterpart."""
    import torch

    free, total = torch.cuda.mem_get_info(device)
    outside = max(0, (total - free) - torch.cuda.memory_reserved(device))
    return torch.cuda.max_memory_reserved(device) + outside, outside


def timed_step_flops(trainer: Any, cursor: Any, steps: int) -> float:
    """The FLOPs of exactly the batches the timed steps trained on: the data cursor as it stood
    before them, replayed."""
    from bench_trainer_gpu import count_step_flops
    from dflash_trainer.train.batches import rank_micro_batches
    from dflash_trainer.train.step import build_micro_batch

    cfg, env = trainer.cfg, trainer.env
    module = getattr(trainer.model, "module", trainer.model)
    total = 0.0
    for _ in range(steps):
        epoch, rows = cursor.next_global_batch()
        for idx in rank_micro_batches(rows, batch_size=cfg.data.batch_size,
                                      world_size=env.world_size, rank=env.rank,
                                      grad_accum=cfg.optim.grad_accum):  # fmt: skip
            mb = build_micro_batch(trainer.rows, idx, epoch, trainer.settings, env.device)
            target_flops, drafter_flops = count_step_flops(
                trainer.target, trainer.drafter_cfg, module, mb
            )
            total += target_flops + drafter_flops
    return total


def train(smoke: Smoke, architecture: str = "dflash") -> dict[str, Any]:
    """The production shapes' training: DFlash, or DFlash2 on the same target, data, steps and
    seed (the same procedure measures both; DFlash's trainer is exported and freed first)."""
    import torch
    from bench_trainer_gpu import peak_tflops
    from dflash_trainer.plan.meter import LiveTensorMeter
    from dflash_trainer.train.distributed import init_distributed
    from dflash_trainer.train.trainer import Trainer

    smoke.need("tokenized", "tokenize")
    if architecture != "dflash":
        smoke.need("final", "export")  # DFlash's trainer is gone: the peaks are comparable
    s = smoke.sizes
    if s.device == "cuda" and not torch.cuda.is_available():
        raise StepError("no CUDA GPU visible (run with --dry-run on CPU)")
    lengths = row_lengths(smoke.state["tokenized"])
    over_window = sum(n > s.sliding_window for n in lengths)
    if not over_window:
        raise StepError(
            f"no row is longer than the sliding window ({s.sliding_window}; longest "
            f"{max(lengths, default=0)}): the window would never take effect"
        )
    torch.manual_seed(0)
    cfg = build_train_config(smoke, architecture)
    init_one_rank_group(s.device)
    env = init_distributed(cfg.distributed.timeout_minutes)
    device = env.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    trainer = Trainer(cfg, env)
    smoke.state[f"trainer{suffix(architecture)}"] = trainer
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
    cursor = dataclasses.replace(trainer.cursor)  # where the timed steps start reading
    trainer.total_steps = s.steps
    start = time.perf_counter()
    trainer.train_steps()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    timed_s = time.perf_counter() - start
    timed_steps = s.steps - s.warmup
    step_s = timed_s / timed_steps
    # The FLOP count (bench_trainer_gpu.py) has DFlash's terms only: no MFU for DFlash2.
    flops = timed_step_flops(trainer, cursor, timed_steps) if architecture == "dflash" else 0.0
    plan = plan_estimate(cfg, device.type, max(lengths))
    if device.type == "cuda":
        allocated = torch.cuda.max_memory_allocated(device)
        reserved = torch.cuda.max_memory_reserved(device)
        held, outside = device_peak_bytes(device)
    else:  # no allocator and no workspace: the plan's total is its tensors
        allocated = held = meter.peak_bytes
        reserved, outside = None, 0
    metrics = [json.loads(line) for line in Path(cfg.logging.metrics_file).read_text().splitlines()]
    timed = metrics[s.warmup :]
    try:
        peak_flops: float | None = peak_tflops(device, None) * 1e12
    except SystemExit as exc:  # a GPU missing from the datasheet table: no MFU, say why
        print(f"    MFU not computed: {exc}", flush=True)
        peak_flops = None
    mfu = flops / timed_s / peak_flops if peak_flops and device.type == "cuda" else None
    return {
        "architecture": architecture,
        "steps": s.steps,
        "timed_steps": timed_steps,
        "step_ms": round(step_s * 1e3, 2),
        "tokens_per_s": round(statistics.median(m["tokensPerSecond"] for m in timed), 1),
        # FLOPs and time of the same timed steps (each step's own batch).
        "tflops_per_step": round(flops / timed_steps / 1e12, 6) if flops else None,
        "mfu": round(mfu, 6) if mfu else None,  # no CPU peak
        # The GPU memory the run held at its peak (allocator + CUDA context and workspaces)
        # against the plan's total for these shapes; on the CPU both are the live tensors.
        "peak_memory_mib": round(held / 2**20, 2),
        "plan_memory_mib": round(plan.total_bytes / 2**20, 2),
        "peak_over_plan": round(held / plan.total_bytes, 3),
        "allocated_peak_mib": round(allocated / 2**20, 2),
        "plan_tensor_mib": round(plan.tensor_bytes / 2**20, 2),
        "allocated_over_plan_tensors": round(allocated / plan.tensor_bytes, 3),
        "outside_allocator_mib": round(outside / 2**20, 2),
        # What the caching allocator held at most over what tensors used: its fragmentation
        # under expandable segments (the plan allows 5%).
        "reserved_over_allocated": round(reserved / allocated, 3) if reserved else None,
        "rows_over_window": f"{over_window}/{len(lengths)}",
        "sliding_window": s.sliding_window,
        "longest_row": max(lengths),
        "wrapped": type(trainer.model).__name__,
        "first_loss": round(metrics[0]["loss"], 4),
        "last_loss": round(metrics[-1]["loss"], 4),
        # DFlash2: the selector's K-way CE and how often the target was in the unary top-K.
        "last_selector_loss": metrics[-1].get("selectorLoss"),
        "last_selector_recall": metrics[-1].get("selectorRecall"),
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
        "run_root": str(smoke.dir / "train-qwen3_5"),
        "target": {"path": str(target.path), "dtype": s.dtype},
        "drafter": build_drafter_section(smoke, target.mask_token_id),
        "distributed": {"strategy": "fsdp2"},
        "data": {"self_distill": {"samples": s.batch * s.hybrid_steps, "prompt_tokens": 16,
                                  "answer_tokens": 48}, "max_seq_len": 64, "batch_size": s.batch},
        "objective": {"anchors_per_sequence": 16},
        "optim": {"lr": 3e-3, "max_steps": s.hybrid_steps, "warmup_ratio": 0.0},
        "checkpoint": {"every_steps": 10_000, "resume": False},
        "logging": {"every_steps": 1, "metrics_file": str(smoke.dir / "train-qwen3_5.jsonl")},
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


def loss_vocab(smoke: Smoke, architecture: str = "dflash") -> dict[str, Any]:
    """One loss chunk at the Qwen3.5/3.6 vocabulary: the bytes its backward holds per logit
    (against the plan's LOSS_BYTES_PER_LOGIT) and its time. DFlash2's chunk also takes the
    top-K for the selector (rank 256, top-16): its bytes per logit, without the codebooks'
    gradients, against the plan's SELECTOR_LOSS_BYTES_PER_LOGIT."""
    import contextlib

    import torch
    from dflash_memplan.dflash2 import SELECTOR_LOSS_BYTES_PER_LOGIT
    from dflash_memplan.estimate import LOSS_BYTES_PER_LOGIT
    from dflash_trainer.model.dflash2_selector import CandidateSelector
    from dflash_trainer.plan.meter import LiveTensorMeter
    from dflash_trainer.train.loss import SelectorTerm, build_block_loss

    s = smoke.sizes
    device = torch.device(s.device, 0) if s.device == "cuda" else torch.device("cpu")
    dtype = torch.bfloat16 if s.device == "cuda" else torch.float32
    hidden_size, rows, vocab = 1024, s.loss_rows, s.loss_vocab
    torch.manual_seed(0)
    hidden = torch.randn(1, rows, hidden_size, device=device, requires_grad=True)
    weight = (torch.randn(vocab, hidden_size, device=device) * 0.02).to(dtype)
    labels = torch.randint(0, vocab, (1, rows), device=device)
    weights = torch.ones(1, rows, device=device)
    term, plan_per_logit, gradients = None, LOSS_BYTES_PER_LOGIT, 0
    if architecture == "dflash2":
        selector = CandidateSelector(vocab, hidden_size, rank=256, top_k=16).to(device)
        ids = [torch.randint(0, vocab, (1, rows), device=device) for _ in range(2)]
        term = SelectorTerm(selector, ids[0], ids[1], weight=1.0)
        plan_per_logit = SELECTOR_LOSS_BYTES_PER_LOGIT
        # Made by the selector's backward before the chunk's, and counted apart in the plan.
        gradients = sum(p.numel() for p in selector.parameters()) * 4
    mixed = (torch.autocast("cuda", dtype=torch.bfloat16) if s.device == "cuda"
             else contextlib.nullcontext())  # fmt: skip
    meter = LiveTensorMeter()
    if term is not None:
        meter.track([*term.selector.parameters(), term.predecessor_ids, term.target_ids])
    with meter if s.device == "cpu" else contextlib.nullcontext():
        with mixed:
            parts = build_block_loss(hidden, weight, labels, weights, block_size=16,
                                     normaliser=1.0, chunk_tokens=rows,
                                     selector_term=term)  # fmt: skip
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
    per_logit = (peak - before - gradients) / (rows * vocab)
    return {"architecture": architecture, "vocab": vocab, "rows": rows,
            "bytes_per_logit": round(per_logit, 2), "plan_bytes_per_logit": plan_per_logit,
            "backward_ms": round(seconds * 1e3, 2)}  # fmt: skip


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


# The `architectures` of each drafter's exported config.json (what vLLM loads it as).
EXPORTED_ARCHITECTURE = {"dflash": "DFlashDraftModel", "dflash2": "DFlash2DraftModel"}


def export(smoke: Smoke, architecture: str = "dflash") -> dict[str, Any]:
    import torch
    from dflash_trainer.model.export import drafter_config_from_export
    from dflash_trainer.storage import read_json

    key = f"trainer{suffix(architecture)}"
    trainer = smoke.need(key, f"train{suffix(architecture)}")
    uri = trainer.export()
    exported = read_json(str(Path(uri) / "config.json"))
    config = drafter_config_from_export(exported)
    weights = sorted(p.name for p in Path(uri).glob("*.safetensors"))
    if not weights:
        raise StepError(f"no *.safetensors in the export {uri}")
    if exported.get("architectures") != [EXPORTED_ARCHITECTURE[architecture]]:
        raise StepError(f"{uri}/config.json: architectures={exported.get('architectures')}, "
                        f"expected [{EXPORTED_ARCHITECTURE[architecture]!r}]")  # fmt: skip
    smoke.state[f"final{suffix(architecture)}"] = Path(uri)
    del smoke.state[key], trainer
    gc.collect()  # free the GPU for the next training and for vLLM
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return {"uri": uri, "block_size": config.block_size, "files": weights,
            "architectures": exported.get("architectures")}  # fmt: skip


def evaluate(
    smoke: Smoke, engine: str, architecture: str = "dflash", temperature: float = 0.0
) -> dict[str, Any]:
    """Acceptance of one exported drafter with the project's eval: greedy (checked exact
    against plain greedy decoding) or sampled at `temperature` (the same prompts and seed)."""
    s = smoke.sizes
    if engine == "vllm":
        if s.device != "cuda":
            raise SkipStepError(
                "vLLM method: dflash needs a GPU (the dry run measures the builtin engine)"
            )
        if importlib.util.find_spec("vllm") is None:
            raise SkipStepError(f"vLLM is not installed (uv pip install vllm=={vllm_version()})")
    final = smoke.need(f"final{suffix(architecture)}", f"export{suffix(architecture)}")
    target = smoke.state["target-qwen3"]
    label = f"{'sampled' if temperature else engine}{suffix(architecture)}"
    greedy_builtin = engine == "builtin" and temperature == 0
    out = smoke.dir / f"acceptance-{label}.json"
    config = {
        "run_root": str(smoke.dir / f"train{suffix(architecture)}"),
        "target": {"path": str(target.path), "dtype": s.dtype},
        "drafter_uri": str(final),
        "prompts": {"tokenized_uri": str(smoke.state["tokenized"]), "num_prompts": s.eval_prompts,
                    "max_prompt_tokens": s.max_seq_len // 2},
        "max_new_tokens": s.eval_tokens,
        "temperature": temperature,
        "seed": 0,
        "engine": "builtin" if engine == "builtin" else "vllm",
        # Greedy speculative decoding must reproduce plain greedy decoding token for token: the
        # builtin engine checks every prompt, and a mismatch fails the eval (and this step).
        "check_greedy": greedy_builtin,
        "require_greedy_match": greedy_builtin,
        "update_model_card": greedy_builtin,
        "output_uri": str(out),
        "vllm": {"gpu_memory_utilization": 0.3, "max_model_len": 1024},
    }  # fmt: skip
    path = smoke.dir / f"eval-{label}.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    smoke.cli(
        "dflash_trainer.eval", "--config", str(path),
        "--termination-log", str(smoke.dir / f"eval-{label}.result.json"),
        log=f"eval-{label}",
    )  # fmt: skip
    report = json.loads(out.read_text())
    figures = {"acceptance_length": round(report["acceptanceLength"], 3),
               "prompts": report["prompts"], "greedy_mismatches": report.get("greedyMismatches"),
               "temperature": report.get("temperature"),
               "architecture": report.get("architecture")}  # fmt: skip
    if report.get("architecture") != EXPORTED_ARCHITECTURE[architecture]:
        raise StepError(f"{out}: architecture {report.get('architecture')!r}, expected "
                        f"{EXPORTED_ARCHITECTURE[architecture]!r}", figures)  # fmt: skip
    if greedy_builtin and figures["greedy_mismatches"] != 0:  # None: the check did not run
        raise StepError(
            f"greedy speculative decoding is not exact: {figures['greedy_mismatches']} of "
            f"{report['prompts']} prompts differ from plain greedy decoding",
            figures,
        )
    return figures


def compare_architectures(smoke: Smoke) -> dict[str, Any]:
    """The DFlash vs DFlash2 table from the steps above; a missing figure fails the step (and
    the run), naming every figure that is not there."""
    from gpu_smoke_compare import MissingFiguresError, build_comparison

    try:
        table = build_comparison(smoke.reports)
    except MissingFiguresError as exc:
        raise StepError(str(exc)) from None
    return {"table": table, "dflash2": DFLASH2_SECTION or "the defaults",
            "same": "target, data, steps, seed, block size; builtin eval, same prompts"}  # fmt: skip


# -- the run -------------------------------------------------------------------------------
# The least each step takes on a GPU (seconds; a step that cannot finish is skipped, not cut):
# measured on no GPU yet, so generous guesses from the CPU rehearsal; the first GPU run's
# `seconds` replace them.
GPU_MIN_S = {"regen": 20.0, "train": 40.0, "flex-256": 20.0, "eval": 15.0, "hybrid": 20.0}


def run_all(smoke: Smoke) -> None:
    """The figures that matter most first: training (step time, MFU, peak against the plan),
    the flex backward at width 256, the loss at a 248K vocabulary, export, the same training of
    DFlash2, acceptance of both (greedy, T = 0.6) and their table. Then vLLM, the monitor's head
    and the Gated DeltaNet target."""
    m = GPU_MIN_S if smoke.sizes.device == "cuda" else {}
    two = "dflash2"
    smoke.run_step("build-qwen3", lambda: build_target(smoke, "qwen3"))
    smoke.run_step("regen-qwen3", lambda: regenerate(smoke, "qwen3"), m.get("regen", 0))
    smoke.run_step("tokenize", lambda: tokenize(smoke))
    smoke.run_step("train", lambda: train(smoke), m.get("train", 0))
    smoke.run_step("flex-256", lambda: flex_256(smoke), m.get("flex-256", 0))
    smoke.run_step("loss-vocab", lambda: loss_vocab(smoke))
    smoke.run_step("loss-vocab-dflash2", lambda: loss_vocab(smoke, two))
    smoke.run_step("export", lambda: export(smoke))
    smoke.run_step("train-dflash2", lambda: train(smoke, two), m.get("train", 0))
    smoke.run_step("export-dflash2", lambda: export(smoke, two))
    t = SAMPLED_TEMPERATURE
    smoke.run_step("eval-builtin", lambda: evaluate(smoke, "builtin"), m.get("eval", 0))
    smoke.run_step(
        "eval-builtin-dflash2", lambda: evaluate(smoke, "builtin", two), m.get("eval", 0)
    )
    smoke.run_step(
        "eval-sampled", lambda: evaluate(smoke, "builtin", temperature=t), m.get("eval", 0)
    )
    smoke.run_step(
        "eval-sampled-dflash2", lambda: evaluate(smoke, "builtin", two, t), m.get("eval", 0)
    )
    smoke.run_step("architectures", lambda: compare_architectures(smoke))
    smoke.run_step("eval-vllm", lambda: evaluate(smoke, "vllm"), m.get("eval", 0))
    smoke.run_step("monitor-vocab", lambda: monitor_vocab(smoke))
    smoke.run_step("build-qwen3_5", lambda: build_target(smoke, "qwen3_5"))
    smoke.run_step("regen-qwen3_5", lambda: regenerate(smoke, "qwen3_5"), m.get("regen", 0))
    smoke.run_step("train-qwen3_5", lambda: train_hybrid(smoke), m.get("hybrid", 0))


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Written to a temporary name, then renamed: a reader never sees half a file."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    partial.replace(path)


def is_weight(name: str) -> bool:
    return name.endswith(WEIGHT_SUFFIXES)


def pack_rest(work: Path, tarball: Path, budget: int = TARBALL_BUDGET_BYTES) -> dict[str, Any]:
    """WORK (logs, configs, results, manifests, metrics) as one tarball without weights; the
    largest files are left out until what remains fits the budget (listed in the result)."""
    files = sorted(
        (p for p in work.rglob("*") if p.is_file() and not is_weight(p.name)),
        key=lambda p: p.stat().st_size,
    )
    kept, left_out, total = [], [], 0
    for path in files:  # smallest first: the many small records before any large one
        size = path.stat().st_size
        if total + size > budget:
            left_out.append(str(path.relative_to(work)))
        else:
            kept.append(path)
            total += size
    with tarfile.open(tarball, "w:gz") as archive:
        for path in kept:
            archive.add(path, arcname=str(path.relative_to(work)))
    return {"files": len(kept), "bytes": tarball.stat().st_size, "left_out": left_out}


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
        "allocated_over_plan_tensors": figure(smoke, "train", "allocated_over_plan_tensors"),
        "train_rows_over_window": figure(smoke, "train", "rows_over_window"),
        "reserved_over_allocated": figure(smoke, "train", "reserved_over_allocated"),
        "train_qwen3_5_step_ms": figure(smoke, "train-qwen3_5", "step_ms"),
        "gdn_kernels": figure(smoke, "train-qwen3_5", "gdn_kernels"),
        "flex256_ms_this_gpu": figure(smoke, "flex-256", "fwd_bwd_ms_this_gpu"),
        "flex256_ms_sm12x_options": figure(smoke, "flex-256", "fwd_bwd_ms_sm12x_options"),
        "flex256_max_grad_diff": figure(smoke, "flex-256", "max_grad_diff_vs_sdpa"),
        "loss_bytes_per_logit": figure(smoke, "loss-vocab", "bytes_per_logit"),
        "monitor_bytes_per_logit": figure(smoke, "monitor-vocab", "bytes_per_logit"),
        "acceptance_builtin": figure(smoke, "eval-builtin", "acceptance_length"),
        "greedy_mismatches_builtin": figure(smoke, "eval-builtin", "greedy_mismatches"),
        "acceptance_vllm_dflash": figure(smoke, "eval-vllm", "acceptance_length"),
        # DFlash2, trained and evaluated as DFlash above (the table is `architectures`).
        "loss_dflash2_bytes_per_logit": figure(smoke, "loss-vocab-dflash2", "bytes_per_logit"),
        "train_dflash2_step_ms": figure(smoke, "train-dflash2", "step_ms"),
        "peak_memory_dflash2_mib": figure(smoke, "train-dflash2", "peak_memory_mib"),
        "peak_over_plan_dflash2": figure(smoke, "train-dflash2", "peak_over_plan"),
        "acceptance_builtin_dflash2": figure(smoke, "eval-builtin-dflash2", "acceptance_length"),
        "acceptance_sampled": figure(smoke, "eval-sampled", "acceptance_length"),
        "acceptance_sampled_dflash2": figure(smoke, "eval-sampled-dflash2", "acceptance_length"),
    }


def format_table(smoke: Smoke, figures: dict[str, Any]) -> list[str]:
    lines = [f"{'step':<21} {'status':<8} {'seconds':>8}  detail"]
    for r in smoke.reports:
        detail = r.detail.splitlines()[0][:90] if r.detail else ""
        lines.append(f"{r.name:<21} {r.status:<8} {r.seconds:>8.1f}  {detail}")
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
    parser.add_argument(
        "--budget-s",
        type=float,
        default=DEFAULT_BUDGET_S,
        help=f"the run's time box in seconds (default {DEFAULT_BUDGET_S:.0f})",
    )
    parser.add_argument(
        "--work", help="where the steps write (default: a new temporary folder); OUT gets 4 files"
    )
    args = parser.parse_args(argv)
    if args.budget_s <= 0:
        parser.error(f"--budget-s {args.budget_s}: give a positive number of seconds")
    if args.dry_run:  # the CPU path even on a GPU machine (training picks CUDA when it sees one)
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ.setdefault(*ALLOC_CONF)  # before torch is imported, as in a trainer pod
    out = Path(args.out or os.environ.get("OUT") or "gpu-smoke-out").resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work or tempfile.mkdtemp(prefix="gpu-smoke-work-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(f"gpu smoke: budget {args.budget_s:.0f} s, work folder {work}, output {out}", flush=True)
    smoke = Smoke(DRY if args.dry_run else GPU, out, work=work, budget_s=args.budget_s)
    run_all(smoke)
    figures = build_figures(smoke)
    cut = [r.name for r in smoke.reports if r.detail.startswith(BUDGET_SKIP)]
    failed = [r.name for r in smoke.reports if r.status == "FAILED" and r.name not in cut]
    result = {
        "mode": "dry-run" if args.dry_run else "gpu",
        "sizes": asdict(smoke.sizes),
        "budget_s": args.budget_s,
        "seconds": round(time.perf_counter() - smoke.started, 1),
        # Fail closed: a step that failed or that the budget cut leaves the run not ok.
        "ok": not failed and not cut,
        "failed": failed,
        "cut_by_budget": cut,
        "figures": figures,
        "steps": [asdict(r) for r in smoke.reports],
        "environment": describe_environment(),
    }
    comparison = next((r for r in smoke.reports if r.name == "architectures"), None)
    table = comparison.figures.get("table") if comparison and comparison.status == "OK" else None
    # The DFlash vs DFlash2 table, DFlash2 / DFlash measured in this run; None when incomplete.
    result["architectures"] = table
    write_json(out / JSON_NAME, result)
    smoke.write_steps()
    try:
        result["rest"] = pack_rest(work, out / TARBALL_NAME)
    except OSError as exc:  # the figures are written; the tarball is the extra
        result["rest"] = {"error": str(exc)}
    write_json(out / JSON_NAME, result)
    print("\n".join(format_table(smoke, figures)))
    print_comparison(comparison)
    print(
        f"total {result['seconds']}s of a {args.budget_s:.0f} s budget; JSON at {out / JSON_NAME}"
    )
    if failed:
        print(f"FAILED steps: {', '.join(failed)}")
    if cut:
        print(f"cut by the budget: {', '.join(cut)}")
    return 0 if result["ok"] else 1


def print_comparison(comparison: StepReport | None) -> None:
    """The DFlash vs DFlash2 table, or why there is none (the run is then not ok)."""
    from gpu_smoke_compare import format_comparison

    if comparison is not None and comparison.status == "OK":
        print("\nDFlash vs DFlash2 (same target, data, steps and seed; ratio DFlash2 / DFlash):")
        print("\n".join(format_comparison(comparison.figures["table"])))
        return
    why = comparison.detail if comparison is not None else "the step did not run"
    print(f"\nDFlash vs DFlash2 table NOT complete ({comparison.status if comparison else '-'}): "
          f"{why}")  # fmt: skip


def describe_environment() -> dict[str, Any]:
    """The versions the figures were measured with."""
    found: dict[str, Any] = {"python": sys.version.split()[0]}
    for name in ("torch", "transformers", "triton", "numpy", "psutil", "vllm", "fla"):
        try:
            found[name] = getattr(importlib.import_module(name), "__version__", "?")
        except Exception:  # absent, or broken on import: either way not what ran
            found[name] = None
    return found


if __name__ == "__main__":
    sys.exit(main())

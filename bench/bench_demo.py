"""The demo's figures: wall time of `make demo` (cold and warm) with the time in each phase, and
the overhead of resuming after a training pod is SIGKILLed, against an uninterrupted run of the
same spec measured in the same session (RATIO = interrupted / uninterrupted training time).

    uv run python bench/bench_demo.py demo [--state-dir DIR] [--cold] [--runs 2]
    uv run python bench/bench_demo.py resume [--state-dir DIR] [--kill-at 0.5]

`demo` runs the demo's own entry point (python -m dflash_dev.demo) in DIR (default: a fresh
folder, so the control plane, S3, executor and operator start there; `--cold` also rebuilds the
tiny target) and stops everything it started at the end. `resume` runs examples/tiny-cpu.yaml
twice in a throw-away namespace of DIR's demo environment (started if needed), with the demo's
training backend (a TrainJob: the kill fails it and attempt 2 resumes; `DFLASH_DEFAULT_LAUNCHER=
pytorchjob` for the PyTorchJob's in-place restart), killing rank 0.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PYTHON = str(REPO / ".venv" / "bin" / "python")
RUN_TIMEOUT = 1800.0


def _demo_once(state_dir: Path) -> dict[str, Any]:
    env = {**os.environ, "DFLASH_STATE_DIR": str(state_dir)}
    started = time.monotonic()
    result = subprocess.run(
        [PYTHON, "-m", "dflash_dev.demo", "run"],
        env=env,
        check=False,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    if result.returncode != 0:
        sys.exit(
            f"the demo failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}"
        )
    timings: dict[str, Any] = json.loads((state_dir / "demo" / "tiny-cpu-timings.json").read_text())
    timings["process_wall_seconds"] = round(wall, 1)
    return timings


def bench_demo(state_dir: Path, cold: bool, runs: int) -> None:
    from dflash_dev.demo import assets

    if cold:
        shutil.rmtree(assets.tiny_target_dir(), ignore_errors=True)
    print(
        f"state dir {state_dir} ({'fresh' if not (state_dir / 'cluster').exists() else 'reused'})"
    )
    try:
        for index in range(runs):
            label = (
                ("cold" if cold else "first (cached target)")
                if index == 0
                else "warm (all running)"
            )
            timings = _demo_once(state_dir)
            phases = ", ".join(
                f"{phase} {seconds:.0f}s" for phase, seconds in timings["phases"].items()
            )
            print(f"{label}: wall {timings['process_wall_seconds']:.0f}s; phases: {phases}")
    finally:
        env = {**os.environ, "DFLASH_STATE_DIR": str(state_dir)}
        subprocess.run(["make", "-s", "down"], cwd=REPO, env=env, check=False, capture_output=True)
        print(f"stopped everything in {state_dir} (make down)")


def _run_and_time(
    admin: Path, namespace: str, run: dict[str, Any], kill_at: float | None, executor_state: Path
) -> dict[str, Any]:
    from dflash_dev.demo import manifest
    from dflash_dev.demo.harness import rank_order
    from dflash_dev.demo.live import Timeline
    from dflash_dev.executor.process import kill_pod
    from dflash_dev.operator_local import kubectl

    name = run["metadata"]["name"]
    manifest.apply_run(admin, namespace, run)
    timeline, killed = Timeline(), None
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline:
        status = (manifest.get_run(admin, namespace, name) or {}).get("status") or {}
        timeline.see(status.get("phase", "Pending"))
        if status.get("phase") in ("Succeeded", "Failed", "AuditFailed"):
            break
        training, checkpoint = status.get("training") or {}, status.get("checkpoint") or {}
        total = training.get("totalSteps") or 0
        if (
            kill_at is not None
            and killed is None
            and total
            and checkpoint
            and training.get("step", 0) >= kill_at * total
        ):
            pods = json.loads(kubectl(admin, "get", "pods", "-n", namespace, "-o", "json"))
            kill_pod(namespace, rank_order(pods["items"], f"{name}-train")[0], executor_state)
            killed = {"step": training["step"], "checkpoint": checkpoint["step"], "total": total}
        time.sleep(0.5)
    timeline.ended = time.monotonic()
    if status.get("phase") != "Succeeded":
        sys.exit(f"{name} ended {status.get('phase')}: {status.get('message')}")
    durations = dict(timeline.durations())
    return {"training": durations.get("Training", 0.0), "total": timeline.total, "killed": killed}


def bench_resume(state_dir: Path, kill_at: float) -> None:
    os.environ["DFLASH_STATE_DIR"] = str(state_dir)
    from dflash_dev.demo import assets, environment, manifest

    namespace = f"bench-resume-{secrets.token_hex(3)}"
    env = environment.ensure_environment(namespace)
    environment.operator_local.kubectl(env.admin, "create", "namespace", namespace)
    environment.ensure_s3_secret(env.admin, namespace, env.s3)
    client = env.s3.client()
    assets.ensure_bucket(client, manifest.EXAMPLE_BUCKET)
    assets.upload_folder(
        client, assets.ensure_tiny_target(), manifest.EXAMPLE_BUCKET, manifest.MODEL_KEY
    )
    assets.upload_sources(client, assets.build_prompt_sources(64), manifest.EXAMPLE_BUCKET)
    example = manifest.load_example()
    try:
        base = _run_and_time(
            env.admin,
            namespace,
            manifest.build_run(example, endpoint=env.s3.endpoint_url, name="base"),
            None,
            env.executor_state,
        )
        kill = _run_and_time(
            env.admin,
            namespace,
            manifest.build_run(example, endpoint=env.s3.endpoint_url, name="kill"),
            kill_at,
            env.executor_state,
        )
    finally:
        environment.operator_local.kubectl(
            env.admin, "delete", "namespace", namespace, "--wait=false"
        )
    killed = kill["killed"] or {}
    print(f"uninterrupted: training phase {base['training']:.1f}s, run {base['total']:.1f}s")
    print(
        f"killed at step {killed.get('step')}/{killed.get('total')} (last checkpoint {killed.get('checkpoint')}): "
        f"training phase {kill['training']:.1f}s, run {kill['total']:.1f}s"
    )
    print(f"resume overhead {kill['training'] - base['training']:.1f}s")
    print(
        f"RATIO interrupted / uninterrupted training time: {kill['training'] / base['training']:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("demo", "resume"))
    parser.add_argument(
        "--state-dir", type=Path, help="DFLASH_STATE_DIR to use (default: a fresh one)"
    )
    parser.add_argument("--cold", action="store_true", help="demo: rebuild the tiny target first")
    parser.add_argument(
        "--runs", type=int, default=2, help="demo: runs in a row (the later ones warm)"
    )
    parser.add_argument(
        "--kill-at", type=float, default=0.5, help="resume: kill at this share of the steps"
    )
    args = parser.parse_args()
    state_dir = (args.state_dir or Path(tempfile.mkdtemp(prefix="bench-demo-"))).resolve()
    if args.what == "demo":
        bench_demo(state_dir, args.cold, args.runs)
    else:
        bench_resume(state_dir, args.kill_at)


if __name__ == "__main__":
    main()

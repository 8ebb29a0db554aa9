"""`python -m dflash_dev.demo [--broken-data]` (`make demo`, `make demo-broken-data`): set up
everything, upload the tiny target and the prompts, apply examples/tiny-cpu.yaml, watch the run
live and print the summary. `python -m dflash_dev.demo down` stops the demo's operator."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from dflash_dev import s3server
from dflash_dev.demo import assets, environment, manifest, summary
from dflash_dev.demo.live import watch_run
from dflash_dev.errors import DevError

NAMESPACE = "default"
BROKEN_NAME = "tiny-cpu-broken-data"
# The whole run takes a few minutes on 2 cores; past this the demo gives up watching.
WATCH_TIMEOUT_SECONDS = 40 * 60
NON_TTY_WIDTH = 160
SAMPLES_PER_SOURCE = 64  # examples/tiny-cpu.yaml maxSamples of each source


def _prepare_assets(
    console: Console, env: environment.DemoEnvironment, broken: bool
) -> list[assets.SourceFile]:
    started = time.monotonic()
    cached = assets.tiny_target_dir().is_dir()
    with console.status(
        "building the tiny target (about a minute, once)" if not cached else "tiny target"
    ):
        target = assets.ensure_tiny_target()
    client = env.s3.client()
    if broken:
        # The healthy imported source is the target's own answers (made once, cached): the
        # canary's likelihood check judges it the target's, and openorca not.
        with console.status("the target's own answers for magicoder (once, cached)"):
            own = assets.ensure_own_answers(target, assets.magicoder_prompts(SAMPLES_PER_SOURCE))
        files = assets.build_broken_sources(SAMPLES_PER_SOURCE, own_answers=own)
    else:
        files = assets.build_prompt_sources(SAMPLES_PER_SOURCE)
    try:
        assets.ensure_bucket(client, manifest.EXAMPLE_BUCKET)
        size = assets.upload_folder(client, target, manifest.EXAMPLE_BUCKET, manifest.MODEL_KEY)
        assets.upload_sources(client, files, manifest.EXAMPLE_BUCKET)
    except assets.UploadError as error:
        raise DevError(s3server.explain_failure(env.s3, error.what, error.cause)) from None
    console.print(
        f"assets in s3://{manifest.EXAMPLE_BUCKET}/ ({time.monotonic() - started:.0f}s): tiny target "
        f"{size / 1e6:.1f} MB at {manifest.MODEL_KEY}/ ({'cached' if cached else 'built'}), "
        + ", ".join(f"{f.name} ({f.format}, {f.key})" for f in files)
    )
    return files


def build_demo_run(
    env: environment.DemoEnvironment,
    broken: bool,
    files: list[assets.SourceFile],
    drafter: str = "dflash",
) -> dict[str, Any]:
    example = manifest.load_example()
    if not broken:
        if drafter != "dflash":  # its own run, beside the DFlash demo's
            return manifest.build_run(
                example, endpoint=env.s3.endpoint_url, name=f"tiny-cpu-{drafter}",
                spec={"drafter": {"architecture": drafter}},
            )  # fmt: skip
        return manifest.build_run(example, endpoint=env.s3.endpoint_url)
    sources = assets.build_sources_spec(files, manifest.EXAMPLE_BUCKET, SAMPLES_PER_SOURCE)
    return manifest.build_run(
        example, endpoint=env.s3.endpoint_url, name=BROKEN_NAME, sources=sources
    )


def run_demo(
    broken: bool, images: environment.DemoImages | None = None, drafter: str = "dflash"
) -> int:
    # Off a terminal (CI, a pipe) rich wraps at 80 columns; URIs read better unwrapped.
    console = Console() if sys.stdout.isatty() else Console(width=NON_TTY_WIDTH)
    started = time.monotonic()
    console.rule(
        "DFlash Operator demo" + (": broken data (the incident, replayed)" if broken else "")
    )
    env = environment.ensure_environment(NAMESPACE, say=console.print, images=images)
    environment.ensure_s3_secret(env.admin, NAMESPACE, env.s3)
    files = _prepare_assets(console, env, broken)
    run = build_demo_run(env, broken, files, drafter)
    name = run["metadata"]["name"]
    if manifest.get_run(env.admin, NAMESPACE, name) is not None:
        console.print(f"deleting the previous DFlashRun {name} (a fresh run each time)")
        manifest.delete_run(env.admin, NAMESPACE, name)
    manifest.apply_run(env.admin, NAMESPACE, run)
    console.print(
        f"applied examples/tiny-cpu.yaml as {NAMESPACE}/{name} (storage.endpoint -> {env.s3.endpoint_url}"
        + (", sources -> the 87%-stub dataset" if broken else "")
        + (f", drafter.architecture -> {drafter}" if drafter != "dflash" else "")
        + f"); setup took {time.monotonic() - started:.0f}s\n"
    )

    def status() -> dict[str, Any] | None:
        found = manifest.get_run(env.admin, NAMESPACE, name)
        return (found or {}).get("status")

    _, timeline = watch_run(name, status, WATCH_TIMEOUT_SECONDS, console)
    final = manifest.get_run(env.admin, NAMESPACE, name) or {"metadata": {"name": name}}
    phase = (final.get("status") or {}).get("phase")
    summary.print_success(console, final, timeline, NAMESPACE, env.admin)
    if phase == "AuditFailed":
        report_uri = _failed_report_uri(final)
        report = summary.fetch_report(env.s3.client(), report_uri) if report_uri else None
        summary.print_audit_failure(console, final, report, NAMESPACE)
    elif phase != "Succeeded":
        # The server's log explains only a failure that is a refused write (a stage's line
        # says InternalError / HTTP 5xx): a wrong key or a missing object is not blamed on it.
        failure = str((final.get("status") or {}).get("message") or "")
        said_server = s3server.is_server_failure_text(failure)
        refused = s3server.refusal(env.s3) if said_server else None
        if refused is None and s3server.status() is None:
            refused = (
                f"the S3 server at {env.s3.endpoint_url} is not running any more: "
                f"`make s3-down` and run the demo again; log: {env.s3.log}"
            )
        if refused is not None:
            console.print(refused, style="red", markup=False, highlight=False)
        console.print(
            f"operator log: {env.operator.log}; pod logs: make executor-logs POD={NAMESPACE}/<pod>"
        )
    summary.print_next_commands(console, name, NAMESPACE, env.admin)
    console.print(f"\ndemo wall time {time.monotonic() - started:.0f}s (setup + run)")
    _write_timings(name, time.monotonic() - started, timeline.durations(), phase)
    expected = "AuditFailed" if broken else "Succeeded"
    return 0 if phase == expected else 1


def _failed_report_uri(run: dict[str, Any]) -> str | None:
    for result in ((run.get("status") or {}).get("audit") or {}).values():
        if result.get("verdict") == "fail" and not result.get("approved"):
            return str(result.get("reportUri") or "") or None
    return None


def _write_timings(
    name: str, wall: float, phases: list[tuple[str, float]], phase: str | None
) -> Path:
    """<state>/demo/<run>-timings.json: what bench/bench_demo.py and docs/benchmarks read."""
    path = environment.demo_dir() / f"{name}-timings.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {"wall_seconds": round(wall, 1), "phase": phase, "phases": dict(phases)}, indent=1
        )
    )
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dflash_dev.demo", description=__doc__)
    parser.add_argument("command", nargs="?", choices=("run", "down"), default="run")
    parser.add_argument("--broken-data", action="store_true", help="feed the 87%%-stub dataset")
    parser.add_argument(
        "--from-images",
        action="store_true",
        help="run the operator and every pod from the built images (make images first)",
    )
    parser.add_argument(
        "--drafter",
        choices=("dflash", "dflash2"),
        default="dflash",
        help="the drafter's architecture (spec.drafter.architecture); dflash2 runs as "
        "tiny-cpu-dflash2, beside the DFlash demo's run",
    )
    parser.add_argument("--image-registry", default="ghcr.io/dflash-dev")
    parser.add_argument("--image-tag", default="", help="default: the VERSION file")
    args = parser.parse_args(argv)
    try:
        if args.command == "down":
            print(
                "demo operator stopped"
                if environment.stop_operator()
                else "demo operator was not running"
            )
            return 0
        images = None
        if args.from_images:
            from dflash_dev.version import read_version

            tag = args.image_tag or read_version()
            images = environment.demo_images(args.image_registry, tag)
        if args.broken_data and args.drafter != "dflash":
            print(
                "error: --drafter applies to the healthy demo, not --broken-data", file=sys.stderr
            )
            return 2
        return run_demo(args.broken_data, images, args.drafter)
    except (DevError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted: everything keeps running; `make down` stops it", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

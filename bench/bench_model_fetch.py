"""One model download per run: Hub bytes for N pods, and loading from S3 with ranged GETs.

A model of a few hundred MB (random safetensors shards plus configs; nothing is downloaded) is
served by the local Hub (`dflash_dev.hub_server`, which counts the bytes it serves) and copied
through the local S3 server (SeaweedFS, started if it is not running).

(a) Hub bytes per run. Before: every pod downloads the model from the Hub itself. After: the
    model stage fetches it once into S3 and every pod loads from S3. Measured with real
    processes for `--pods` pods (default 4; each its own process and cache, as pods on
    different nodes); other pod counts are the measured per-pod bytes times N (before) and the
    measured fetch (after), printed as arithmetic.
(b) Load time of the model from S3 into an empty node cache (`model.local_cache`, sha256
    verified against the manifest), median of `--repeats` runs, interleaved: parallel ranged GETs
    (the default settings, and smaller parts) against one GET stream per file, one file after
    the other. The raw transfers (no verification) of our ranged GETs and of boto3's
    `download_file` (s3transfer, TransferConfig with the same concurrency and part size) are
    timed too: which ranged-GET implementation is faster, on the same bytes.

    uv run python bench/bench_model_fetch.py [--shards 5 --shard-mb 64 --pods 4 --repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from dflash_dev import s3server
from dflash_dev.hub_server import HubServer
from dflash_trainer.model.local_cache import fetch_to_cache, wanted_files
from dflash_trainer.model.ranged_get import FetchSettings, ObjectJob, RangedFetcher
from dflash_trainer.storage import S3Settings, s3_client, split_s3_uri
from safetensors.numpy import save_file

REPO = "bench/model"
POD_COUNTS = (1, 4, 8, 16)
MiB = 1024 * 1024

# What each pod did before the model stage: download every file a load needs from the Hub.
POD_DOWNLOAD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from dflash_trainer.model.hub import download_file, resolve_model
    from dflash_trainer.model.selection import select_model_files
    model = resolve_model(sys.argv[1], None)
    folder = Path(sys.argv[2])
    for path in select_model_files(model.files):
        download_file(model, path, folder, folder / ".hf-cache")
    """
)
# What each pod does now: load the run's S3 copy into its node cache.
POD_LOAD = textwrap.dedent(
    """
    import json, sys
    from dflash_trainer.model.local_cache import fetch_to_cache
    report = fetch_to_cache(sys.argv[1], include_weights=True)
    print(json.dumps({"bytes": report.downloaded_bytes, "files": len(report.downloaded)}))
    """
)


def build_model(folder: Path, shards: int, shard_mb: int) -> int:
    """Random bf16-sized safetensors shards with an index, a config and a tokenizer config."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    weight_map = {}
    for index in range(1, shards + 1):
        name = f"model-{index:05d}-of-{shards:05d}.safetensors"
        tensor = f"model.layers.{index}.weight"
        save_file(
            {tensor: rng.integers(0, 256, size=shard_mb * MiB, dtype=np.uint8)}, folder / name
        )
        weight_map[tensor] = name
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 4096}))
    (folder / "pytorch_model.bin").write_bytes(b"\0" * MiB)  # a decoy the stage must skip
    return sum(p.stat().st_size for p in folder.iterdir() if p.name != "pytorch_model.bin")


def run_pods(script: str, pods: list[tuple[list[str], dict[str, str]]]) -> list[str]:
    """Run one process per pod (arguments, environment) at the same time; their stdouts."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args, env in pods
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            raise SystemExit(f"a pod failed:\n{err[-2000:]}")
        outputs.append(out)
    return outputs


def hub_bytes(hub: HubServer, work: Path, dest: str, pods: int, env: dict[str, str]) -> None:
    print(f"(a) Hub bytes per run, {pods} real pod processes")
    hub.reset_counters()
    start = time.perf_counter()
    run_pods(POD_DOWNLOAD, [([REPO, str(work / f"pod-{i}")], env) for i in range(pods)])
    before_s = time.perf_counter() - start
    before = hub.served_bytes
    per_pod = before // pods
    for i in range(pods):
        shutil.rmtree(work / f"pod-{i}", ignore_errors=True)

    hub.reset_counters()
    start = time.perf_counter()
    stage = subprocess.run(
        [sys.executable, "-m", "dflash_trainer.model.fetch", "--model", REPO, "--dest", dest],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    fetch_s = time.perf_counter() - start
    if stage.returncode != 0:
        raise SystemExit(f"the model stage failed:\n{stage.stderr[-2000:]}")
    fetched = hub.served_bytes
    start = time.perf_counter()
    loads = run_pods(
        POD_LOAD,
        [([dest], {**env, "DFLASH_MODEL_CACHE": str(work / f"node-{i}")}) for i in range(pods)],
    )
    load_s = time.perf_counter() - start
    after = hub.served_bytes
    s3_per_pod = [json.loads(out.strip().splitlines()[-1])["bytes"] for out in loads]
    print(
        f"  before: {pods} pods downloaded {before / 1e6:.1f} MB from the Hub "
        f"({per_pod / 1e6:.1f} MB each) in {before_s:.1f} s"
    )
    print(
        f"  after:  the model stage fetched {fetched / 1e6:.1f} MB from the Hub in {fetch_s:.1f} s; "
        f"{pods} pods (one per node cache, at once) then loaded {sum(s3_per_pod) / 1e6:.1f} MB "
        f"from S3 in {load_s:.1f} s; Hub bytes during the loads: {after - fetched}"
    )
    print(f"RATIO Hub bytes before / after, {pods} pods (measured): {before / after:.2f}x")
    for n in POD_COUNTS:
        print(
            f"  N={n:2d} pods: before {n * per_pod / 1e6:8.1f} MB, after {fetched / 1e6:6.1f} MB, "
            f"ratio {n * per_pod / fetched:5.2f}x"
            + (" (measured)" if n == pods else " (arithmetic from the measured per-pod bytes)")
        )


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def load_times(dest: str, work: Path, repeats: int, concurrency: int) -> None:
    size = sum(f.size for f in wanted_files(dest + "/", True))
    print(f"(b) load of {size / 1e6:.0f} MB from S3 into an empty node cache, median of {repeats}")

    def load(parallel: int, part: str) -> Callable[[], object]:
        def run() -> object:
            cache = work / f"cache-{secrets.token_hex(4)}"
            os.environ["DFLASH_MODEL_CACHE"] = str(cache)
            os.environ["DFLASH_MODEL_FETCH_CONCURRENCY"] = str(parallel)
            os.environ["DFLASH_MODEL_FETCH_PART_SIZE"] = part
            try:
                return fetch_to_cache(dest, include_weights=True)
            finally:
                shutil.rmtree(cache, ignore_errors=True)

        return run

    files = wanted_files(dest + "/", True)
    client = s3_client(S3Settings.from_env(), concurrency + 2)

    def raw_ours(part: int) -> Callable[[], object]:
        def run() -> object:
            folder = work / f"raw-{secrets.token_hex(4)}"
            jobs = [ObjectJob(f.uri, f.size, folder / f.path) for f in files]
            RangedFetcher(client, FetchSettings(concurrency, part)).fetch(jobs, lambda _job: None)
            shutil.rmtree(folder)
            return None

        return run

    def raw_s3transfer(part: int) -> Callable[[], object]:
        from boto3.s3.transfer import TransferConfig

        config = TransferConfig(
            multipart_threshold=part, multipart_chunksize=part, max_concurrency=concurrency
        )

        def run() -> object:
            folder = work / f"s3t-{secrets.token_hex(4)}"
            folder.mkdir()
            for f in files:
                bucket, key = split_s3_uri(f.uri)
                client.download_file(bucket, key, str(folder / f.path), Config=config)
            shutil.rmtree(folder)
            return None

        return run

    groups: dict[str, dict[str, Callable[[], object]]] = {
        "into the node cache (fetch_to_cache: sha256 of every file checked)": {
            "single stream: 1 GET per file, one file after the other": load(1, "1024Gi"),
            f"ranged GETs x{concurrency}, 64 MiB parts (the default)": load(concurrency, "64Mi"),
            f"ranged GETs x{concurrency}, 8 MiB parts": load(concurrency, "8Mi"),
        },
        "raw transfer, no verification": {
            "single stream: 1 GET per file, one file after the other": raw_ours(1024**4),
            f"our ranged GETs x{concurrency}, 8 MiB parts (os.pwrite per worker)": raw_ours(
                8 * MiB
            ),
            f"boto3 download_file x{concurrency}, 8 MiB parts (s3transfer)": raw_s3transfer(
                8 * MiB
            ),
        },
    }
    times: dict[tuple[str, str], list[float]] = {
        (g, n): [] for g, variants in groups.items() for n in variants
    }
    for _ in range(repeats):  # interleaved: a slow moment of the shared machine hits all variants
        for group, variants in groups.items():
            for name, fn in variants.items():
                times[(group, name)].append(timed(fn))
    medians = {key: statistics.median(values) for key, values in times.items()}
    for group, variants in groups.items():
        print(f"  {group}:")
        base = medians[(group, next(iter(variants)))]
        for name in variants:
            median = medians[(group, name)]
            print(
                f"    {name:62s} {median:5.2f} s {size / 1e6 / median:7.1f} MB/s "
                f"{base / median:5.2f}x single stream"
            )
    cache_group, raw_group = list(groups)
    single, default, small = list(groups[cache_group])
    print(
        f"RATIO load time into the node cache, single stream / ranged GETs x{concurrency} "
        f"(64 MiB parts): {medians[(cache_group, single)] / medians[(cache_group, default)]:.2f}x"
    )
    print(
        f"RATIO load time into the node cache, single stream / ranged GETs x{concurrency} "
        f"(8 MiB parts): {medians[(cache_group, single)] / medians[(cache_group, small)]:.2f}x"
    )
    _, ours, boto = list(groups[raw_group])
    print(
        "RATIO raw transfer time, boto3 download_file / our ranged GETs (same parts, same "
        f"concurrency): {medians[(raw_group, boto)] / medians[(raw_group, ours)]:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=5)
    parser.add_argument("--shard-mb", type=int, default=64)
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()

    was_up = s3server.status() is not None
    info = s3server.up()
    os.environ.update(info.env())
    work = Path(tempfile.mkdtemp(prefix="bench-model-"))
    dest = f"s3://{info.bucket}/bench/model-{secrets.token_hex(4)}/model"
    try:
        size = build_model(work / "repo", args.shards, args.shard_mb)
        print(
            f"model: {args.shards} safetensors shards of {args.shard_mb} MiB + configs = "
            f"{size / 1e6:.1f} MB; local Hub (Python http.server) and SeaweedFS on loopback, "
            f"{os.cpu_count()} CPUs shared by everything"
        )
        with HubServer() as hub:
            hub.add_repo(REPO, work / "repo")
            env = {
                k: v
                for k, v in os.environ.items()
                if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN")
            }
            env.update(HF_ENDPOINT=hub.url, HF_HOME=str(work / "hf-home"))
            hub_bytes(hub, work, dest, args.pods, env)
        load_times(dest, work, args.repeats, args.concurrency)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        client = info.client()
        bucket, key = split_s3_uri(dest)
        for obj in client.list_objects_v2(Bucket=bucket, Prefix=key).get("Contents", []):
            client.delete_object(Bucket=bucket, Key=obj["Key"])
        if not was_up:
            s3server.down()


if __name__ == "__main__":
    main()

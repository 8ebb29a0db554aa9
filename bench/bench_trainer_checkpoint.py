"""Checkpoint save / restore throughput to the local S3 server vs raw boto3 on the same bytes.

Stages a real drafter checkpoint (weights + AdamW state + RNG + state.json), then in one
process: our save (sha256 of every file, parallel multipart uploads, COMMITTED.json last,
retention) vs a plain `boto3.client.upload_file` of each file in turn (the baseline), and
our restore (download + sha256 verification) vs plain `download_file`. Starts the local
SeaweedFS server if it is not running (`python -m dflash_dev s3-up` does the same).

    uv run python bench/bench_trainer_checkpoint.py [--hidden 1024 --layers 4 --repeats 3]
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import torch
from dflash_trainer.model.config import build_drafter_config
from dflash_trainer.model.drafter import DFlashDrafter
from dflash_trainer.storage import join_uri, split_s3_uri
from dflash_trainer.train import checkpoint as ckpt
from transformers import Qwen3Config


def stage_checkpoint(hidden: int, layers: int) -> tuple[Path, int, float]:
    target = Qwen3Config(
        vocab_size=151936,
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=36,
        num_attention_heads=hidden // 128,
        num_key_value_heads=max(1, hidden // 512),
        head_dim=128,
    )
    drafter = DFlashDrafter(build_drafter_config(target, num_layers=layers, block_size=16))
    optimizer = torch.optim.AdamW(drafter.parameters())
    for param in drafter.parameters():
        param.grad = torch.zeros_like(param)
    optimizer.step()  # materialise exp_avg / exp_avg_sq
    folder = ckpt.staging_folder(1)
    start = time.perf_counter()
    ckpt.write_checkpoint_files(
        folder,
        weights=drafter.state_dict(),
        optimizer=optimizer.state_dict(),
        rng=[ckpt.capture_rng_state()],
        state={"step": 1},
    )
    staging = time.perf_counter() - start
    size = sum((folder / name).stat().st_size for name in ckpt.CHECKPOINT_FILES)
    return folder, size, staging


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from dflash_dev import s3server

    info = s3server.up()
    os.environ.update(info.env())
    client = info.client()
    folder, size, staging = stage_checkpoint(args.hidden, args.layers)
    root = f"s3://{info.bucket}/bench/checkpoint-{secrets.token_hex(4)}"
    ours_save, raw_save, ours_load, raw_load = [], [], [], []
    try:
        for n in range(args.repeats):
            start = time.perf_counter()
            copy = Path(tempfile.mkdtemp())
            for name in ckpt.CHECKPOINT_FILES:  # the uploader deletes its staging folder
                os.link(folder / name, copy / name)
            uploader = ckpt.CheckpointUploader(join_uri(root, "ours"), keep_last=1)
            start = time.perf_counter()
            uploader.upload_and_commit(copy, n + 1)
            ours_save.append(time.perf_counter() - start)

            bucket, key = split_s3_uri(join_uri(root, "raw", str(n)))
            start = time.perf_counter()
            for name in ckpt.CHECKPOINT_FILES:
                client.upload_file(str(folder / name), bucket, f"{key}/{name}")
            raw_save.append(time.perf_counter() - start)

            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                found = ckpt.fetch_verified(join_uri(root, "ours"), n + 1, Path(tmp) / "ours")
                ours_load.append(time.perf_counter() - start)
                assert found.step == n + 1
                start = time.perf_counter()
                for name in ckpt.CHECKPOINT_FILES:
                    client.download_file(bucket, f"{key}/{name}", str(Path(tmp) / name))
                raw_load.append(time.perf_counter() - start)
    finally:
        for obj in client.list_objects_v2(Bucket=info.bucket, Prefix=split_s3_uri(root)[1]).get(
            "Contents", []
        ):
            client.delete_object(Bucket=info.bucket, Key=obj["Key"])

    def mb_s(times: list[float]) -> float:
        return size / 2**20 / statistics.median(times)

    print(
        f"checkpoint of a {args.layers}-layer hidden-{args.hidden} drafter: "
        f"{size / 2**20:.0f} MiB in {len(ckpt.CHECKPOINT_FILES)} files; local SeaweedFS; "
        f"median of {args.repeats}"
    )
    print(
        f"  save    ours {mb_s(ours_save):7.1f} MiB/s (sha256 + parallel multipart + commit), "
        f"raw boto3 {mb_s(raw_save):7.1f} MiB/s (baseline)"
    )
    print(
        f"  restore ours {mb_s(ours_load):7.1f} MiB/s (download + sha256 verify), "
        f"raw boto3 {mb_s(raw_load):7.1f} MiB/s (baseline)"
    )
    print(
        f"  training waits only for local staging: {staging:.2f} s; the upload "
        f"({statistics.median(ours_save):.2f} s) runs in a background thread"
    )
    print(f"RATIO save throughput ours / raw boto3: {mb_s(ours_save) / mb_s(raw_save):.2f}x")
    print(f"RATIO restore throughput ours / raw boto3: {mb_s(ours_load) / mb_s(raw_load):.2f}x")


if __name__ == "__main__":
    main()

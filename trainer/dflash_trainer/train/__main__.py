"""Entry point: `python -m dflash_trainer.train --config run.yaml [a.b=c ...]` (or via torchrun).

Exit codes follow the stage contract: 0 done, 2 bad input (config, data, target), 3 stopped
by the likelihood monitor (every rank), 1 other. Rank 0 writes the `train` stage result to
`--termination-log` (after a monitor stop: a bounded summary plus the verdict object's URI).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from dflash_trainer.model.config import DrafterConfigError
from dflash_trainer.model.target import TargetError
from dflash_trainer.storage import StorageError
from dflash_trainer.train.batches import DataError
from dflash_trainer.train.config import ConfigError, load_train_config
from dflash_trainer.train.result import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_MONITOR_STOPPED,
    EXIT_OK,
    build_stage_result,
    write_stage_result,
)
from dflash_trainer.versions import VersionError, require_supported_versions

log = logging.getLogger("dflash_trainer.train")
BAD_INPUT_ERRORS = (ConfigError, DataError, TargetError, DrafterConfigError, VersionError)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m dflash_trainer.train",
        description="Train a DFlash drafter online from a target.",
    )
    parser.add_argument("--config", required=True, type=Path, help="train.yaml")
    parser.add_argument("--run-root", default=None, help="overrides run_root (s3://... or path)")
    parser.add_argument(
        "--termination-log",
        default=None,
        help="where rank 0 writes the stage result JSON (default: /dev/termination-log if it "
        "exists; '' to skip)",
    )
    parser.add_argument("overrides", nargs="*", help="dotted.key=value overrides")
    return parser.parse_args(argv)


def setup_logging() -> None:
    rank = os.environ.get("RANK", "0")
    logging.basicConfig(
        level=logging.INFO if rank == "0" else logging.WARNING,
        format=f"%(asctime)s %(levelname)s rank{rank} %(name)s: %(message)s",
        stream=sys.stderr,
    )


def earlier_stop(report_folder: str) -> dict[str, Any] | None:
    """The bounded stop summary of an earlier attempt the monitor stopped, if any."""
    from dflash_trainer.storage import join_uri
    from dflash_trainer.train.verdict import VERDICT_FILE, build_summary, read_stop_verdict

    verdict = read_stop_verdict(report_folder)
    if verdict is None:
        return None
    uri = join_uri(report_folder, VERDICT_FILE)
    log.error(
        "an earlier attempt of this run was stopped by the likelihood monitor (verdict %s): "
        "not training again",
        uri,
    )
    return build_summary(verdict, uri)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    setup_logging()
    is_main = os.environ.get("RANK", "0") == "0"
    try:
        cfg = load_train_config(args.config, args.overrides, args.run_root)
        require_supported_versions()
        stopped = earlier_stop(cfg.likelihood_report_uri)
        if stopped is not None:
            # An attempt restarted after a monitor stop (the pod's restart policy): the data
            # was judged bad, so it never trains again; it reports the same stop.
            if is_main:
                write_stage_result(args.termination_log, stopped)
            return EXIT_MONITOR_STOPPED
        # Imported late: the config check above needs no torch and answers fast.
        from dflash_trainer.train.distributed import init_distributed, shutdown_distributed
        from dflash_trainer.train.trainer import Trainer

        env = init_distributed(cfg.distributed.timeout_minutes)
        try:
            result = Trainer(cfg, env).run()
        finally:
            shutdown_distributed()
    except BAD_INPUT_ERRORS as exc:
        log.error("%s", exc)
        if is_main:
            write_stage_result(args.termination_log, build_stage_result("train", False, str(exc)))
        return EXIT_BAD_INPUT
    except (StorageError, RuntimeError, OSError) as exc:
        log.exception("training failed")
        if is_main:
            write_stage_result(
                args.termination_log,
                build_stage_result("train", False, f"{type(exc).__name__}: {exc}"),
            )
        return EXIT_FAILED
    if result.audit is not None:
        # Stopped by the likelihood monitor: a verdict, never a success. A non-zero exit, so
        # nothing can read it as one; the operator reads the verdict from the first stopped
        # container (also from lastState after an in-place restart) and deletes the child.
        if is_main:
            write_stage_result(args.termination_log, result.audit)
        return EXIT_MONITOR_STOPPED
    if is_main:
        message = f"trained {result.step}/{result.total_steps} steps, loss {result.loss:.4f}"
        log.info("%s; final drafter at %s", message, result.final_uri)
        write_stage_result(
            args.termination_log,
            build_stage_result(
                "train",
                True,
                message,
                step=result.step,
                totalSteps=result.total_steps,
                loss=result.loss,
                checkpointUri=result.checkpoint_uri,
                finalUri=result.final_uri,
            ),
        )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

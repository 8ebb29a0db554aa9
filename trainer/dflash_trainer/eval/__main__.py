"""Entry point: `python -m dflash_trainer.eval --config eval.yaml [a.b=c ...]`.

Writes `eval/acceptance.json`, updates the exported model card, and writes the `evaluate`
stage result to `--termination-log`. Exit codes: 0 done, 2 bad input, 1 other.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from dflash_trainer.model.config import DrafterConfigError
from dflash_trainer.model.target import TargetError
from dflash_trainer.storage import StorageError, write_json
from dflash_trainer.train.batches import DataError
from dflash_trainer.train.config import ConfigError
from dflash_trainer.train.result import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    build_stage_result,
    write_stage_result,
)
from dflash_trainer.versions import VersionError, require_supported_versions

log = logging.getLogger("dflash_trainer.eval")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dflash_trainer.eval",
        description="Measure a DFlash drafter's acceptance length.",
    )
    parser.add_argument("--config", required=True, type=Path, help="eval.yaml")
    parser.add_argument("--run-root", default=None, help="overrides run_root")
    parser.add_argument(
        "--termination-log",
        default=None,
        help="where to write the stage result JSON (default: /dev/termination-log if it exists)",
    )
    parser.add_argument("overrides", nargs="*", help="dotted.key=value overrides")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        from dflash_trainer.eval.config import load_eval_config
        from dflash_trainer.eval.evaluate import run_evaluation
        from dflash_trainer.model.export import update_model_card

        cfg = load_eval_config(args.config, args.overrides, args.run_root)
        require_supported_versions()
        report = run_evaluation(cfg)
        write_json(cfg.output, report.to_json(cfg))
        if cfg.update_model_card:
            update_model_card(
                cfg.drafter, acceptanceLength=report.acceptance_length, evalPrompts=report.prompts
            )
    except (
        ConfigError, DataError, TargetError, DrafterConfigError, ValueError, VersionError,
    ) as exc:  # fmt: skip
        log.error("%s", exc)
        write_stage_result(args.termination_log, build_stage_result("evaluate", False, str(exc)))
        return EXIT_BAD_INPUT
    except (StorageError, RuntimeError, OSError) as exc:
        log.exception("evaluation failed")
        write_stage_result(
            args.termination_log,
            build_stage_result("evaluate", False, f"{type(exc).__name__}: {exc}"),
        )
        return EXIT_FAILED
    mismatch = bool(report.greedy_mismatches) and cfg.require_greedy_match
    message = (
        f"mean acceptance length {report.acceptance_length:.3f} (pooled) over "
        f"{report.prompts} prompts"
    )
    if report.greedy_mismatches:
        message += f"; {report.greedy_mismatches} prompts differ from greedy decoding"
    log.info("%s; report at %s", message, cfg.output)
    write_stage_result(
        args.termination_log,
        build_stage_result(
            "evaluate",
            not mismatch,
            message,
            acceptanceLength=report.acceptance_length,
            perPositionAcceptance=[round(p, 4) for p in report.per_position],
            prompts=report.prompts,
            reportUri=cfg.output,
        ),
    )
    return EXIT_FAILED if mismatch else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

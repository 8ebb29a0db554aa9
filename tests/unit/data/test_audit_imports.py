"""The gates' process never imports torch unless it scores: torch's import alone is ~500 MB of
resident memory, which doubled the tokens gate's peak (issue 31; docs/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys

JUDGING_MODULES = (
    "dflash_trainer.data.audit.cli",
    "dflash_trainer.data.audit.likelihood",
    "dflash_trainer.data.audit.likelihood_scoring",
    "dflash_trainer.data.likelihood.scores",
)


def test_judging_stored_scores_and_running_the_shape_checks_import_no_torch() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in JUDGING_MODULES)
        + "print('torch' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)  # fmt: skip
    assert result.stdout.strip() == "False"

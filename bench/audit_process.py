"""`dflash-audit` in a fresh process pinned to one core, as the audit benchmarks run it: wall
time, peak RSS, exit code and the report's own timing and violations."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ONE_CORE = ["taskset", "-c", "0"] if shutil.which("taskset") else []
RSS_WRAPPER = (
    "import resource, subprocess, sys, time\n"
    "t = time.monotonic(); code = subprocess.run(sys.argv[1:]).returncode\n"
    "print(time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)\n"
)
SINGLE_THREADED = {"OMP_NUM_THREADS": "1", "ARROW_NUM_THREADS": "1", "ARROW_IO_THREADS": "1"}


def run_cli_audit(folder: Path, *args: str) -> dict[str, Any]:
    """`python -m dflash_trainer.data.audit <folder> <args>` measured from outside."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [*ONE_CORE, sys.executable, "-c", RSS_WRAPPER, sys.executable, "-m",
               "dflash_trainer.data.audit", str(folder), *args, "--out", out, "--quiet"]  # fmt: skip
        env = os.environ | SINGLE_THREADED
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        wall, rss_kb, code = result.stdout.strip().splitlines()[-1].split()
        report = json.loads((Path(out) / "report.json").read_text())
    return {
        "wall_s": float(wall),
        "audit_s": float(report["settings"]["seconds"]),
        "peak_rss_mb": int(rss_kb) / 1024,
        "exit": int(code),
        "violations": [v["check"] for v in report["violations"]],
    }

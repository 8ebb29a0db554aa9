"""Every example run, the chart's NOTES and the docs name the same S3 credentials Secret, so
a user who follows any of them creates the Secret the others expect."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).parents[3]
SECRET = "dflash-s3"
# `kubectl create secret generic NAME ...` of the S3 keys (other Secrets, e.g. the Hub token's,
# are created the same way).
CREATE = re.compile(r"create secret generic ([a-z0-9-]+)(?=[^`]{0,300}AWS_ACCESS_KEY_ID)")


def _example_runs() -> list[tuple[Path, dict]]:
    runs = []
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "DFlashRun":
                runs.append((path, doc))
    return runs


def test_every_example_run_names_the_same_credentials_secret() -> None:
    runs = _example_runs()
    assert len(runs) >= 4
    named = {
        path.name: ((run["spec"].get("storage") or {}).get("credentialsSecretRef") or {}).get(
            "name"
        )
        for path, run in runs
    }
    assert set(named.values()) == {SECRET}, named


def test_the_notes_and_the_docs_create_that_secret() -> None:
    texts = [ROOT / "charts" / "dflash-operator" / "templates" / "NOTES.txt", ROOT / "README.md"]
    texts += sorted((ROOT / "docs").glob("*.md"))
    texts += [ROOT / "charts" / "dflash-operator" / "README.md"]
    created = {(path.name, name) for path in texts for name in CREATE.findall(path.read_text())}
    assert created, "no doc says how to create the Secret"
    assert {name for _, name in created} == {SECRET}, created

"""The checked-in CRD and CRD reference are exactly what the models generate."""

from __future__ import annotations

import shutil
from pathlib import Path

from dflash_operator.api.generate import CRD_PATH, REFERENCE_PATH, main, stale_files

ROOT = Path(__file__).parents[3]


def test_the_checked_in_crd_and_reference_match_the_models() -> None:
    stale = stale_files(ROOT)
    assert not stale, "run `make crds`:\n" + "\n".join(stale.values())


def test_check_mode_fails_with_a_diff_when_the_crd_was_edited_by_hand(
    tmp_path: Path, capsys: object
) -> None:
    for relative in (CRD_PATH, REFERENCE_PATH):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / relative, tmp_path / relative)
    crd = tmp_path / CRD_PATH
    crd.write_text(crd.read_text().replace("shortNames:\n    - dfr", "shortNames:\n    - run"))

    assert main(["--check", "--root", str(tmp_path)]) == 1
    out = capsys.readouterr()  # type: ignore[attr-defined]
    assert "-    - run" in out.out and "+    - dfr" in out.out
    assert "make crds" in out.err


def test_writing_then_checking_succeeds_in_an_empty_tree(tmp_path: Path) -> None:
    assert main(["--root", str(tmp_path)]) == 0
    assert main(["--check", "--root", str(tmp_path)]) == 0
    assert (tmp_path / "crds" / "dflash.dev_dflashruns.yaml").exists()

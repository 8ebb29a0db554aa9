"""The operator image runs as UID 65532, which has no passwd entry: kopf's default identity
(`getpass.getuser()`) raises KeyError there, and the operator died at start from the image
(found by `make demo FROM_IMAGES=1`). The operator gives kopf its own identity instead."""

from __future__ import annotations

import pwd
from pathlib import Path

import pytest
from dflash_operator.leadership import process_identity
from kopf._core.engines.peering import detect_own_id

MAIN = Path(__file__).parents[3] / "operator" / "dflash_operator" / "main.py"


@pytest.fixture
def no_passwd_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)

    def missing(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", missing)


def test_kopfs_default_identity_fails_for_a_uid_without_a_passwd_entry(
    no_passwd_entry: None,
) -> None:
    with pytest.raises(KeyError, match="uid not found"):
        detect_own_id(manual=False)


def test_the_operators_identity_needs_no_passwd_entry(
    no_passwd_entry: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POD_NAME", "dflash-operator-7d9f-abcde")
    assert process_identity().startswith("dflash-operator-7d9f-abcde@")
    monkeypatch.delenv("POD_NAME")
    assert "@" in process_identity()


def test_the_operator_passes_its_identity_to_kopf() -> None:
    assert "identity=cast(Any, process_identity())" in MAIN.read_text()

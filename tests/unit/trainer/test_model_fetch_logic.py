"""Pure logic of the model stage and the node cache: which Hub files are copied, the hashes the
Hub publishes, the manifest and what a rerun keeps of it, ranged parts and settings."""

from __future__ import annotations

import hashlib
import itertools
import json
import subprocess
from pathlib import Path

import pytest
from dflash_trainer.model.digests import (
    HashMismatchError,
    HubHash,
    check_hub_hash,
    file_digests,
    git_blob_sha1,
)
from dflash_trainer.model.fetch import FetchInputError, check_dest, check_model_id
from dflash_trainer.model.local_cache import (
    CacheReport,
    WantedFile,
    cache_folder,
    is_complete,
    resolve_cache_root,
)
from dflash_trainer.model.manifest import (
    FileEntry,
    ManifestError,
    ModelManifest,
    plan_resume,
)
from dflash_trainer.model.ranged_get import (
    FetchSettings,
    FetchSettingsError,
    parse_size,
    part_ranges,
)
from dflash_trainer.model.selection import NoSafetensorsError, select_model_files

COMMIT = "a" * 40
OTHER = "b" * 40

# The root of a Qwen3.6-style repo, with everything a Hub repo carries besides the model.
QWEN_REPO = [
    ".gitattributes",
    "LICENSE",
    "README.md",
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    "merges.txt",
    "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors",
    "model.safetensors.index.json",
    "preprocessor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "video_preprocessor_config.json",
    "vocab.json",
    "pytorch_model-00001-of-00002.bin",
    "pytorch_model.bin.index.json",
    "original/consolidated.00.pth",
    "original/params.json",
    "original/tokenizer.model",
    "gguf/model-Q4_K_M.gguf",
    "figures/benchmark.png",
    "onnx/model.safetensors",
]


def test_only_configs_tokenizer_and_root_safetensors_are_selected() -> None:
    assert select_model_files(QWEN_REPO) == [
        "chat_template.jinja",
        "config.json",
        "generation_config.json",
        "merges.txt",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "preprocessor_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "video_preprocessor_config.json",
        "vocab.json",
    ]


def test_mistral_consolidated_duplicate_is_skipped_but_a_lone_one_is_kept() -> None:
    files = ["config.json", "consolidated.safetensors", "model.safetensors", "tokenizer.model"]
    assert select_model_files(files) == ["config.json", "model.safetensors", "tokenizer.model"]
    lone = ["params.json", "consolidated.safetensors"]
    assert select_model_files(lone) == ["consolidated.safetensors"]


def test_a_repo_without_safetensors_is_refused_naming_what_it_has() -> None:
    with pytest.raises(NoSafetensorsError, match=r"org/old has no \*\.safetensors.*pytorch_model"):
        select_model_files(
            ["config.json", "pytorch_model.bin", "original/x.safetensors"], "org/old"
        )


def test_git_blob_sha1_is_gits_object_id() -> None:
    # `printf 'hello\n' | git hash-object --stdin`
    assert git_blob_sha1(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"
    assert git_blob_sha1(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"


def test_git_blob_sha1_matches_git_itself(tmp_path: Path) -> None:
    data = bytes(range(256)) * 40
    (tmp_path / "f").write_bytes(data)
    git = subprocess.run(
        ["git", "hash-object", str(tmp_path / "f")], capture_output=True, text=True, check=False
    )
    if git.returncode != 0:
        pytest.skip("git is not available")
    assert git_blob_sha1(data) == git.stdout.strip()


def test_file_digests_are_sha256_and_blob_sha1_in_one_read(tmp_path: Path) -> None:
    data = b"x" * (9 * 1024 * 1024 + 7)  # more than one read block
    path = tmp_path / "f"
    path.write_bytes(data)
    digests = file_digests(path)
    assert digests.size == len(data)
    assert digests.sha256 == hashlib.sha256(data).hexdigest()
    assert digests.git_sha1 == git_blob_sha1(data)


def test_a_hash_mismatch_names_the_file_and_both_hashes_on_one_line(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    path.write_bytes(b"weights")
    digests = file_digests(path)
    check_hub_hash("w.safetensors", HubHash("sha256", digests.sha256), digests)
    with pytest.raises(HashMismatchError) as caught:
        check_hub_hash("w.safetensors", HubHash("sha256", "0" * 64), digests)
    message = str(caught.value)
    assert message.startswith(f"w.safetensors: sha256 mismatch: the Hub lists {'0' * 64}")
    assert digests.sha256 in message and "\n" not in message


def manifest(files: list[FileEntry], commit: str = COMMIT, complete: bool = False) -> ModelManifest:
    return ModelManifest("org/m", commit, "main", 300, files, complete)


A = FileEntry("a.json", 100, "1" * 64)
B = FileEntry("b.safetensors", 200, "2" * 64)


def test_the_manifest_round_trips_through_json() -> None:
    original = manifest([B, A], complete=True)
    data = json.loads(json.dumps(original.to_json()))
    assert data["files"][0]["path"] == "a.json"  # sorted
    assert set(data) == {
        "model",
        "revision",
        "requestedRevision",
        "files",
        "totalBytes",
        "complete",
    }
    assert ModelManifest.from_json(data).to_json() == original.to_json()
    with pytest.raises(ManifestError, match="is not a model manifest"):
        ModelManifest.from_json({"model": "x"})


def test_a_first_fetch_keeps_nothing() -> None:
    plan = plan_resume(None, "org/m", COMMIT, {"a.json": 100}, {"a.json": 100})
    assert not plan.restart and plan.done == frozenset()


def test_a_rerun_keeps_listed_files_whose_object_has_the_recorded_size() -> None:
    c = FileEntry("c.safetensors", 50, "3" * 64)
    selected = {"a.json": 100, "b.safetensors": 200, "c.safetensors": 50, "d.json": 10}
    objects = {"a.json": 100, "b.safetensors": 199, "d.json": 10, "dflash-model.json": 5}
    plan = plan_resume(manifest([A, B, c]), "org/m", COMMIT, selected, objects)
    # b: truncated object; c: object missing; d: object there but never recorded as done.
    assert plan.done == frozenset({"a.json"})
    assert not plan.restart


def test_a_file_whose_hub_size_changed_is_fetched_again() -> None:
    plan = plan_resume(manifest([A]), "org/m", COMMIT, {"a.json": 101}, {"a.json": 100})
    assert plan.done == frozenset()


def test_an_unfinished_copy_of_another_commit_starts_over_and_drops_stale_files() -> None:
    objects = {"a.json": 100, "old.safetensors": 9, "dflash-model.json": 5}
    plan = plan_resume(manifest([A], commit=OTHER), "org/m", COMMIT, {"a.json": 100}, objects)
    assert plan.restart and plan.done == frozenset()
    assert plan.stale == frozenset({"old.safetensors"})


@pytest.mark.parametrize(("model", "commit"), [("org/m", OTHER), ("org/other", COMMIT)])
def test_a_complete_copy_of_another_model_or_commit_is_refused(model: str, commit: str) -> None:
    with pytest.raises(ManifestError, match=r"holds a complete copy of org/m@a{40}"):
        plan_resume(manifest([A, B], complete=True), model, commit, {"a.json": 100}, {})


@pytest.mark.parametrize("value", ["Qwen/Qwen3.6-27B", "gpt2", "org/name-v1.5_x"])
def test_hub_ids_are_accepted(value: str) -> None:
    assert check_model_id(value) == value


@pytest.mark.parametrize(
    "value", ["s3://bucket/model", "/models/qwen", "org/../etc", "a/b/c", "org--x/y", ""]
)
def test_non_hub_ids_are_refused(value: str) -> None:
    with pytest.raises(FetchInputError, match="is not a Hub model id"):
        check_model_id(value)


def test_dest_is_an_s3_prefix_or_a_folder() -> None:
    assert check_dest("s3://b/runs/x/model/") == "s3://b/runs/x/model"
    assert check_dest("/tmp/model") == "/tmp/model"
    with pytest.raises(FetchInputError, match="whole bucket"):
        check_dest("s3://bucket/")
    with pytest.raises(FetchInputError, match="not accepted"):
        check_dest("pvc://claim/model")


def test_part_ranges_cover_the_object_exactly() -> None:
    assert part_ranges(0, 10) == []
    assert part_ranges(10, 10) == [(0, 9)]
    assert part_ranges(25, 10) == [(0, 9), (10, 19), (20, 24)]
    ranges = part_ranges(1_000_003, 65_536)
    assert ranges[0][0] == 0 and ranges[-1][1] == 1_000_002
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(ranges))


def test_fetch_settings_come_from_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DFLASH_MODEL_FETCH_CONCURRENCY", raising=False)
    monkeypatch.delenv("DFLASH_MODEL_FETCH_PART_SIZE", raising=False)
    assert FetchSettings.from_env() == FetchSettings(8, 64 * 1024 * 1024)
    monkeypatch.setenv("DFLASH_MODEL_FETCH_CONCURRENCY", "16")
    monkeypatch.setenv("DFLASH_MODEL_FETCH_PART_SIZE", "256Ki")
    assert FetchSettings.from_env() == FetchSettings(16, 256 * 1024)
    assert parse_size("X", "1Gi") == 1024**3 and parse_size("X", "4096") == 4096
    monkeypatch.setenv("DFLASH_MODEL_FETCH_CONCURRENCY", "0")
    with pytest.raises(FetchSettingsError, match="DFLASH_MODEL_FETCH_CONCURRENCY='0'"):
        FetchSettings.from_env()
    with pytest.raises(FetchSettingsError, match="X='64MB'"):
        parse_size("X", "64MB")


def test_the_cache_root_is_the_env_then_the_callers_then_dflash_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("DFLASH_MODEL_CACHE", raising=False)
    monkeypatch.setenv("DFLASH_CACHE", str(tmp_path / "dc"))
    assert resolve_cache_root() == tmp_path / "dc" / "models"
    assert resolve_cache_root(tmp_path / "trainer") == tmp_path / "trainer"
    monkeypatch.setenv("DFLASH_MODEL_CACHE", str(tmp_path / "node"))
    assert resolve_cache_root(tmp_path / "trainer") == tmp_path / "node"
    # Today's layout: <root>/<sha256(prefix)[:16]>
    prefix = "s3://b/m/"
    assert (
        cache_folder(prefix, tmp_path)
        == tmp_path / hashlib.sha256(prefix.encode()).hexdigest()[:16]
    )


def test_a_file_is_complete_only_with_a_matching_marker(tmp_path: Path) -> None:
    from dflash_trainer.model.local_cache import _write_marker

    wanted = WantedFile("w.safetensors", "s3://b/m/w.safetensors", 4, "f" * 64)
    assert not is_complete(tmp_path, wanted)
    (tmp_path / "w.safetensors").write_bytes(b"abcd")
    assert not is_complete(tmp_path, wanted)  # in place but never verified
    _write_marker(tmp_path, wanted, "f" * 64)
    assert is_complete(tmp_path, wanted)
    assert not is_complete(tmp_path, WantedFile(wanted.path, wanted.uri, 4, "e" * 64))
    (tmp_path / "w.safetensors").write_bytes(b"abc")
    assert not is_complete(tmp_path, wanted)


def test_a_local_path_is_returned_as_is(tmp_path: Path) -> None:
    from dflash_trainer.model.local_cache import fetch_to_cache

    assert fetch_to_cache(str(tmp_path), include_weights=True) == CacheReport(tmp_path)

"""The model stage against a local Hub (`hub` fixture) and the real S3 server: the Hub serves the
model exactly once per run, every file is verified, reruns fetch nothing, and the node-local
cache downloads each S3 object once however many processes ask for it at the same time."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from dflash_dev.hub_server import FAKE_COMMIT, HubServer
from dflash_trainer.storage import join_uri, store_for

REPO = "org/tiny"
# What a model load needs of the tiny repo below, and nothing else.
EXPECTED_FILES = {
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "model-00001-of-00003.safetensors",
    "model-00002-of-00003.safetensors",
    "model-00003-of-00003.safetensors",
    "model.safetensors.index.json",
}
DECOYS = {
    "pytorch_model.bin": b"pickled weights " * 64,
    "original/consolidated.00.pth": b"original weights " * 64,
    "README.md": b"# tiny\n",
    ".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n",
}
TOKEN = "hf_localTESTtoken0123456789abcdef"  # a fake token of the local Hub only


@pytest.fixture(scope="module")
def tiny_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen3 target saved in 3 safetensors shards, with the decoys a Hub repo carries."""
    from dflash_trainer.tiny.build import build_tiny_target
    from transformers import AutoModelForCausalLM

    base = tmp_path_factory.mktemp("tiny") / "base"
    build_tiny_target(base)
    repo = base.parent / "repo"
    model: Any = AutoModelForCausalLM.from_pretrained(base)
    model.save_pretrained(repo, max_shard_size="600KB")
    for path in base.iterdir():
        if not path.name.endswith(".safetensors") and not (repo / path.name).exists():
            shutil.copy(path, repo / path.name)
    for name, data in DECOYS.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    assert {p.name for p in repo.glob("*.safetensors")} == {
        f for f in EXPECTED_FILES if f.endswith(".safetensors")
    }
    return repo


def model_stage(
    dest: str, log: Path, *extra: str, env: dict[str, str] | None = None, model: str = REPO
) -> tuple[int, str, dict[str, Any]]:
    log.unlink(missing_ok=True)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dflash_trainer.model.fetch",
            "--model",
            model,
            "--dest",
            dest,
            "--termination-log",
            str(log),
            *extra,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )
    result = json.loads(log.read_text()) if log.exists() else {}
    return done.returncode, done.stdout + done.stderr, result


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def objects(dest: str) -> dict[str, bytes]:
    store = store_for(dest)
    return {o.uri[len(dest) + 1 :]: store.read_bytes(o.uri) for o in store.list(dest + "/")}


def manifest(dest: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        store_for(dest).read_bytes(join_uri(dest, "dflash-model.json"))
    )
    return data


def repo_size(repo: Path) -> int:
    return sum((repo / f).stat().st_size for f in EXPECTED_FILES)


@pytest.fixture
def fetched(hub: HubServer, s3_prefix: str, tiny_repo: Path, tmp_path: Path) -> str:
    """The tiny repo copied into S3 by the model stage; the Hub's counters reset after it."""
    hub.add_repo(REPO, tiny_repo)
    dest = f"{s3_prefix}/run/model"
    code, output, _ = model_stage(dest, tmp_path / "fetch.json")
    assert code == 0, output
    hub.reset_counters()
    return dest


def test_the_hub_serves_the_model_once_verified_and_a_rerun_fetches_nothing(
    hub: HubServer, s3_prefix: str, tiny_repo: Path, tmp_path: Path
) -> None:
    hub.add_repo(REPO, tiny_repo)
    dest = f"{s3_prefix}/run/model"

    code, output, result = model_stage(dest, tmp_path / "first.json")

    assert code == 0, output
    stored = objects(dest)
    assert set(stored) == EXPECTED_FILES | {"dflash-model.json"}
    record = manifest(dest)
    assert record["model"] == REPO and record["revision"] == FAKE_COMMIT
    assert record["requestedRevision"] is None and record["complete"] is True
    assert {f["path"] for f in record["files"]} == EXPECTED_FILES
    for entry in record["files"]:
        data = stored[entry["path"]]
        assert entry["size"] == len(data)
        assert entry["sha256"] == sha256(data) == sha256((tiny_repo / entry["path"]).read_bytes())
    total = repo_size(tiny_repo)
    assert record["totalBytes"] == total
    # The Hub served every selected file exactly once, and nothing else.
    assert dict(hub.served) == {
        f"{REPO}/{f}": (tiny_repo / f).stat().st_size for f in EXPECTED_FILES
    }
    assert hub.served_bytes == total
    # Weights came from the CDN, never with the Authorization header there.
    assert all(not auth for server, _, _, auth in hub.requests if server == "cdn")
    assert result["stage"] == "model" and result["ok"] is True
    assert result["revision"] == FAKE_COMMIT and result["files"] == len(EXPECTED_FILES)
    assert result["bytes"] == total and result["fetchedBytes"] == total

    hub.reset_counters()
    code, output, result = model_stage(dest, tmp_path / "second.json", "--revision", "main")

    assert code == 0, output
    assert hub.served_bytes == 0
    assert result["fetchedBytes"] == 0 and result["bytes"] == total
    assert manifest(dest)["complete"] is True


def test_an_interrupted_copy_resumes_with_only_the_missing_files(
    fetched: str, hub: HubServer, tiny_repo: Path, tmp_path: Path
) -> None:
    record = manifest(fetched)
    kept = [f for f in record["files"] if f["path"] != "model-00002-of-00003.safetensors"]
    kept = [f for f in kept if f["path"] != "model-00003-of-00003.safetensors"]
    store = store_for(fetched)
    # As a stage killed while uploading shard 3: shard 2 is gone, shard 3's object exists
    # but the manifest does not list it (it was never recorded as done).
    store.delete(join_uri(fetched, "model-00002-of-00003.safetensors"))
    store.write_bytes(
        join_uri(fetched, "dflash-model.json"),
        json.dumps({**record, "files": kept, "complete": False}).encode(),
    )

    code, output, result = model_stage(fetched, tmp_path / "resume.json")

    assert code == 0, output
    assert set(hub.served) == {
        f"{REPO}/model-00002-of-00003.safetensors",
        f"{REPO}/model-00003-of-00003.safetensors",
    }
    assert result["fetchedBytes"] == hub.served_bytes
    assert manifest(fetched)["complete"] is True
    assert sha256(objects(fetched)["model-00002-of-00003.safetensors"]) == sha256(
        (tiny_repo / "model-00002-of-00003.safetensors").read_bytes()
    )


def test_a_corrupted_download_fails_naming_the_file_and_both_hashes_and_is_not_recorded(
    hub: HubServer, s3_prefix: str, tiny_repo: Path, tmp_path: Path
) -> None:
    bad = "model-00002-of-00003.safetensors"
    hub.add_repo(REPO, tiny_repo)
    hub.corrupt(REPO, bad)
    dest = f"{s3_prefix}/run/model"

    code, output, result = model_stage(dest, tmp_path / "bad.json")

    assert code == 1, output
    expected = sha256((tiny_repo / bad).read_bytes())
    assert result["ok"] is False
    message = result["message"]
    assert message.startswith(f"{bad}: sha256 mismatch: the Hub lists {expected}")
    assert "nothing was recorded" in message and "\n" not in message
    assert "Traceback" not in output
    stored = objects(dest)
    assert bad not in stored
    record = manifest(dest)
    assert record["complete"] is False
    assert bad not in {f["path"] for f in record["files"]}


@pytest.mark.parametrize("gated", [False, True], ids=["private", "gated"])
def test_a_token_protected_repo_needs_hfTokenSecretRef_and_the_token_is_never_printed(
    hub: HubServer, s3_prefix: str, tiny_repo: Path, tmp_path: Path, gated: bool
) -> None:
    hub.add_repo(REPO, tiny_repo, token=TOKEN, gated=gated)
    dest = f"{s3_prefix}/run/model"

    code, output, result = model_stage(dest, tmp_path / "none.json")

    assert code == 2, output
    assert "spec.hfTokenSecretRef" in result["message"]
    assert "Traceback" not in output
    assert hub.served_bytes == 0

    wrong = "hf_wrongTOKENvalue9876543210"
    code, output, result = model_stage(dest, tmp_path / "wrong.json", env={"HF_TOKEN": wrong})

    assert code == 2, output
    assert "spec.hfTokenSecretRef" in result["message"]
    assert wrong not in output and wrong not in json.dumps(result)

    code, output, result = model_stage(dest, tmp_path / "right.json", env={"HF_TOKEN": TOKEN})

    assert code == 0, output
    assert TOKEN not in output and TOKEN not in json.dumps(result)
    assert hub.served_bytes == repo_size(tiny_repo)


def test_an_unknown_repo_or_revision_exits_2_with_what_to_fix(
    hub: HubServer, s3_prefix: str, tiny_repo: Path, tmp_path: Path
) -> None:
    hub.add_repo(REPO, tiny_repo)
    dest = f"{s3_prefix}/run/model"

    code, output, result = model_stage(dest, tmp_path / "repo.json", model="org/missing")
    assert code == 2, output
    assert "org/missing" in result["message"] and "not found" in result["message"]

    code, output, result = model_stage(dest, tmp_path / "rev.json", "--revision", "v9")
    assert code == 2, output
    assert "revision 'v9' does not exist" in result["message"]
    assert "Traceback" not in output


def test_a_repo_without_safetensors_is_refused(
    hub: HubServer, s3_prefix: str, tiny_repo: Path, tmp_path: Path
) -> None:
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    shutil.copy(tiny_repo / "config.json", legacy / "config.json")
    (legacy / "pytorch_model.bin").write_bytes(b"weights")
    hub.add_repo("org/legacy", legacy)

    code, output, result = model_stage(
        f"{s3_prefix}/run/model", tmp_path / "legacy.json", model="org/legacy"
    )

    assert code == 2, output
    assert "has no *.safetensors weights" in result["message"]
    assert "pytorch_model.bin" in result["message"]
    assert hub.served_bytes == 0


def test_a_complete_copy_of_another_commit_is_refused(
    fetched: str, hub: HubServer, tiny_repo: Path, tmp_path: Path
) -> None:
    hub.add_repo(REPO, tiny_repo, commit="e" * 40)

    code, output, result = model_stage(fetched, tmp_path / "moved.json")

    assert code == 2, output
    assert f"pin spec.target.revision to {FAKE_COMMIT}" in result["message"]
    assert hub.served_bytes == 0


# ------------------------------------------------------------------ loading from the run's copy

MATERIALIZE = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from dflash_trainer.model.local_cache import fetch_to_cache
    go = Path(sys.argv[2])
    while not go.exists():
        time.sleep(0.01)
    report = fetch_to_cache(sys.argv[1], include_weights=True)
    print(json.dumps({
        "path": str(report.path), "downloaded": report.downloaded,
        "bytes": report.downloaded_bytes, "requests": report.get_requests,
        "reused": report.reused,
    }))
    """
)


def test_four_processes_on_one_node_download_each_object_once_and_all_get_verified_files(
    fetched: str, tmp_path: Path
) -> None:
    cache = tmp_path / "node-cache"
    go = tmp_path / "go"
    env = {
        **os.environ,
        "DFLASH_MODEL_CACHE": str(cache),
        "DFLASH_MODEL_FETCH_PART_SIZE": "64Ki",  # several ranged GETs per shard
        "DFLASH_MODEL_FETCH_CONCURRENCY": "4",
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", MATERIALIZE, fetched, str(go)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    go.touch()  # all four start at once: they race for the lock
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))

    record = manifest(fetched)
    sizes = {f["path"]: f["size"] for f in record["files"]}
    downloaded = [path for r in reports for path in r["downloaded"]]
    assert sorted(downloaded) == sorted(sizes)  # every object once, none twice
    assert sum(r["bytes"] for r in reports) == record["totalBytes"]
    assert sorted(r["reused"] for r in reports) == [0, *[len(sizes)] * 3]
    part = 64 * 1024
    assert sum(r["requests"] for r in reports) == sum(-(-s // part) for s in sizes.values())
    folder = Path(reports[0]["path"])
    assert all(Path(r["path"]) == folder for r in reports)
    assert folder.parent == cache
    for entry in record["files"]:
        assert sha256((folder / entry["path"]).read_bytes()) == entry["sha256"]
    assert not list((folder / ".dflash" / "tmp").glob("*"))


def test_a_corrupted_s3_object_fails_the_sha256_check_and_is_not_kept(
    fetched: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dflash_trainer.model.local_cache import ModelCacheError, materialize

    bad = "model-00001-of-00003.safetensors"
    store = store_for(fetched)
    data = bytearray(store.read_bytes(join_uri(fetched, bad)))
    data[len(data) // 2] ^= 0xFF
    store.write_bytes(join_uri(fetched, bad), bytes(data))  # same size, other bytes
    monkeypatch.setenv("DFLASH_MODEL_CACHE", str(tmp_path / "cache"))

    expected = next(f["sha256"] for f in manifest(fetched)["files"] if f["path"] == bad)
    with pytest.raises(ModelCacheError) as caught:
        materialize(fetched, include_weights=True)

    assert str(caught.value) == (
        f"{fetched}/{bad}: sha256 {sha256(bytes(data))} does not match dflash-model.json "
        f"({expected}), 2 downloads in a row: the S3 copy is corrupt; delete that object and "
        "retry the model stage (it copies the missing file again)"
    )
    assert caught.value.user_fixable
    folder = next((tmp_path / "cache").iterdir())
    assert not (folder / bad).exists()
    assert not (folder / ".dflash" / "done" / f"{bad}.json").exists()
    # A tokenizer-only load still works: it never touches the corrupt shard.
    assert (materialize(fetched, include_weights=False) / "tokenizer.json").is_file()
    assert not (folder / bad).exists()


def test_an_unfinished_model_stage_is_refused(
    fetched: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dflash_trainer.model.local_cache import ModelCacheError, materialize

    record = manifest(fetched)
    store_for(fetched).write_bytes(
        join_uri(fetched, "dflash-model.json"), json.dumps({**record, "complete": False}).encode()
    )
    monkeypatch.setenv("DFLASH_MODEL_CACHE", str(tmp_path / "cache"))

    with pytest.raises(ModelCacheError, match="the model stage has not finished"):
        materialize(fetched, include_weights=False)


def test_the_target_loader_and_the_tokenizer_load_the_materialized_copy(
    fetched: str, tiny_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    from dflash_trainer.data.target import load_tokenizer, resolve_model_dir
    from dflash_trainer.model.target import load_target
    from safetensors.torch import load_file

    monkeypatch.setenv("DFLASH_CACHE", str(tmp_path / "dflash-cache"))
    tokenizer_dir = Path(resolve_model_dir(fetched))
    assert tokenizer_dir.parent == tmp_path / "dflash-cache" / "models"
    assert not list(tokenizer_dir.glob("*.safetensors"))
    assert load_tokenizer(fetched).encode("hello")

    parts = load_target(
        path=fetched,
        config=None,
        seed=0,
        dtype="float32",
        device=torch.device("cpu"),
        cache_dir=tmp_path / "trainer-cache",
    )

    loaded = parts.model.state_dict()
    for shard in sorted(tiny_repo.glob("*.safetensors")):
        for name, tensor in load_file(shard).items():
            assert torch.equal(loaded[name], tensor.to(torch.float32)), name


def test_a_users_own_s3_model_without_manifest_is_materialized_by_size(
    s3_prefix: str, tiny_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dflash_trainer.model.local_cache import fetch_to_cache

    prefix = f"{s3_prefix}/models/own"
    store = store_for(prefix)
    for name in EXPECTED_FILES:
        store.upload_file(tiny_repo / name, join_uri(prefix, name))
    monkeypatch.setenv("DFLASH_MODEL_CACHE", str(tmp_path / "cache"))

    first = fetch_to_cache(prefix, include_weights=True)
    second = fetch_to_cache(prefix + "/", include_weights=True)

    assert sorted(first.downloaded) == sorted(EXPECTED_FILES)
    assert second.downloaded == [] and second.reused == len(EXPECTED_FILES)
    assert second.path == first.path
    for name in EXPECTED_FILES:
        assert (first.path / name).read_bytes() == (tiny_repo / name).read_bytes()

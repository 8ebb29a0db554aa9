"""The Hugging Face Hub side of the model stage, through huggingface_hub's public API.

`resolve_model` asks once for a revision's commit and the metadata of every file in it
(`HfApi.model_info(files_metadata=True)`); `download_file` fetches one file of that exact
commit (`hf_hub_download(revision=<commit>)`), so every file of a copy comes from the same
commit even if a branch moves during the copy. HF_TOKEN, HF_ENDPOINT (a mirror) and the proxy
variables are read by huggingface_hub itself; the endpoint is also passed explicitly so that
a process that changes HF_ENDPOINT after importing huggingface_hub still uses it.

Failures become `HubUserError` (exit 2: a gated or private repo without a usable token, a
repo or revision that does not exist, HF_HUB_OFFLINE set) or `HubError` (exit 1: the Hub or
the network failed; the Job retries). Messages never contain the token.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dflash_trainer.model.digests import HubHash

DEFAULT_ENDPOINT = "https://huggingface.co"
ACCESS_HINT = "set spec.hfTokenSecretRef to a Secret holding a Hugging Face token that can read it"


class HubError(Exception):
    """The Hub or the network failed (exit 1, the Job retries)."""


class HubUserError(HubError):
    """Something the user fixes: token, model id, revision, offline mode (exit 2)."""


@dataclass(frozen=True)
class HubFile:
    path: str
    size: int
    expected: HubHash


@dataclass(frozen=True)
class HubModel:
    model: str
    commit: str
    files: dict[str, HubFile]


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _token_set() -> bool:
    from huggingface_hub import get_token

    return bool(get_token())


def redact(text: str) -> str:
    """`text` with the token replaced, whatever put it there."""
    from huggingface_hub import get_token

    token = get_token()
    return text.replace(token, "<redacted>") if token else text


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return redact(lines[0] if lines else type(exc).__name__)


@contextmanager
def hub_errors(model: str, revision: str | None, action: str) -> Iterator[None]:
    """Translate huggingface_hub's and the network's exceptions into HubUserError / HubError."""
    from huggingface_hub.errors import (
        FileMetadataError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"{model} on {endpoint()}"
    try:
        yield
    except OfflineModeIsEnabled:
        raise HubUserError(
            f"{action} {where}: HF_HUB_OFFLINE=1 is set; the model stage needs the Hub "
            "(or a mirror in HF_ENDPOINT)"
        ) from None
    except GatedRepoError:
        detail = (
            "the token of spec.hfTokenSecretRef has no access: accept the model's conditions "
            "on the Hub with that token's account"
            if _token_set()
            else f"it is gated: {ACCESS_HINT} (an account that accepted its conditions)"
        )
        raise HubUserError(f"{action} {where} was refused: {detail}") from None
    except RevisionNotFoundError:
        raise HubUserError(
            f"{action} {where}: revision {revision!r} does not exist; accepted: a branch, "
            "tag or commit of the repo (spec.target.revision)"
        ) from None
    except RemoteEntryNotFoundError as exc:
        # The file was listed in the commit a moment ago: the Hub is inconsistent, retry.
        raise HubError(f"{action} {where}: {_first_line(exc)}") from None
    except RepositoryNotFoundError:
        detail = (
            "the token of spec.hfTokenSecretRef cannot read it"
            if _token_set()
            else f"if it is private or gated, {ACCESS_HINT}"
        )
        raise HubUserError(
            f"{action} {where}: the repo was not found or is private; {detail}"
        ) from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status in (401, 403):
            detail = (
                "the token of spec.hfTokenSecretRef was refused" if _token_set() else ACCESS_HINT
            )
            raise HubUserError(f"{action} {where}: HTTP {status}; {detail}") from None
        raise HubError(f"{action} {where} failed: {_first_line(exc)}") from None
    except LocalEntryNotFoundError as exc:
        cause = exc.__cause__
        if isinstance(cause, FileMetadataError):
            raise HubUserError(
                f"{action} {where}: {_first_line(cause)} (check HF_ENDPOINT)"
            ) from None
        if cause is not None:
            raise HubError(f"{action} {where} failed: {_first_line(cause)}") from None
        raise HubError(f"{action} {where} failed: {_first_line(exc)}") from None
    except FileMetadataError as exc:
        raise HubUserError(f"{action} {where}: {_first_line(exc)} (check HF_ENDPOINT)") from None
    except (OSError, ValueError) as exc:
        raise HubError(
            f"{action} {where} failed: {type(exc).__name__}: {_first_line(exc)}"
        ) from None
    except Exception as exc:  # httpx2 transport errors and anything else from the client
        if type(exc).__module__.startswith(("httpx", "httpcore")):
            raise HubError(
                f"{action} {where} failed: {type(exc).__name__}: {_first_line(exc)}"
            ) from None
        raise


def _hub_file(sibling: object) -> HubFile | None:
    path = getattr(sibling, "rfilename", None)
    size = getattr(sibling, "size", None)
    lfs = getattr(sibling, "lfs", None)
    blob_id = getattr(sibling, "blob_id", None)
    if not path or size is None:
        return None
    if lfs is not None:
        return HubFile(path, int(lfs.size), HubHash("sha256", lfs.sha256))
    if blob_id:
        return HubFile(path, int(size), HubHash("git-sha1", blob_id))
    return None


def resolve_model(model: str, revision: str | None) -> HubModel:
    """The commit `revision` (default branch when None) points at, and its files' metadata."""
    from huggingface_hub import HfApi

    with hub_errors(model, revision, "reading"):
        info = HfApi(endpoint=endpoint()).model_info(model, revision=revision, files_metadata=True)
    if not info.sha:
        raise HubError(f"reading {model} on {endpoint()}: the answer has no commit sha")
    files = {}
    for sibling in info.siblings or []:
        hub_file = _hub_file(sibling)
        if hub_file is not None:
            files[hub_file.path] = hub_file
    return HubModel(model, info.sha, files)


def download_file(model: HubModel, path: str, folder: Path, cache_dir: Path) -> Path:
    """Download `path` of `model.commit` into `folder`; `cache_dir` is a private HF cache so
    that nothing is taken from (or left in) the pod's own Hugging Face cache."""
    from huggingface_hub import hf_hub_download

    with hub_errors(model.model, model.commit, "downloading " + path + " of"):
        local = hf_hub_download(
            model.model,
            path,
            revision=model.commit,
            local_dir=folder,
            cache_dir=cache_dir,
            endpoint=endpoint(),
        )
    return Path(str(local))

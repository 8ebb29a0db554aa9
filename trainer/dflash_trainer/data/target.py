"""The target model's tokenizer as the data stages need it: loaded offline from a local folder,
an S3 prefix (fetched once per node into the model cache, `model.local_cache`) or the HF cache,
plus the ids of its control tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflash_trainer.data.errors import BadInputError, is_user_fixable
from dflash_trainer.data.uris import to_local_uri
from dflash_trainer.model.local_cache import ModelCacheError, materialize
from dflash_trainer.storage import StorageError, is_s3_uri

THINK_START = "<think>"
THINK_END = "</think>"


@dataclass(frozen=True)
class TokenIds:
    end_of_turn: int
    think_start: int | None
    think_end: int | None
    vocab_size: int


def resolve_model_dir(model: str, include_weights: bool = False) -> str:
    """A local folder or hub id for `model`; an s3:// prefix is materialized into the node's
    model cache first (only the tokenizer and config files unless `include_weights`)."""
    model = to_local_uri(model)
    if not is_s3_uri(model):
        return model
    try:
        return str(materialize(model, include_weights))
    except ModelCacheError as exc:
        if not exc.user_fixable:
            raise
        raise BadInputError(f"--model {model}: {exc}") from None
    except StorageError as exc:
        if not is_user_fixable(exc):
            raise
        raise BadInputError(f"--model {model}: {exc}") from None


def context_length(model_dir: str) -> int | None:
    """`max_position_embeddings` from a local model folder's config.json (text config of VLMs)."""
    import json

    config = Path(model_dir) / "config.json"
    if not config.is_file():
        return None
    data = json.loads(config.read_text())
    for holder in (data, data.get("text_config") or {}):
        value = holder.get("max_position_embeddings")
        if isinstance(value, int):
            return value
    return None


def load_tokenizer(model: str, revision: str | None = None) -> Any:
    """The target's tokenizer (offline); BadInputError names the model when it cannot load."""
    from transformers import AutoTokenizer

    path = resolve_model_dir(model)
    try:
        return AutoTokenizer.from_pretrained(path, revision=revision)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInputError(f"--model {model}: cannot load a tokenizer: {first}") from None


def single_token_id(tokenizer: Any, token: str) -> int | None:
    ids = tokenizer.encode(token, add_special_tokens=False)
    return int(ids[0]) if len(ids) == 1 else None


def token_ids(tokenizer: Any, end_of_turn: str | None = None) -> TokenIds:
    eot = end_of_turn or tokenizer.eos_token
    eot_id = single_token_id(tokenizer, eot) if eot else None
    if eot_id is None:
        raise BadInputError(
            f"end-of-turn token {eot!r} is not one token of the target tokenizer; pass --end-of-turn"
        )
    return TokenIds(
        end_of_turn=eot_id,
        think_start=single_token_id(tokenizer, THINK_START),
        think_end=single_token_id(tokenizer, THINK_END),
        vocab_size=len(tokenizer),
    )

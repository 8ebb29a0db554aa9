"""Which files of a Hub model repo a model load needs, and nothing else.

A Hub repo often carries the weights two or three times (`*.safetensors` next to
`pytorch_model*.bin`, an `original/` folder of `consolidated.*.pth`, GGUF quantizations) plus
READMEs and images. The run copies only what transformers, vLLM and the tokenizer read from the
root of a model folder, so a 27B target costs its ~54 GB of safetensors once, not 150 GB. Pure
logic: no network, no torch.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

# Configs and tokenizer files read by AutoConfig / AutoTokenizer / AutoProcessor / vLLM.
CONFIG_FILES = frozenset(
    {
        "config.json",
        "generation_config.json",
        # tokenizer
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.json",
        "merges.txt",
        "tokenizer.model",
        "chat_template.jinja",
        "chat_template.json",
        # multimodal targets (Qwen3.5/3.6 are vision-language checkpoints)
        "preprocessor_config.json",
        "processor_config.json",
        "video_preprocessor_config.json",
    }
)
WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json")
# Mistral's native-format duplicate of the weights: transformers and vLLM's HF loader read the
# `model-*.safetensors` shards; the consolidated file is skipped whenever those exist.
CONSOLIDATED_PATTERN = "consolidated*.safetensors"


class NoSafetensorsError(ValueError):
    """The repo has no `*.safetensors` weights at its root (only .bin/.pth/.gguf, or nothing)."""


def is_weight_file(path: str) -> bool:
    return any(fnmatch.fnmatch(path, pattern) for pattern in WEIGHT_PATTERNS)


def select_model_files(repo_files: Iterable[str], model: str = "the model") -> list[str]:
    """The repo files a model load needs, sorted: configs, tokenizer files and safetensors
    weights at the repo root. Raises NoSafetensorsError when there are no safetensors weights."""
    root_files = sorted({f for f in repo_files if "/" not in f})
    weights = [f for f in root_files if fnmatch.fnmatch(f, "*.safetensors")]
    if not weights:
        others = [f for f in root_files if f.endswith((".bin", ".pth", ".pt", ".gguf"))]
        found = f" (it has {', '.join(others[:3])}{' ...' if len(others) > 3 else ''})"
        raise NoSafetensorsError(
            f"{model} has no *.safetensors weights at its root{found if others else ''}; "
            "accepted: a Hub model stored as safetensors (convert it, or point spec.target.model "
            "at an s3:// copy of a safetensors checkpoint)"
        )
    drop_consolidated = any(not fnmatch.fnmatch(f, CONSOLIDATED_PATTERN) for f in weights)
    selected = []
    for path in root_files:
        if drop_consolidated and fnmatch.fnmatch(path, CONSOLIDATED_PATTERN):
            continue
        if path in CONFIG_FILES or is_weight_file(path):
            selected.append(path)
    return selected

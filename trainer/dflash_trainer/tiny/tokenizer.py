"""Build the tiny target's tokenizer: byte-level BPE trained in-process, Qwen3 special tokens.

The chat template is attached by `tiny.build`; the model config lives in `tiny.model`.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from dflash_trainer.tiny.corpus import corpus_text

# The Qwen3 control tokens, in Qwen3's own order. `<think>`/`</think>` (and the tool tags) are
# *not* special in Qwen3: they survive `skip_special_tokens=True`, which is how vLLM returns
# reasoning text. `<|im_end|>` is the end-of-turn (EOS) token of the instruct models.
ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
THINK_START = "<think>"
THINK_END = "</think>"
SPECIAL_TOKENS: tuple[str, ...] = (ENDOFTEXT, IM_START, IM_END)
PLAIN_ADDED_TOKENS: tuple[str, ...] = (
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    THINK_START,
    THINK_END,
)
TEMPLATE_FILES = {"qwen3": "qwen3.jinja", "qwen3_5": "qwen3_5.jinja"}

# Merges beyond what the corpus supports are simply not learned; 400 keeps every tiny prompt
# to a few dozen tokens while the whole vocabulary stays under the 512 model rows.
DEFAULT_BPE_VOCAB = 400


def load_chat_template(arch: str) -> str:
    """The real chat template of the target family `arch` (package data, see templates/)."""
    if arch not in TEMPLATE_FILES:
        raise ValueError(f"--arch {arch!r} is not supported; accepted: {', '.join(TEMPLATE_FILES)}")
    ref = (
        resources.files("dflash_trainer.tiny").joinpath("templates").joinpath(TEMPLATE_FILES[arch])
    )
    return ref.read_text(encoding="utf-8")


def build_bpe_tokenizer(vocab_size: int = DEFAULT_BPE_VOCAB) -> Tokenizer:
    """Train byte-level BPE on the built-in corpus; add the Qwen3 control tokens after it."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        min_frequency=2,
    )
    tok.train_from_iterator(corpus_text().split("\n\n"), trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in PLAIN_ADDED_TOKENS])
    return tok


def build_hf_tokenizer(arch: str, vocab_size: int = DEFAULT_BPE_VOCAB) -> PreTrainedTokenizerFast:
    """The tiny tokenizer wrapped for transformers, with the real chat template of `arch`."""
    tokenizer_class: Any = PreTrainedTokenizerFast
    tokenizer: PreTrainedTokenizerFast = tokenizer_class(
        tokenizer_object=build_bpe_tokenizer(vocab_size),
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        chat_template=load_chat_template(arch),
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )
    return tokenizer

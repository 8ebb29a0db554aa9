"""Which writing system a text uses, per row, vectorised: letters are counted per Unicode script
from the UTF-8 bytes of a whole batch at once (no per-row Python, no decoding to str).

Used by the wrong-language check: an answer written in a script the prompt does not use (an
English prompt answered in Chinese, a Russian one answered in English) is the signature of a
broken system prompt, a wrong chat template or a mislabelled source.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np
import pyarrow as pa

from dflash_trainer.data.audit.text_keys import string_buffers


class Script(IntEnum):
    NONE = 0  # digits, punctuation, symbols, whitespace, emoji: not letters of any one script
    LATIN = 1
    GREEK = 2
    CYRILLIC = 3
    ARMENIAN = 4
    HEBREW = 5
    ARABIC = 6
    DEVANAGARI = 7
    BENGALI = 8
    TAMIL = 9
    THAI = 10
    GEORGIAN = 11
    HANGUL = 12
    KANA = 13
    HAN = 14
    ETHIOPIC = 15
    OTHER_INDIC = 16


# (first code point, last code point, script): the letter blocks of the scripts above.
SCRIPT_BLOCKS: tuple[tuple[int, int, Script], ...] = (
    (0x41, 0x5A, Script.LATIN),
    (0x61, 0x7A, Script.LATIN),
    (0xC0, 0xD6, Script.LATIN),
    (0xD8, 0xF6, Script.LATIN),
    (0xF8, 0x24F, Script.LATIN),
    (0x1E00, 0x1EFF, Script.LATIN),
    (0x370, 0x3FF, Script.GREEK),
    (0x1F00, 0x1FFF, Script.GREEK),
    (0x400, 0x52F, Script.CYRILLIC),
    (0x531, 0x58F, Script.ARMENIAN),
    (0x5D0, 0x5FF, Script.HEBREW),
    (0x620, 0x64A, Script.ARABIC),
    (0x66E, 0x6D3, Script.ARABIC),
    (0x750, 0x77F, Script.ARABIC),
    (0x900, 0x97F, Script.DEVANAGARI),
    (0x980, 0x9FF, Script.BENGALI),
    (0xA00, 0xB7F, Script.OTHER_INDIC),
    (0xB80, 0xBFF, Script.TAMIL),
    (0xC00, 0xDFF, Script.OTHER_INDIC),
    (0xE00, 0xE7F, Script.THAI),
    (0x10A0, 0x10FF, Script.GEORGIAN),
    (0x1100, 0x11FF, Script.HANGUL),
    (0x1200, 0x139F, Script.ETHIOPIC),
    (0x3041, 0x30FF, Script.KANA),
    (0x3131, 0x318F, Script.HANGUL),
    (0x3400, 0x4DBF, Script.HAN),
    (0x4E00, 0x9FFF, Script.HAN),
    (0xAC00, 0xD7A3, Script.HANGUL),
    (0xF900, 0xFAFF, Script.HAN),
)
SCRIPTS = len(Script)
BMP = 0x10000
SCRIPT_OF_BMP = np.zeros(BMP, dtype=np.uint8)
for _first, _last, _script in SCRIPT_BLOCKS:
    SCRIPT_OF_BMP[_first : _last + 1] = _script
HAN_SUPPLEMENT = (0x20000, 0x3134F)  # CJK extensions B..G

CONTINUATION_FIRST = np.uint8(0x80)
LEAD_2, LEAD_3, LEAD_4 = 0xC0, 0xE0, 0xF0


def _code_points(data: np.ndarray, lead: np.ndarray) -> np.ndarray:
    """Code points of the multi-byte UTF-8 characters starting at `lead` (lead bytes >= 0xC0)."""
    padded = np.concatenate([data, np.zeros(3, dtype=np.uint8)])
    b0 = padded[lead].astype(np.int32)
    b1 = padded[lead + 1].astype(np.int32) & 0x3F
    b2 = padded[lead + 2].astype(np.int32) & 0x3F
    b3 = padded[lead + 3].astype(np.int32) & 0x3F
    cp: np.ndarray = np.where(
        b0 < LEAD_3,
        ((b0 & 0x1F) << 6) | b1,
        np.where(
            b0 < LEAD_4,
            ((b0 & 0x0F) << 12) | (b1 << 6) | b2,
            ((b0 & 0x07) << 18) | (b1 << 12) | (b2 << 6) | b3,
        ),
    )
    return cp


ASCII_UPPER_A, ASCII_LOWER_A, LETTERS = np.uint8(65), np.uint8(97), np.uint8(26)


def script_counts(texts: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Letters per script of each text: an int64 array of shape (rows, SCRIPTS).

    ASCII (most text) is counted with byte arithmetic and one cumulative sum; only the lead
    bytes of multi-byte characters are decoded."""
    data, offsets = string_buffers(texts)
    rows = len(offsets) - 1
    counts = np.zeros((rows, SCRIPTS), dtype=np.int64)
    if len(data) == 0:
        return counts
    ascii_letter = ((data - ASCII_UPPER_A) < LETTERS) | ((data - ASCII_LOWER_A) < LETTERS)
    running = np.zeros(len(data) + 1, dtype=np.int32)
    np.cumsum(ascii_letter, out=running[1:])
    counts[:, Script.LATIN] = running[offsets[1:]] - running[offsets[:-1]]
    lead = np.flatnonzero(data >= LEAD_2)
    if len(lead) == 0:
        return counts
    cp = _code_points(data, lead)
    script = np.where(cp < BMP, SCRIPT_OF_BMP[np.minimum(cp, BMP - 1)], Script.NONE)
    script = np.where(
        (cp >= HAN_SUPPLEMENT[0]) & (cp <= HAN_SUPPLEMENT[1]), Script.HAN, script
    ).astype(np.int64)
    letters = script > 0
    row = np.searchsorted(offsets, lead[letters], side="right") - 1
    counts += np.bincount(row * SCRIPTS + script[letters], minlength=rows * SCRIPTS).reshape(
        rows, SCRIPTS
    )
    return counts


# A row is judged only when both texts have this many letters: "42" or a code block has none.
MIN_LETTERS = 16
# The prompt's scripts: every script with at least this share of its letters (a Japanese
# prompt mixes Han and Kana; an English prompt quoting a Chinese word is still Latin).
PROMPT_SCRIPT_SHARE = 0.2
# An answer is in another language when under this share of its letters are in the prompt's
# scripts (code and proper names in Latin letters keep a Chinese answer well above it).
ANSWER_SHARED_SHARE = 0.1


def wrong_language(prompt: np.ndarray, answer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(judged, wrong) per row, from the script counts of the prompt and the answer."""
    prompt_letters = prompt.sum(axis=1)
    answer_letters = answer.sum(axis=1)
    judged = (prompt_letters >= MIN_LETTERS) & (answer_letters >= MIN_LETTERS)
    prompt_scripts = prompt >= PROMPT_SCRIPT_SHARE * np.maximum(prompt_letters, 1)[:, None]
    shared = (answer * prompt_scripts).sum(axis=1)
    wrong = judged & (shared < ANSWER_SHARED_SHARE * answer_letters)
    return judged, wrong

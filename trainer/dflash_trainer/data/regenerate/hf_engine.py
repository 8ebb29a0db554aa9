"""The transformers engine: batched `generate` on CPU (tests, the demo) or a single GPU.

Slow next to vLLM but exact and dependency-free; the tiny target makes it fast enough for CI.
"""

from __future__ import annotations

from typing import Any

import torch

from dflash_trainer.data.regenerate.engine import (
    FINISH_LENGTH,
    FINISH_STOP,
    Generation,
    SamplingSpec,
    request_seed,
)


class TransformersEngine:
    name = "transformers"

    def __init__(
        self,
        model_dir: str,
        tokenizer: Any,
        sampling: SamplingSpec,
        eot_id: int,
        batch_size: int = 16,
        threads: int | None = None,
        revision: str | None = None,
    ) -> None:
        from transformers import AutoModelForCausalLM

        if threads:
            torch.set_num_threads(threads)
        self.model = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.float32, revision=revision
        )
        self.model.train(False)
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.eot_id = eot_id
        self.batch_size = batch_size
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else eot_id

    def generate(self, prompts: list[list[int]], request_ids: list[str]) -> list[Generation]:
        out: list[Generation] = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = prompts[start : start + self.batch_size]
            ids = request_ids[start : start + self.batch_size]
            out.extend(self._generate_batch(chunk, ids))
        return out

    def _generate_batch(self, prompts: list[list[int]], request_ids: list[str]) -> list[Generation]:
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):  # left padding: generation continues at the end
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt)
            attention[row, width - len(prompt) :] = 1
        s = self.sampling
        # transformers samples a batch from one generator: seed it from the batch's first sample
        # so that a resumed shard, batched the same way, regenerates the same answers.
        torch.manual_seed(request_seed(s.seed, request_ids[0]))
        sample = s.temperature > 0
        kwargs: dict[str, Any] = {
            "max_new_tokens": s.max_tokens,
            "do_sample": sample,
            "eos_token_id": self.eot_id,
            "pad_token_id": self.pad_id,
        }
        if sample:
            kwargs |= {"temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k or None}
            if s.min_p > 0:
                kwargs["min_p"] = s.min_p
        if s.repetition_penalty != 1.0:
            kwargs["repetition_penalty"] = s.repetition_penalty
        with torch.no_grad():
            generated = self.model.generate(input_ids=input_ids, attention_mask=attention, **kwargs)
        results = []
        for row in generated[:, width:].tolist():
            if self.eot_id in row:
                tokens = row[: row.index(self.eot_id) + 1]
                finish = FINISH_STOP
            else:
                tokens = row
                finish = FINISH_LENGTH
            body = tokens[:-1] if finish == FINISH_STOP else tokens
            text = self.tokenizer.decode(body, skip_special_tokens=True)
            results.append(Generation(token_ids=tokens, text=text, finish_reason=finish))
        return results

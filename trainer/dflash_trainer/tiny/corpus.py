"""The small built-in text corpus the tiny tokenizer is trained on and tiny prompts come from.

Fixed text (no randomness, no download) so that the tiny target is identical on every machine.
"""

from __future__ import annotations

# A little of everything the real targets see: prose, questions, code, numbers and markup, so
# that byte-level BPE learns merges for each and tiny prompts tokenize to a sensible length.
PARAGRAPHS: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog while the cat watches from the window.",
    "Speculative decoding lets a small drafter propose several tokens that a large target "
    "model then verifies in one forward pass.",
    "A block diffusion drafter predicts a whole block of masked tokens at once, conditioned on "
    "hidden states taken from a few layers of the target model.",
    "Write a function that returns the sum of the squares of a list of integers.",
    "def sum_of_squares(values):\n    return sum(v * v for v in values)\n",
    "for i in range(10):\n    print(i, i * i)\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n"
    "    def push(self, item):\n        self.items.append(item)\n",
    "SELECT name, count(*) FROM orders GROUP BY name ORDER BY count(*) DESC LIMIT 10;",
    "What is the capital of France? The capital of France is Paris.",
    "Explain why the sky is blue in two sentences.",
    "Sunlight is scattered by the molecules of the air, and blue light is scattered more "
    "than red light because it has a shorter wavelength.",
    "Let x = 3 and y = 4. Then x + y = 7, x * y = 12 and the hypotenuse is 5.",
    "The numbers 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 100 1000 2048 4096.",
    "First, read the question carefully. Second, list what is known. Third, solve step by "
    "step and check the answer.",
    "Okay, let me think about this. The user wants a short answer, so I will be brief.",
    "Hmm, that is not quite right. Let me try again with a different approach.",
    "Summarize the following text in one paragraph: the meeting covered budgets, hiring "
    "and the product roadmap for the next quarter.",
    "Translate to French: good morning, how are you today?",
    "Bonjour, comment allez-vous aujourd'hui ?",
    "# Title\n\n- item one\n- item two\n\n**bold** and *italic* text with `code`.",
    '{"name": "tiny", "layers": 8, "hidden": 64, "tags": ["test", "demo"]}',
    "If it rains tomorrow, we will stay inside and read books about history and science.",
    "The training loop computes the loss, calls backward, clips the gradients and steps the "
    "optimizer.",
    "Kubernetes runs the regeneration shards as an indexed job, one pod per shard.",
    "An audit gate stops the run when most answers are empty stubs like OK.",
    "Please answer with yes or no: is seven a prime number? Yes, seven is prime.",
    "The mitochondria is the powerhouse of the cell, and photosynthesis happens in leaves.",
    "To sort a list in Python, call sorted(items) or items.sort() for an in-place sort.",
    "import numpy as np\nx = np.arange(10)\nprint(x.mean(), x.std())\n",
    "Once upon a time, a small robot learned to draw circles, squares and triangles.",
    # Chat-format words, so the tokenizer learns merges for the roles and the think block.
    "system user assistant user assistant system user assistant",
    "<think>\nThe user asks a question. I should answer it.\n</think>\n\nHere is the answer.",
)

# Topics and question shapes that `build_prompts` combines into many distinct tiny prompts.
TOPICS: tuple[str, ...] = (
    "prime numbers",
    "sorting a list",
    "the color of the sky",
    "photosynthesis",
    "binary search",
    "the French language",
    "a stack data structure",
    "SQL queries",
    "speculative decoding",
    "gradient clipping",
    "indexed jobs",
    "the capital of France",
    "rainy days",
    "robots that draw",
    "squares and circles",
    "the number seven",
)
QUESTION_SHAPES: tuple[str, ...] = (
    "Explain {topic} in one sentence.",
    "Write a short poem about {topic}.",
    "What is the most important fact about {topic}?",
    "Give two examples related to {topic}.",
    "Write Python code that has something to do with {topic}.",
    "Summarize what you know about {topic}.",
    "Is {topic} hard to learn? Answer briefly.",
    "Compare {topic} with something simpler.",
)


def corpus_text() -> str:
    """The whole corpus as one string (used to train the tiny tokenizer)."""
    return "\n\n".join(PARAGRAPHS)

"""Seed 002's serving workload on a random GritLM: the benchmark's prompts (GritLM instruction
prompts, as in upstream PR #38139's test) and a tokenizer that turns them into the token pattern
vLLM's GritLM pooler searches for, so its instruction-trimming path (the host read of every
prompt's token ids that the seed's patch changes) runs on every request.

vLLM's `GritLMMeanPool` looks the pattern up by token *strings* in the model's tokenizer (Llama's
SentencePiece pieces): `<s>`, then `▁< | user | > <0x0A>` right after it (a user instruction),
then `<0x0A> < | embed | > <0x0A>` (the end of the instruction). The tokenizer here mimics what
Llama's does with such text: a `▁` before the first word and for every space, newlines as the
byte token `<0x0A>`, `<`, `|`, `>` and each digit as tokens of their own, a BOS in front; every
other run of characters is one word of a fixed word-level vocabulary (the benchmark's own words,
then filler up to the model's vocabulary size; an unknown word is `<unk>`).

Standard library at import; `tokenizers` only inside `tokenizer()` (the GPU image has it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

#: The GritLM pooler's pattern tokens first, at fixed ids (verify.gpu.device.grit_prompts
#: builds prompts from these ids directly).
GRIT_TOKENS = ["<unk>", "<s>", "</s>", "▁<", "<", "|", "embed", ">", "<0x0A>", "user"]
VOCAB_SIZE = 32000

#: Upstream PR #38139's benchmark data: one instruction, eight titles, prompt i = title i % 8.
INSTRUCTION = "<|user|>\nGiven a scientific paper title, retrieve the paper's abstract\n<|embed|>\n"
TITLES = (
    "Bitcoin: A Peer-to-Peer Electronic Cash System",
    "Generative Representational Instruction Tuning",
    "Attention Is All You Need",
    "BERT: Pre-training of Deep Bidirectional Transformers",
    "Language Models are Few-Shot Learners",
    "Retrieval-Augmented Generation for Knowledge-Intensive NLP Tasks",
    "LoRA: Low-Rank Adaptation of Large Language Models",
    "FlashAttention: Fast and Memory-Efficient Exact Attention",
)

#: One token per match, tried in this order: the newline byte token, `<` (with the word-start
#: mark when a space or the text's start is before it), `|`, `>`, a digit, a word, a lone mark.
SPLIT = r"<0x0A>|▁?<|\||>|▁?[0-9]|▁?[^▁<|>0-9]+|▁"


def bench_prompts(count: int) -> list[str]:
    """The benchmark's prompts: the instruction, then title i % 8 and ` (i)`."""
    return [f"{INSTRUCTION}{TITLES[i % len(TITLES)]} ({i})" for i in range(count)]


def write_dataset(path: Path, count: int = 2000) -> Path:
    """`vllm bench serve --dataset-name custom` input: one {"prompt": ...} per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in bench_prompts(count)))
    return path


def normalize(text: str) -> str:
    """What the tokenizer's normalizer does: `▁` in front and for every space, `\\n` spelled
    as its byte token."""
    return "▁" + text.replace(" ", "▁").replace("\n", "<0x0A>")


def pieces(text: str) -> list[str]:
    """The token strings of `text` (without the BOS), in pure Python: the split the tokenizer's
    pre-tokenizer makes of the normalized text."""
    return re.findall(SPLIT, normalize(text))


def vocabulary() -> dict[str, int]:
    """GRIT_TOKENS, the benchmark's own words (pieces of all its prompts), then `w<id>` filler
    up to VOCAB_SIZE."""
    vocab = {token: i for i, token in enumerate(GRIT_TOKENS)}
    words = [piece for prompt in bench_prompts(len(TITLES)) for piece in pieces(prompt)]
    for piece in [*words, *"0123456789", *("▁" + d for d in "0123456789")]:
        vocab.setdefault(piece, len(vocab))
    for i in range(len(vocab), VOCAB_SIZE):
        vocab[f"w{i}"] = i
    return vocab


def tokenizer():
    """The `tokenizers.Tokenizer` (save it through transformers' PreTrainedTokenizerFast)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers.processors import TemplateProcessing

    tok = Tokenizer(models.WordLevel(vocabulary(), unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence(
        [
            normalizers.Prepend("▁"),
            normalizers.Replace(" ", "▁"),
            normalizers.Replace("\n", "<0x0A>"),
        ]
    )
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(SPLIT), behavior="isolated")
    tok.post_processor = TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", GRIT_TOKENS.index("<s>"))]
    )
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    return tok

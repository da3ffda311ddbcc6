"""verify.gpu.gritlm: seed 002's GritLM prompts become the token pattern that vLLM's GritLM
pooler trims (so the serving A/B runs the patched host read of the prompt token ids). The
tokenizer checks need `tokenizers` / `transformers`, the pooler check vLLM itself (the CPU
runtime or the GPU bundle); the pure-Python split and the dataset are checked everywhere."""

from __future__ import annotations

import json

import pytest

from verify.gpu import gritlm

USER = ["▁<", "|", "user", "|", ">", "<0x0A>"]
END_OF_INSTRUCTION = ["<0x0A>", "<", "|", "embed", "|", ">", "<0x0A>"]
SAMPLES = [0, 7, 8, 1999]


def find(tokens: list[str], target: list[str]) -> list[int]:
    return [i for i in range(len(tokens)) if tokens[i : i + len(target)] == target]


def test_dataset_is_the_seeds_2000_instruction_prompts(tmp_path):
    path = gritlm.write_dataset(tmp_path / "d" / "gritlm_bench.jsonl", 2000)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 2000 and all(set(r) == {"prompt"} for r in rows)
    title = "Generative Representational Instruction Tuning"
    assert rows[9]["prompt"] == f"{gritlm.INSTRUCTION}{title} (9)"
    assert rows[1999]["prompt"].endswith(
        "FlashAttention: Fast and Memory-Efficient Exact Attention (1999)"
    )


@pytest.mark.parametrize("index", SAMPLES)
def test_a_prompt_splits_into_the_user_and_embed_patterns(index):
    prompt = gritlm.bench_prompts(index + 1)[index]
    tokens = gritlm.pieces(prompt)
    assert tokens[: len(USER)] == USER
    (end,) = find(tokens, END_OF_INSTRUCTION)  # exactly once
    body = "".join(tokens[end + len(END_OF_INSTRUCTION) :]).replace("▁", " ")
    assert body == f"{gritlm.TITLES[index % 8]} ({index})"


def test_every_piece_of_the_benchmark_has_a_word_of_its_own():
    vocab = gritlm.vocabulary()
    assert len(vocab) == gritlm.VOCAB_SIZE and sorted(vocab.values()) == list(range(len(vocab)))
    assert [vocab[t] for t in gritlm.GRIT_TOKENS] == list(range(len(gritlm.GRIT_TOKENS)))
    unknown = {p for text in gritlm.bench_prompts(2000) for p in gritlm.pieces(text)} - set(vocab)
    assert not unknown


def expected_ids(prompt: str) -> list[int]:
    vocab = gritlm.vocabulary()
    return [vocab["<s>"], *(vocab[p] for p in gritlm.pieces(prompt))]


@pytest.mark.parametrize("index", SAMPLES)
def test_the_tokenizer_encodes_a_bos_and_the_pieces(index):
    pytest.importorskip("tokenizers")
    prompt = gritlm.bench_prompts(index + 1)[index]
    assert gritlm.tokenizer().encode(prompt).ids == expected_ids(prompt)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The tokenizer as build_grit_model saves it, loaded back the way vLLM loads it."""
    transformers = pytest.importorskip("transformers")
    path = tmp_path_factory.mktemp("grit")
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=gritlm.tokenizer(), bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.save_pretrained(path)
    return transformers.AutoTokenizer.from_pretrained(path)


@pytest.mark.parametrize("index", SAMPLES)
def test_the_saved_tokenizer_round_trips(saved, index):
    prompt = gritlm.bench_prompts(index + 1)[index]
    ids = saved(prompt).input_ids
    assert ids == expected_ids(prompt)
    assert saved.decode(ids, skip_special_tokens=True) == prompt


@pytest.mark.parametrize("index", SAMPLES)
def test_vllms_gritlm_pooler_trims_exactly_the_instruction(saved, index, monkeypatch):
    """vLLM's own pattern search (GritLMMeanPool) on the served token ids: the instruction
    ends after the newline that follows `<|embed|>` (1 = no pattern found, BOS only)."""
    np = pytest.importorskip("numpy")
    models = pytest.importorskip("vllm.model_executor.models.gritlm")
    monkeypatch.setattr(models, "cached_tokenizer_from_config", lambda config: saved)
    pool = models.GritLMMeanPool(model_config=None)
    prompt = gritlm.bench_prompts(index + 1)[index]
    ids = saved(prompt).input_ids
    (end,) = find(saved.convert_ids_to_tokens(ids), END_OF_INSTRUCTION)
    assert pool._get_instruction_len(np.array(ids)) == end + len(END_OF_INSTRUCTION) > 1

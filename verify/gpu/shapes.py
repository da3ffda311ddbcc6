"""Production model shapes without checkpoints: the `config.json` of an 8B-class model (and the
other shapes the seeds name), for vLLM's `load_format="dummy"`, which makes the weights itself.

    python3 -m verify.gpu.shapes qwen3-8b /tmp/pb-qwen3-8b   # writes DIR/config.json

A shape's numbers are its published model card's `config.json` (the fields vLLM reads). Engines
run with `skip_tokenizer_init=True` on prompt token ids; for `vllm serve` and `vllm bench serve`,
`--tokenizer` also writes a word-level tokenizer of the shape's whole vocabulary (token i is the
word `t<i>`, so any sampled id decodes and random prompts round-trip exactly). Standard library
only at import (the tokenizer needs `tokenizers`, which the GPU image has)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from verify.errors import PatchbenchError

_QWEN3 = {"model_type": "qwen3", "rope_theta": 1000000.0, "rms_norm_eps": 1e-6}
_LLAMA = {"rope_theta": 500000.0, "rms_norm_eps": 1e-5, "mlp_bias": False, "attention_bias": False}
#: The transformer body Llama-3.1-8B and Mistral-7B share.
_LLAMA_BODY = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
}
SHAPES: dict[str, dict] = {
    # Qwen3-8B: the dense shape of seed 003's users (and MRV2's default on 0.22.0)
    "qwen3-8b": {
        **_QWEN3,
        "architectures": ["Qwen3ForCausalLM"],
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "tie_word_embeddings": False,
    },
    # Llama-3.1-8B: the most benchmarked 8B shape upstream (V1 runner on 0.22.0)
    "llama-3.1-8b": {
        **_LLAMA,
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        **_LLAMA_BODY,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        "tie_word_embeddings": False,
    },
    # GritLM-7B: a Mistral-7B body (seed 002's embeddings)
    "mistral-7b": {
        "model_type": "mistral",
        "architectures": ["MistralForCausalLM"],
        **_LLAMA_BODY,
        "vocab_size": 32000,
        "max_position_embeddings": 32768,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-5,
        "sliding_window": None,
        "tie_word_embeddings": False,
    },
    # Qwen3-30B-A3B: seed 000's MoE (needs the runtime's fused-MoE kernels)
    "qwen3-30b-a3b": {
        **_QWEN3,
        "model_type": "qwen3_moe",
        "architectures": ["Qwen3MoeForCausalLM"],
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "moe_intermediate_size": 768,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "decoder_sparse_step": 1,
        "norm_topk_prob": True,
        "mlp_only_layers": [],
        "num_hidden_layers": 48,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "tie_word_embeddings": False,
    },
}
COMMON = {"torch_dtype": "bfloat16", "hidden_act": "silu", "bos_token_id": 0, "eos_token_id": 2}
#: bf16
BYTES = 2


class ShapeError(PatchbenchError):
    """An unknown model shape."""


def config(name: str) -> dict:
    """The `config.json` of shape `name`; ShapeError naming the known ones otherwise."""
    if name not in SHAPES:
        raise ShapeError(f"model shape {name!r}: expected one of {sorted(SHAPES)}")
    return {**COMMON, **SHAPES[name]}


def model_dir(name: str) -> Path:
    """Where the device scripts keep shape `name`'s config (/tmp/pb-<name>)."""
    return Path(f"/tmp/pb-{name}")


def write(name: str, path: Path) -> Path:
    """Write shape `name`'s config.json into `path` (created); returns `path`."""
    cfg = config(name)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return path


#: The tokenizer's special words: ids 0, 1, 2 (the shapes' bos and eos ids are 0 and 2).
SPECIAL = ("<unk>", "<s>", "</s>")


def write_tokenizer(path: Path, vocab_size: int) -> Path:
    """A word-level tokenizer of `vocab_size` ids into `path` (tokenizer.json and its config)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {word: i for i, word in enumerate(SPECIAL)}
    vocab |= {f"t{i}": i for i in range(len(SPECIAL), vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIAL[0]))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1 << 20}
    config |= dict(zip(("unk_token", "bos_token", "eos_token"), SPECIAL, strict=True))
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return path


def kv_bytes_per_token(cfg: dict) -> int:
    """KV-cache bytes one token takes (every layer's K and V heads, bf16)."""
    return cfg["num_hidden_layers"] * 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * BYTES


def parameters(cfg: dict) -> int:
    """Parameter count from the shape (embeddings, head, attention, MLP or experts; norms and
    the router are left out: under 0.1%)."""
    h, layers, hd = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["head_dim"]
    vocab = cfg["vocab_size"] * h * (1 if cfg.get("tie_word_embeddings") else 2)
    attn = h * hd * (2 * cfg["num_attention_heads"] + 2 * cfg["num_key_value_heads"])
    if "num_experts" in cfg:
        mlp = cfg["num_experts"] * 3 * h * cfg["moe_intermediate_size"]
    else:
        mlp = 3 * h * cfg["intermediate_size"]
    return vocab + layers * (attn + mlp)


def weight_bytes(cfg: dict) -> int:
    return parameters(cfg) * BYTES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("shape", help=f"one of {sorted(SHAPES)}")
    parser.add_argument("path", type=Path, help="folder for config.json")
    parser.add_argument("--tokenizer", action="store_true", help="and a word-level tokenizer")
    args = parser.parse_args(argv)
    try:
        cfg = config(args.shape)
    except ShapeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write(args.shape, args.path)
    if args.tokenizer:
        write_tokenizer(args.path, cfg["vocab_size"])
    print(f"{args.path}/config.json: {args.shape}, {parameters(cfg) / 1e9:.2f}B parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())

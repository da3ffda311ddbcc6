"""Deterministic local tiny models for the CPU tier (no model hub).

* ``chat``: a byte-level BPE tokenizer trained with `tokenizers` on gsm8k's train split (vocab
  2048, ChatML specials, a chat template, ``<think>``/``</think>``) and a ``Qwen3ForCausalLM``
  with random weights (hidden 128, 2 layers, 4 heads, 2 KV heads, bf16, fixed seed).
* ``embed``: the same tokenizer and shape with other seeded weights, served by vLLM's pooling
  runner (``runner="pooling"``, last-token pooling, normalized) as an embedding model.

Both are byte-for-byte reproducible (the weights come from a seeded generator in a fixed order;
JSON files are written with sorted keys) and cached by a content hash of this file, the training
data and the kind: ``$PATCHBENCH_CACHE_DIR/models/<kind>-<hash>/`` (``MANIFEST.json`` lists the
sha256 of every file). The build itself runs in the version's runtime venv (torch, tokenizers).

    python -m verify.tinymodel build --kind chat [--version 0.22.0]   # prints the model dir
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
DATA_DEFAULT = HERE.parent.parent.parent / "shared" / "data" / "gsm8k" / "train.jsonl"
VOCAB_SIZE = 2048
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
THINK = ["<think>", "</think>"]
SEEDS = {"chat": 1234, "embed": 4321}
SHAPE = {
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 4096,
}
# Embeddings: larger than HF's 0.02. The LM head is untied (a tied head makes a random model
# copy its input token forever) with std chosen for logits of std ~2.5 after the final RMSNorm:
# peaked enough for distinct greedy picks, flat enough that penalties change the choice.
INIT_STD = 1.0
HEAD_STD = 2.5 / SHAPE["hidden_size"] ** 0.5

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
)


def data_path() -> Path:
    return Path(os.environ.get("PATCHBENCH_GSM8K_TRAIN") or DATA_DEFAULT)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def content_key(kind: str) -> str:
    h = hashlib.sha256()
    h.update(HERE.read_bytes())
    h.update(_sha256(data_path()).encode())
    h.update(kind.encode())
    return h.hexdigest()[:16]


# -- the build (runs inside the runtime venv) -------------------------------------------------


def _corpus(path: Path):
    with open(path) as fh:
        for line in fh:
            row = json.loads(line)
            yield row["question"]
            yield row["answer"]


def build_tokenizer(out: Path) -> int:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(SPECIALS) - len(THINK),
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(data_path()), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK])
    tok.save(str(out / "tokenizer.json"))
    config = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "model_max_length": SHAPE["max_position_embeddings"],
        "pad_token": "<|endoftext|>",
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1, sort_keys=True))
    specials = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    (out / "special_tokens_map.json").write_text(json.dumps(specials, indent=1, sort_keys=True))
    return tok.get_vocab_size()


def build_weights(out: Path, kind: str, vocab: int, eos_id: int, pad_id: int) -> None:
    import torch
    from safetensors.torch import save_file

    vocab = (vocab + 63) // 64 * 64
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": vocab,
        **SHAPE,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": SHAPE["num_hidden_layers"],
        "initializer_range": INIT_STD,
        "bos_token_id": pad_id,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
    }
    h, inter, hd = SHAPE["hidden_size"], SHAPE["intermediate_size"], SHAPE["head_dim"]
    nq, nkv = SHAPE["num_attention_heads"], SHAPE["num_key_value_heads"]
    shapes = {
        "model.embed_tokens.weight": (vocab, h),
        "model.norm.weight": (h,),
        "lm_head.weight": (vocab, h),
    }
    for i in range(SHAPE["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update(
            {
                p + "input_layernorm.weight": (h,),
                p + "post_attention_layernorm.weight": (h,),
                p + "self_attn.q_proj.weight": (nq * hd, h),
                p + "self_attn.k_proj.weight": (nkv * hd, h),
                p + "self_attn.v_proj.weight": (nkv * hd, h),
                p + "self_attn.o_proj.weight": (h, nq * hd),
                p + "self_attn.q_norm.weight": (hd,),
                p + "self_attn.k_norm.weight": (hd,),
                p + "mlp.gate_proj.weight": (inter, h),
                p + "mlp.up_proj.weight": (inter, h),
                p + "mlp.down_proj.weight": (h, inter),
            }
        )
    gen = torch.Generator().manual_seed(SEEDS[kind])
    tensors = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if name.endswith("norm.weight"):
            t = torch.ones(shape)
        else:
            fan_in = shape[-1]
            std = INIT_STD if "embed" in name else 1.0 / fan_in**0.5
            if name == "lm_head.weight":
                std = HEAD_STD
            t = torch.randn(shape, generator=gen) * std
        tensors[name] = t.to(torch.bfloat16).contiguous()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True))
    gen_cfg = {"bos_token_id": pad_id, "eos_token_id": eos_id, "pad_token_id": pad_id}
    (out / "generation_config.json").write_text(json.dumps(gen_cfg, indent=1, sort_keys=True))


def build_into(out: Path, kind: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    vocab = build_tokenizer(out)
    tok = json.loads((out / "tokenizer.json").read_text())
    ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
    build_weights(out, kind, vocab, ids["<|im_end|>"], ids["<|endoftext|>"])
    files = sorted(p.name for p in out.iterdir() if p.name != "MANIFEST.json")
    manifest = {
        "kind": kind,
        "key": content_key(kind),
        "seed": SEEDS[kind],
        "tokenizer_vocab": vocab,
        "data_sha256": _sha256(data_path()),
        "files": {name: _sha256(out / name) for name in files},
    }
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))


# -- the cache (orchestrator side: stdlib only) -----------------------------------------------


def model_dir(kind: str) -> Path:
    from verify.runtime import cache_root

    return cache_root() / "models" / f"{kind}-{content_key(kind)}"


def _built(path: Path) -> bool:
    return (path / "MANIFEST.json").is_file()


def ensure_model(kind: str, python: str, say=print) -> tuple[Path, float]:
    """(model dir, build seconds; 0 if cached). Builds with the runtime venv's `python`."""
    if kind not in SEEDS:
        raise ValueError(f"unknown model kind {kind!r}; one of {', '.join(SEEDS)}")
    if not data_path().is_file():
        from verify.errors import PatchbenchError

        raise PatchbenchError(
            f"gsm8k training data not found at {data_path()} (set PATCHBENCH_GSM8K_TRAIN)"
        )
    from verify.locks import build_once  # here: the runtime venv runs this file as a script

    final = model_dir(kind)
    if _built(final):
        return final, 0.0
    started = time.monotonic()
    built: list[Path] = []

    def write(scratch: Path) -> None:
        subprocess.run(
            [python, str(HERE), "_build", "--kind", kind, "--out", str(scratch)],
            check=True,
            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
        )
        built.append(scratch)

    # Under a lock beside it: one build however many runs ask at a time; an interrupted
    # build's folder is removed before the next.
    build_once(final, _built, write)
    if not built:  # another process built it while this one waited
        return final, 0.0
    seconds = time.monotonic() - started
    say(f"built tiny {kind} model in {seconds:.1f}s: {final}")
    return final, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verify.tinymodel")
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build (or find cached) and print the model dir")
    b.add_argument("--kind", default="chat", choices=sorted(SEEDS))
    b.add_argument("--version", default="0.22.0")
    inner = sub.add_parser("_build", help=argparse.SUPPRESS)
    inner.add_argument("--kind", required=True)
    inner.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.cmd == "_build":
        build_into(args.out, args.kind)
        return 0
    sys.path.insert(0, str(HERE.parent.parent))
    from verify.runtime import ensure_venv

    venv = ensure_venv(args.version)
    path, _ = ensure_model(args.kind, str(venv / "bin" / "python"))
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

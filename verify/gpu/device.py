"""The GPU tier's device edge: where the offline vLLM bundle and the import roots live on the
GPU machine, the random-weight models built there (it has no model hub), and one import root
per variant (the bundle with that variant's overlay files). Standard library at import; torch,
transformers and tokenizers (the device image has them) only inside the model builders."""

from __future__ import annotations

import functools
import json
import os
import random
import shutil
from pathlib import Path

from verify.gpu import gritlm
from verify.gpu.gritlm import GRIT_TOKENS
from verify.locks import build_once

#: The vLLM import root the variants build on: the offline bundle's site on a machine without
#: network, or a runtime venv's site-packages (`python -m verify.runtime <v> --flavor cuda`).
BUNDLE = Path(os.environ.get("PATCHBENCH_VLLM_SITE", "/tmp/vllm-bundle/site"))
SITES = Path("/tmp/pb-sites")
MODEL = Path("/tmp/pb-model")
GRIT_MODEL = Path("/tmp/pb-grit-model")


def build_model(path: Path = MODEL, repeat: bool = False) -> Path:
    """Random-weight Qwen3-0.6B-shaped model + small byte-level BPE tokenizer. `repeat`: every
    layer's output projections (attention o_proj, MLP down_proj) zeroed, so the residual stream
    stays the token's embedding and the tied head puts almost all mass on that token: the model
    repeats its last token, and ngram speculative decoding proposes (and has accepted) drafts at
    every step, at any temperature up to ~1 (the same compute per step as the random model).
    Made once however many jobs ask at a time (`verify.locks.build_once`)."""
    return build_once(path, _has_config, lambda scratch: _write_qwen(scratch, repeat))


def _has_config(path: Path) -> bool:
    return (path / "config.json").exists()


def _write_qwen(path: Path, repeat: bool) -> None:
    """`build_model`'s model and tokenizer, written into `path`."""
    import glob

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    sources = sorted(glob.glob(f"{os.path.dirname(os.__file__)}/*.py"))[:200]
    texts = [open(f, errors="ignore").read() for f in sources]
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    trainer = trainers.BpeTrainer(
        vocab_size=4096,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.save_pretrained(path)
    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        eos_token_id=2,
        bos_token_id=0,
    )
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    if repeat:
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
    model.save_pretrained(path)


def build_grit_model(path: Path = GRIT_MODEL) -> Path:
    """Random-weight GritLM (Llama body, instruction-trimming mean pooler: it reads every
    prompt's token ids on the host, the code path of seed 002) with the tokenizer of
    verify.gpu.gritlm, which turns GritLM instruction prompts into the token pattern the pooler
    looks for."""
    return build_once(path, _has_config, _write_grit)


def _write_grit(path: Path) -> None:
    """`build_grit_model`'s model and tokenizer, written into `path`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=gritlm.tokenizer(), bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.save_pretrained(path)
    torch.manual_seed(1)
    cfg = LlamaConfig(
        vocab_size=gritlm.VOCAB_SIZE,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=8,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
    )
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    config["architectures"] = ["GritLM"]
    (path / "config.json").write_text(json.dumps(config, indent=2))


def grit_prompts(count: int, rng: random.Random) -> list[dict]:
    """`<s> ▁< | embed | > <0x0A>` + 64..512 filler tokens: GritLM pools only the text after the
    instruction, so a wrong prompt-token view changes the vector."""
    ids = {t: i for i, t in enumerate(GRIT_TOKENS)}
    head = [ids[t] for t in ("<s>", "▁<", "|", "embed", "|", ">", "<0x0A>")]
    return [
        {"prompt_token_ids": head + [rng.randrange(16, 32000) for _ in range(rng.randint(64, 512))]}
        for _ in range(count)
    ]


def build_sites(
    overlay: Path, variants: set[str], bundle: Path | None = None, sites: Path | None = None
) -> dict[str, object]:
    """Check `bundle` (default BUNDLE) against the pristine sdist files, then make one import
    root per non-pristine variant under `sites` (default SITES): a copy of the bundle with that
    variant's files overlaid."""
    bundle, sites = bundle or BUNDLE, sites or SITES
    pristine = overlay / "pristine"
    mismatched = [
        str(p.relative_to(pristine))
        for p in pristine.rglob("*")
        if p.is_file()
        and (
            not (bundle / p.relative_to(pristine)).exists()
            or (bundle / p.relative_to(pristine)).read_bytes() != p.read_bytes()
        )
    ]
    if mismatched:
        raise SystemExit(
            f"bundle files differ from the pristine sdist ({overlay.name}; {bundle}): "
            f"{mismatched} (another version's bundle?)"
        )
    info: dict[str, object] = {}
    for variant in sorted(variants - {"pristine"}):
        files = sorted(
            str(p.relative_to(overlay / variant))
            for p in (overlay / variant).rglob("*")
            if p.is_file()
        )
        if not files:
            raise SystemExit(f"overlay {overlay / variant} is empty or missing")
        done = functools.partial(_overlaid, files=files)
        write = functools.partial(
            _overlay_site, bundle=bundle, variant_files=overlay / variant, files=files
        )
        build_once(sites / variant, done, write)
        info[variant] = files
    return {"overlaid_files": info}


def _overlaid(site: Path, files: list[str]) -> bool:
    """Whether `site` is a finished copy of the bundle with exactly `files` overlaid."""
    marker = site / ".pb-overlay.json"
    return marker.exists() and json.loads(marker.read_text()) == files


def _overlay_site(site: Path, bundle: Path, variant_files: Path, files: list[str]) -> None:
    """`site` (an empty folder): the bundle with `files` of `variant_files` copied over it,
    vLLM's stale bytecode dropped, and the marker `_overlaid` reads."""
    shutil.copytree(bundle, site, symlinks=True, dirs_exist_ok=True)
    for rel in files:
        target = site / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(variant_files / rel, target)
    for cache in site.rglob("__pycache__"):
        if cache.parent.relative_to(site).parts[:1] == ("vllm",):
            shutil.rmtree(cache, ignore_errors=True)
    (site / ".pb-overlay.json").write_text(json.dumps(files))


def site_of(variant: str) -> Path:
    return BUNDLE if variant == "pristine" else SITES / variant


def installed_wheel(site: Path, patched: Path) -> dict:
    """What a patched wheel installed at `site` is: the version vLLM reports when imported from
    there (a fresh Python, `site` alone on PYTHONPATH), where it imports from, its series marker,
    and whether each file the series changes is byte-identical to the build tree's (`patched`:
    the overlay's patched/ folder)."""
    import subprocess
    import sys

    probe = (
        "import json, importlib.metadata as m, vllm;"
        "print(json.dumps({'version': m.version('vllm'), 'imported_from': vllm.__file__}))"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    info = json.loads(out.stdout.strip().splitlines()[-1])
    marker = json.loads((site / "vllm" / "_patchbench.json").read_text())
    differing = [
        name
        for name in marker["files"]
        if not (patched / name).is_file()
        or (site / name).read_bytes() != (patched / name).read_bytes()
    ]
    return {
        **info,
        "series_hash": marker["series_hash"],
        "series_files": len(marker["files"]),
        "files_differing_from_series": differing,
    }

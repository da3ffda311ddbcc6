"""Runs INSIDE a runtime venv (pristine: no PYTHONPATH; patched: PYTHONPATH=overlay), started
by path: ``<venv>/bin/python verify/e2e/worker.py generate|embed --model M --out F``.
Imports nothing from `verify` (the venv does not have its dependencies). Writes one JSON."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

# Fixed prompts: gsm8k-style questions (the tiny tokenizer was trained on gsm8k).
QUESTIONS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many in May.",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting.",
    "Betty is saving money for a new wallet which costs $100. Betty has only half of the money.",
    "James writes a 3-page letter to 2 different friends twice a week. How many pages a year?",
    "Albert is wondering how much pizza he can eat in one day. He buys 2 large pizzas.",
    "Ken created a care package to send to his brother, who was away at boarding school.",
    "Alexis is applying for a new job and bought a new set of business clothes to wear.",
    "Tina makes $18.00 an hour. If she works more than 8 hours per shift, she gets overtime.",
]


def _chat(question: str, think: bool) -> str:
    text = f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    return text + ("<think>\n" if think else "")


#: Top logprobs recorded per position: enough to judge closeness where two runs pick different
#: tokens (vLLM's check_logprobs_close: each choice among the other run's top-k).
TOP_LOGPROBS = 5


def requests(max_tokens: int, n_prompts: int):
    """(name, prompt, SamplingParams kwargs) for every request of the token-identity step."""
    qs = QUESTIONS[:n_prompts]
    out = []
    common = {"max_tokens": max_tokens, "ignore_eos": True, "logprobs": TOP_LOGPROBS}
    for i, q in enumerate(qs):
        out.append((f"greedy-{i}", _chat(q, False), {**common, "temperature": 0.0}))
    for i, q in enumerate(qs):
        out.append(
            (
                f"seeded-{i}",
                _chat(q, False),
                {**common, "temperature": 1.0, "top_p": 0.9, "top_k": 50, "seed": 1000 + i},
            )
        )
    for i, q in enumerate(qs):
        pen = {
            "presence_penalty": 0.4 + 0.1 * i,
            "frequency_penalty": 0.3,
            "repetition_penalty": 1.1 + 0.05 * i,
        }
        out.append(
            (f"penalties-greedy-{i}", _chat(q, False), {**common, "temperature": 0.0, **pen})
        )
        out.append(
            (
                f"penalties-seeded-{i}",
                _chat(q, False),
                {**common, "temperature": 0.8, "seed": 2000 + i, **pen},
            )
        )
        out.append(
            (
                f"penalties-think-{i}",
                _chat(q, True),
                {
                    **common,
                    "temperature": 0.8,
                    "seed": 3000 + i,
                    **pen,
                    "thinking_token_budget": 16 + 24 * i,
                },
            )
        )
    for i, q in enumerate(qs[:2]):
        out.append(
            (
                f"think-nopen-{i}",
                _chat(q, True),
                {**common, "temperature": 0.0, "thinking_token_budget": 32},
            )
        )
    return out


#: Harness workaround, applied identically to both roots (verify/e2e/shims/sitecustomize.py).
CPU_SHIMS = [
    "vllm.utils.torch_utils.async_tensor_h2d: pin_memory default False (vLLM 0.22.0 bug on CPU: "
    "its module-level PIN_MEMORY ignores the platform, so the thinking-budget forcing path calls "
    "torch.tensor(pin_memory=True) and dies with 'Found no NVIDIA driver')",
]


#: Why the step runs the engine in-process and sampled requests in their own batch. vLLM's
#: CPU sampler (TopKTopPSampler.forward_cpu, 0.22.0) ignores per-request generators as soon as
#: one row of the batch has none (a greedy row) and draws from the global RNG instead; with the
#: engine core in a separate process the first steps' batch composition depends on how fast the
#: requests arrive, so seeded outputs changed from run to run even for pristine code.
DETERMINISM = [
    "VLLM_ENABLE_V1_MULTIPROCESSING=0: requests are all queued before the first step",
    "sampled (seeded) and greedy requests go to separate LLM.generate calls: every sampled row "
    "has its own generator (forward_cpu uses the global RNG for mixed batches)",
]


def _batches(reqs: list) -> list[list[int]]:
    """Indices of the sampled requests, then of the greedy ones (each list mixes penalties,
    thinking budgets and plain requests)."""
    sampled = [i for i, r in enumerate(reqs) if "seed" in r[2]]
    greedy = [i for i, r in enumerate(reqs) if "seed" not in r[2]]
    return [b for b in (sampled, greedy) if b]


def generate(args) -> dict:
    from vllm import LLM, SamplingParams

    reqs = requests(args.max_tokens, args.prompts)
    started = time.monotonic()
    llm = LLM(
        model=args.model,
        seed=0,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        reasoning_parser="qwen3",
        enforce_eager=True,
    )
    load_s = time.monotonic() - started
    outs: list = [None] * len(reqs)
    started = time.monotonic()
    for batch in _batches(reqs):
        prompts = [reqs[i][1] for i in batch]
        params = [SamplingParams(**reqs[i][2]) for i in batch]
        for i, out in zip(batch, llm.generate(prompts, params, use_tqdm=False), strict=True):
            outs[i] = out
    gen_s = time.monotonic() - started
    _shutdown(llm)
    results = {}
    total = 0
    for (name, prompt, kw), out in zip(reqs, outs, strict=True):
        comp = out.outputs[0]
        ids = list(comp.token_ids)
        total += len(ids)
        positions = list(zip(ids, comp.logprobs or [], strict=False))
        results[name] = {
            "prompt": prompt,
            "params": kw,
            "token_ids": ids,
            "logprobs": [pos[tok].logprob for tok, pos in positions],
            "top_logprobs": [_top(pos) for _tok, pos in positions],
            "cumulative_logprob": comp.cumulative_logprob,
            "text": comp.text,
        }
    return {
        "requests": results,
        "load_s": load_s,
        "generate_s": gen_s,
        "tokens": total,
        "tok_per_s": total / gen_s if gen_s else None,
        "determinism": DETERMINISM,
    }


def _top(position: dict) -> list[list]:
    """[token_id, logprob] of the top-k candidates at one position, best first (vLLM adds the
    sampled token when it is outside the top-k; it is left out here)."""
    ranked = sorted(position.items(), key=lambda kv: kv[1].rank or 0)
    return [[tid, lp.logprob] for tid, lp in ranked if (lp.rank or 0) <= TOP_LOGPROBS]


def embed(args) -> dict:
    from vllm import LLM

    started = time.monotonic()
    llm = LLM(
        model=args.model,
        runner="pooling",
        convert="embed",
        seed=0,
        max_model_len=args.max_model_len,
        enforce_eager=True,
    )
    load_s = time.monotonic() - started
    texts = [q * (1 + i % 3) for i, q in enumerate(QUESTIONS * 4)]
    started = time.monotonic()
    outs = llm.embed(texts, use_tqdm=False)
    embed_s = time.monotonic() - started
    _shutdown(llm)
    vectors = [list(map(float, o.outputs.embedding)) for o in outs]
    return {
        "vectors": vectors,
        "load_s": load_s,
        "embed_s": embed_s,
        "n": len(texts),
        "prompt_tokens": [len(o.prompt_token_ids) for o in outs],
    }


def _shutdown(llm) -> None:
    """Stops the engine core while the interpreter is whole (left to interpreter teardown, the
    multiprocess engine sometimes aborts the worker: 'terminate called without an active exception',
    exit -6, after the results were written)."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["generate", "embed"])
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--max-model-len", type=int, default=1024)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    args = parser.parse_args()
    if args.mode == "generate":
        # Before vLLM is imported (see DETERMINISM): the engine core runs in this process.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    import vllm

    data = generate(args) if args.mode == "generate" else embed(args)
    data["vllm_file"] = vllm.__file__
    data["root"] = os.environ.get("PATCHBENCH_ROOT", "?")
    import vllm.utils.torch_utils as tu

    data["cpu_shims"] = CPU_SHIMS if getattr(tu, "PATCHBENCH_NO_PIN_SHIM", False) else []
    with open(args.out, "w") as fh:
        json.dump(data, fh)
    return 0


if __name__ == "__main__":
    code = main()
    # The result file is closed; skip interpreter teardown, where C++ threads of torch / the engine
    # client can abort the process (exit -6) and fail a run whose results are complete.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

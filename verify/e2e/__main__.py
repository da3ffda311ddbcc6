"""`python -m verify.e2e <step> --version 0.22.0 [--model PATH] [--tree DIR] [--quick]`

Steps (each pristine vs patched, fixed seeds; each writes results/cpu/<version>/e2e-<step>.json):
  tokens       offline LLM.generate: greedy, seeded sampling, penalties with/without a thinking
               budget; token ids + logprobs identical
  embed        LLM.embed on a tiny pooling model; vectors identical (seed 002's code path)
  serve-bench  vllm serve + vllm bench serve (random dataset), interleaved A/B, ratio + 95% CI
  gsm8k        lm_eval local-completions on local gsm8k; scores equal, every response identical
  serve        serve-bench and gsm8k on one pair of servers
  all          tokens, embed, serve
Exit code: 0 pass, 1 an A/B difference, 2 a setup error (message says what to do).
"""

from __future__ import annotations

import argparse
import sys
import time

from verify.errors import PatchbenchError

STEPS = ("tokens", "embed", "serve-bench", "gsm8k", "serve", "all")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m verify.e2e",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("step", choices=STEPS)
    p.add_argument("--version", default="0.22.0")
    p.add_argument("--model", help="local model dir (default: the built-in tiny Qwen3)")
    p.add_argument("--embed-model", help="local embedding model dir (default: tiny pooling model)")
    p.add_argument("--tree", help="build tree with the series (default build/<version>)")
    p.add_argument("--quick", action="store_true", help="reduced sizes (CI)")
    p.add_argument("--max-tokens", type=int, help="tokens per request (tokens step)")
    p.add_argument("--prompts", type=int, help="prompts per request kind (tokens step)")
    p.add_argument("--repeats", type=int, help="interleaved A/B repeats (serve-bench)")
    p.add_argument("--num-prompts", type=int, help="requests per bench run (serve-bench)")
    p.add_argument("--limit", type=int, help="gsm8k test questions (0 = all 1319)")
    p.add_argument("--health-timeout", type=float, default=600)
    p.add_argument(
        "--patched-env", action="append", default=[], metavar="NAME=VALUE",
        help="set in the patched root's workers only, e.g. VLLM_V1_PENALTY_STATE=1 (0011's "
        "device penalty state, off on CPU by default); repeatable; recorded with the step",
    )  # fmt: skip
    p.add_argument("--record", help="record name of the tokens step (default e2e-token-identity)")
    return p


def parse_env(items: list[str]) -> dict[str, str]:
    """NAME=VALUE items -> {NAME: VALUE}; a named error for anything else."""
    env = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise PatchbenchError(f"--patched-env {item!r}: expected NAME=VALUE")
        env[name] = value
    return env


def run(args: argparse.Namespace) -> bool:
    from verify.e2e import accuracy, common, identity, serving
    from verify.tinymodel import ensure_model

    q = args.quick
    started = time.monotonic()
    patched_env = parse_env(args.patched_env)  # before a multi-minute setup
    ctx = common.setup(args.version, args.model, args.tree)
    ctx.patched_env = patched_env
    common.say(f"setup: {ctx.timings}; versions: {ctx.versions}")
    ok = True
    step = args.step
    if step in ("tokens", "all"):
        ok &= identity.token_identity(
            ctx,
            max_tokens=args.max_tokens or (192 if q else 384),
            prompts=args.prompts or (2 if q else 4),
            record=args.record or "e2e-token-identity",
        )
    if step in ("embed", "all"):
        if args.embed_model:
            embed_model = common.check_model_path(args.embed_model)
        else:
            embed_model, built = ensure_model("embed", ctx.runtime.python, say=common.say)
            ctx.timings["embed_model_build_s"] = round(built, 1)
        ok &= identity.embeddings(ctx, embed_model)
    bench_kw = {
        "repeats": args.repeats or (2 if q else 3),
        "num_prompts": args.num_prompts or (16 if q else 32),
        "health_timeout": args.health_timeout,
    }
    limit = args.limit if args.limit is not None else (10 if q else 50)
    gsm_kw = {
        "limit": limit or None,
        "max_gen_toks": 128 if q else 256,
        "health_timeout": args.health_timeout,
    }
    if step == "serve-bench":
        ok &= serving.serve_bench(ctx, **bench_kw)
    if step == "gsm8k":
        ok &= accuracy.gsm8k(ctx, **gsm_kw)
    if step in ("serve", "all"):
        work = common.workdir(args.version, "servers")
        with serving.ab_servers(ctx, work, args.health_timeout) as servers:
            ok &= serving.serve_bench(ctx, servers=servers, **bench_kw)
            ok &= accuracy.gsm8k(ctx, servers=servers, **gsm_kw)
    common.say(
        f"{step}: {'PASS' if ok else 'FAIL'} in {time.monotonic() - started:.0f}s "
        f"(setup {ctx.timings})"
    )
    return bool(ok)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return 0 if run(args) else 1
    except PatchbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

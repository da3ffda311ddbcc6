"""Step 1 (token identity) and step 4 (embeddings): offline `LLM.generate` / `LLM.embed` in the
pristine and the patched root, same settings and seeds; outputs must be identical."""

from __future__ import annotations

import math

from verify.e2e.common import Context, run_worker, say, workdir, write_result


def _first_difference(a: list, b: list) -> int:
    pairs = zip(a, b, strict=False)
    return next((i for i, (x, y) in enumerate(pairs) if x != y), min(len(a), len(b)))


def compare_generations(a: dict, b: dict) -> list[dict]:
    """Requests whose token ids or logprobs differ between `a` and `b` (worker outputs)."""
    diffs = []
    for name in sorted(set(a) | set(b)):
        ra, rb = a.get(name), b.get(name)
        if ra is None or rb is None:
            diffs.append({"request": name, "what": "missing in " + ("A" if ra is None else "B")})
            continue
        if (ra.get("prompt"), ra.get("params")) != (rb.get("prompt"), rb.get("params")):
            diffs.append(
                {"request": name, "what": "inputs differ (the harness changed between runs)"}
            )
            continue
        ta, tb = ra["token_ids"], rb["token_ids"]
        if ta != tb:
            pos = _first_difference(ta, tb)
            diffs.append(
                {
                    "request": name,
                    "what": "token_ids",
                    "first_position": pos,
                    "pristine": ta[pos : pos + 5],
                    "patched": tb[pos : pos + 5],
                    "len": [len(ta), len(tb)],
                }
            )
            continue
        la, lb = ra["logprobs"], rb["logprobs"]
        if la != lb:
            pos = _first_difference(la, lb)
            diffs.append(
                {
                    "request": name,
                    "what": "logprobs",
                    "first_position": pos,
                    "pristine": la[pos : pos + 3],
                    "patched": lb[pos : pos + 3],
                }
            )
    return diffs


def token_identity(ctx: Context, *, max_tokens: int = 256, prompts: int = 4) -> bool:
    work = workdir(ctx.version, "token-identity")
    extra = ["--max-tokens", str(max_tokens), "--prompts", str(prompts)]
    out = {
        root: run_worker(ctx, root, "generate", work / f"{root}.json", *extra)
        for root in ("pristine", "patched")
    }
    reqs_a, reqs_b = out["pristine"]["requests"], out["patched"]["requests"]
    diffs = compare_generations(reqs_a, reqs_b)
    kinds = sorted({name.rsplit("-", 1)[0] for name in reqs_a})
    numbers = {
        "requests": len(reqs_a),
        "request_kinds": kinds,
        "max_tokens": max_tokens,
        "tokens_per_root": out["pristine"]["tokens"],
        "identical_requests": len(reqs_a) - len(diffs),
        "differing": diffs,
        "timing": {
            root: {k: round(v, 2) for k, v in d.items() if k.endswith("_s") or k == "tok_per_s"}
            for root, d in out.items()
        },
        "thinking_budget_ended": {
            name: "</think>" in r["text"] for name, r in reqs_a.items() if "think" in name
        },
        "determinism": out["pristine"].get("determinism", []),
        "workdir": str(work),
    }
    if diffs:
        names = ", ".join(d["request"] for d in diffs)
        say(f"token identity FAILED: {len(diffs)} of {len(reqs_a)} requests differ: {names}")
        for d in diffs:
            say(f"  {d}")
        # Control: pristine once more. If it differs from itself, the difference comes from
        # the harness or vLLM (nondeterminism), not from the series.
        say("control: running pristine again to tell a patch effect from nondeterminism")
        rerun = run_worker(ctx, "pristine", "generate", work / "pristine-rerun.json", *extra)
        unstable = [d["request"] for d in compare_generations(reqs_a, rerun["requests"])]
        numbers["pristine_rerun_differing"] = unstable
        reason = f"{len(diffs)} of {len(reqs_a)} requests differ: {names}"
        if unstable:
            reason += (
                f"; pristine also differs from itself on {len(unstable)} request(s) "
                f"({', '.join(unstable)}): nondeterministic run, not (only) the series"
            )
        say(f"token identity: {reason}")
        write_result(ctx, "e2e-token-identity", "series", "fail", numbers, reason=reason)
        return False
    say(
        f"token identity: {len(reqs_a)} requests x {max_tokens} tokens identical "
        "(token ids and logprobs)"
    )
    write_result(ctx, "e2e-token-identity", "series", "pass", numbers)
    return True


def embeddings(ctx: Context, model) -> bool:
    work = workdir(ctx.version, "embeddings")
    out = {
        root: run_worker(ctx, root, "embed", work / f"{root}.json", model=model)
        for root in ("pristine", "patched")
    }
    va, vb = out["pristine"]["vectors"], out["patched"]["vectors"]
    differing = [i for i, (x, y) in enumerate(zip(va, vb, strict=True)) if x != y]
    pairs = zip(va, vb, strict=True)
    max_abs = max((abs(p - q) for x, y in pairs for p, q in zip(x, y, strict=True)), default=0.0)
    norms = [round(math.sqrt(sum(v * v for v in x)), 6) for x in va[:3]]
    numbers = {
        "n_texts": len(va),
        "dim": len(va[0]) if va else 0,
        "differing_vectors": differing,
        "max_abs_diff": max_abs,
        "first_norms": norms,
        "embed_model": str(model),
        "timing": {
            root: {k: round(v, 2) for k, v in d.items() if k.endswith("_s")}
            for root, d in out.items()
        },
        "workdir": str(work),
    }
    if differing:
        write_result(
            ctx,
            "e2e-embeddings",
            "002",
            "fail",
            numbers,
            reason=f"{len(differing)} of {len(va)} vectors differ (max |d|={max_abs})",
        )
        return False
    say(f"embeddings: {len(va)} vectors of dim {numbers['dim']} identical")
    write_result(ctx, "e2e-embeddings", "002", "pass", numbers)
    return True

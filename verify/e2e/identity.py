"""Step 1 (token identity) and step 4 (embeddings): offline `LLM.generate` / `LLM.embed` in the
pristine and the patched root, same settings and seeds. Pristine runs twice first (the control),
then patched; a pristine/patched difference counts only where pristine agrees with itself, and
the record says how far each pair of runs diverges."""

from __future__ import annotations

import math

from verify.e2e.common import Context, run_worker, say, workdir, write_result
from verify.e2e.worker import TOP_LOGPROBS
from verify.errors import PatchbenchError
from verify.verdicts import PASS, Verdict, identity
from verify.verdicts.identity import first_difference, logprobs_close, share_identical

#: (root, run name) in order: the control (pristine twice) comes before the A/B.
IDENTITY_RUNS = (("pristine", "pristine"), ("pristine", "pristine-control"), ("patched", "patched"))
#: The two comparisons: (prefix of its numbers in the record, first run, second run).
CONTROL = ("control_", "pristine", "pristine-control")
AB = ("", "pristine", "patched")


def _token_diff(name: str, ra: dict, rb: dict, labels: tuple[str, str]) -> dict | None:
    """How request `name` differs between two runs (None: identical ids and logprobs)."""
    if (ra.get("prompt"), ra.get("params")) != (rb.get("prompt"), rb.get("params")):
        return {"request": name, "what": "inputs differ (the harness changed between runs)"}
    ta, tb = ra["token_ids"], rb["token_ids"]
    if (pos := first_difference(ta, tb)) is not None:
        close = logprobs_close(ta, _top_ids(ra), tb, _top_ids(rb))
        diff = _at(name, "token_ids", pos, ta, tb, labels)
        return {**diff, "len": [len(ta), len(tb)], "logprobs_close": close}
    la, lb = ra["logprobs"], rb["logprobs"]
    if (pos := first_difference(la, lb)) is None:
        return None
    # The same tokens were chosen everywhere, so check_logprobs_close passes.
    return {**_at(name, "logprobs", pos, la, lb, labels), "logprobs_close": True}


def _at(name: str, what: str, pos: int, a: list, b: list, labels: tuple[str, str]) -> dict:
    """A difference of `what` in request `name` from position `pos`, with both sides there."""
    return {
        "request": name,
        "what": what,
        "first_position": pos,
        labels[0]: a[pos : pos + 5],
        labels[1]: b[pos : pos + 5],
    }


def _top_ids(request: dict) -> list[list[int]]:
    return [[tid for tid, _lp in pos] for pos in request.get("top_logprobs", [])]


def compare_generations(a: dict, b: dict, labels: tuple[str, str] = ("A", "B")) -> list[dict]:
    """Requests whose token ids or logprobs differ between `a` and `b` (worker outputs)."""
    diffs = []
    for name in sorted(set(a) | set(b)):
        ra, rb = a.get(name), b.get(name)
        if ra is None or rb is None:
            missing = labels[0] if ra is None else labels[1]
            diffs.append({"request": name, "what": f"missing in {missing}"})
        elif (diff := _token_diff(name, ra, rb, labels)) is not None:
            diffs.append(diff)
    return diffs


def generation_divergence(a: dict, b: dict, labels: tuple[str, str]) -> dict:
    """How far two runs of the same requests diverge: share identical, the first differing
    position per differing request, and check_logprobs_close where the token ids differ."""
    diffs = compare_generations(a, b, labels)
    n = len(set(a) | set(b))
    tokens = [d for d in diffs if d["what"] == "token_ids"]
    return {
        "requests": n,
        "identical_requests": n - len(diffs),
        "share_identical": share_identical(n - len(diffs), n),
        "differing": diffs,
        "token_divergent_requests": len(tokens),
        "logprobs_close_requests": sum(d["logprobs_close"] is True for d in tokens),
        "logprobs_not_close": [d["request"] for d in tokens if d["logprobs_close"] is False],
    }


def _where(diff: dict) -> str:
    """One differing request in words: from which token, and whether its logprobs are close."""
    if "first_position" not in diff:
        return f"{diff['request']} ({diff['what']})"
    close = diff["logprobs_close"]
    text = f"{diff['request']} from token {diff['first_position']}"
    return text if close is None else f"{text} (logprobs close: {close})"


def _describe_generations(div: dict, label: str) -> str:
    parts = [_where(d) for d in div["differing"]]
    shown = ", ".join(parts[:6]) + (f", ... {len(parts) - 6} more" if len(parts) > 6 else "")
    text = f"{label}: {div['identical_requests']} of {div['requests']} requests identical"
    return f"{text}; differing: {shown}" if parts else text


def _with_prefix(prefix: str, numbers: dict) -> dict:
    return {f"{prefix}{k}": v for k, v in numbers.items()}


def _identity_verdict(measure, describe, key: str, runs: dict, what: str) -> Verdict:
    """The control and the A/B measured with `measure` (its `key` lists what differs), judged
    by `identity.judge`; the reason of a non-pass says how far both pairs of runs diverge."""
    numbers, parts, identical = {}, [], {}
    for prefix, first, second in (CONTROL, AB):
        div = measure(runs[first], runs[second], (first, second))
        numbers |= _with_prefix(prefix, div)
        identical[prefix] = not div[key]
        parts.append(describe(div, f"{first} vs {second}"))
    verdict = identity.judge(identical[AB[0]], identical[CONTROL[0]], what)
    if verdict.outcome == PASS:
        return Verdict(PASS, verdict.reason, numbers)
    return Verdict(verdict.outcome, f"{verdict.reason}: {'; '.join(reversed(parts))}", numbers)


def token_identity_verdict(runs: dict[str, dict]) -> Verdict:
    """`runs`: the worker's `requests` per run name (pristine, pristine-control, patched)."""
    what = f"tokens ({len(runs['pristine'])} requests)"
    return _identity_verdict(generation_divergence, _describe_generations, "differing", runs, what)


def vector_divergence(va: list, vb: list, labels: tuple[str, str] = ("A", "B")) -> dict:
    """How far two runs' embeddings diverge: differing vectors, max |a-b|, min cosine."""
    if len(va) != len(vb):
        raise PatchbenchError(f"{labels[0]} has {len(va)} vectors, {labels[1]} {len(vb)}")
    differing = [i for i, (x, y) in enumerate(zip(va, vb, strict=True)) if x != y]
    pairs = list(zip(va, vb, strict=True))
    max_abs = max((abs(p - q) for x, y in pairs for p, q in zip(x, y, strict=True)), default=0.0)
    return {
        "vectors": len(va),
        "differing_vectors": differing,
        "share_identical": share_identical(len(va) - len(differing), len(va)),
        "max_abs_diff": max_abs,
        "cosine_min": min((_cosine(x, y) for x, y in pairs), default=1.0),
    }


def _cosine(x: list[float], y: list[float]) -> float:
    norms = math.sqrt(sum(p * p for p in x)) * math.sqrt(sum(q * q for q in y))
    if not norms:
        return 1.0 if x == y else 0.0
    return sum(p * q for p, q in zip(x, y, strict=True)) / norms


def _describe_vectors(div: dict, label: str) -> str:
    return (
        f"{label}: {len(div['differing_vectors'])} of {div['vectors']} vectors differ "
        f"(max |d|={div['max_abs_diff']:.3g}, min cosine {div['cosine_min']:.9f})"
    )


def embeddings_verdict(runs: dict[str, list]) -> Verdict:
    """`runs`: the worker's `vectors` per run name (pristine, pristine-control, patched)."""
    what = f"vectors ({len(runs['pristine'])} texts)"
    return _identity_verdict(vector_divergence, _describe_vectors, "differing_vectors", runs, what)


#: The words a failed or inconclusive step prints first (a test greps "token identity FAILED").
_HEADLINE = {"fail": "FAILED", "inconclusive": "INCONCLUSIVE"}


def _timing(out: dict[str, dict]) -> dict:
    return {
        name: {k: round(v, 2) for k, v in d.items() if k.endswith("_s") or k == "tok_per_s"}
        for name, d in out.items()
    }


def token_identity(
    ctx: Context, *, max_tokens: int = 256, prompts: int = 4, record: str = "e2e-token-identity"
) -> bool:
    work = workdir(ctx.version, "token-identity")
    extra = ["--max-tokens", str(max_tokens), "--prompts", str(prompts)]
    out = {
        name: run_worker(ctx, root, "generate", work / f"{name}.json", *extra)
        for root, name in IDENTITY_RUNS
    }
    reqs = out["pristine"]["requests"]
    verdict = token_identity_verdict({name: d["requests"] for name, d in out.items()})
    glance = ("requests", "identical_requests", "control_identical_requests")
    glance += ("token_divergent_requests", "logprobs_close_requests")
    numbers = {
        **{k: verdict.numbers[k] for k in glance},  # the report shows the first scalars
        "request_kinds": sorted({name.rsplit("-", 1)[0] for name in reqs}),
        "max_tokens": max_tokens,
        "top_logprobs": TOP_LOGPROBS,
        "tokens_per_root": out["pristine"]["tokens"],
        **verdict.numbers,
        "timing": _timing(out),
        "thinking_budget_ended": {
            name: "</think>" in r["text"] for name, r in reqs.items() if "think" in name
        },
        "determinism": out["pristine"].get("determinism", []),
        "workdir": str(work),
    }
    if verdict.outcome == PASS:
        say(
            f"token identity: {len(reqs)} requests x {max_tokens} tokens identical (token ids "
            "and logprobs), pristine vs pristine and pristine vs patched"
        )
    else:
        say(f"token identity {_HEADLINE.get(verdict.outcome, verdict.outcome)}: {verdict.reason}")
    write_result(ctx, record, "series", verdict.outcome, numbers, reason=verdict.reason)
    return verdict.outcome == PASS


def embeddings(ctx: Context, model) -> bool:
    work = workdir(ctx.version, "embeddings")
    out = {
        name: run_worker(ctx, root, "embed", work / f"{name}.json", model=model)
        for root, name in IDENTITY_RUNS
    }
    vectors = out["pristine"]["vectors"]
    verdict = embeddings_verdict({name: d["vectors"] for name, d in out.items()})
    glance = ("max_abs_diff", "control_max_abs_diff", "cosine_min", "control_cosine_min")
    numbers = {
        "n_texts": len(vectors),
        "dim": len(vectors[0]) if vectors else 0,
        **{k: verdict.numbers[k] for k in glance},  # the report shows the first scalars
        **verdict.numbers,
        "first_norms": [round(math.sqrt(sum(v * v for v in x)), 6) for x in vectors[:3]],
        "embed_model": str(model),
        "timing": _timing(out),
        "workdir": str(work),
    }
    if verdict.outcome == PASS:
        say(f"embeddings: {len(vectors)} vectors of dim {numbers['dim']} identical")
    write_result(ctx, "e2e-embeddings", "002", verdict.outcome, numbers, reason=verdict.reason)
    return verdict.outcome == PASS

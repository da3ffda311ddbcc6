"""Identity with a control: pristine is first compared with itself (two engine starts, or two
runs); only when the control agrees does a pristine/patched difference mean the patch changed
the output. GPU engines are not reproducible across starts by default, so:

- control differs                      -> inconclusive (whatever the A/B showed)
- control agrees, A/B differs          -> fail
- control agrees, A/B identical        -> pass
- no control, A/B identical            -> pass (a difference was not seen; noted)
- no control, A/B differs              -> inconclusive (nondeterminism cannot be told apart)
"""

from __future__ import annotations

from verify.verdicts import FAIL, INCONCLUSIVE, PASS, Verdict


def judge(
    identical: bool,
    control_identical: bool | None,
    what: str = "tokens",
    baseline: str = "pristine",
) -> Verdict:
    """`identical`: baseline vs patched; `control_identical`: baseline vs a second run of the
    baseline (None: no control was run). `baseline`: the build compared against (pristine
    unless, e.g., the series without the patch)."""
    if control_identical is False:
        return Verdict(
            INCONCLUSIVE, f"{baseline}'s {what} differ from {baseline}'s own (control failed)"
        )
    if control_identical is None:
        if identical:
            return Verdict(PASS, f"{what} identical (no {baseline}-vs-{baseline} control recorded)")
        return Verdict(
            INCONCLUSIVE,
            f"{baseline} and patched {what} differ and no {baseline}-vs-{baseline} control was "
            "run, so engine nondeterminism cannot be ruled out",
        )
    if identical:
        return Verdict(PASS)
    return Verdict(
        FAIL, f"patched {what} differ from {baseline} while {baseline} agrees with itself"
    )


# Divergence measures: how far two runs of the same requests drift apart. They describe a
# difference; the outcome comes from `judge`.


def first_difference(a: list, b: list) -> int | None:
    """Position of the first element where `a` and `b` differ (the shorter length when one is a
    prefix of the other); None when they are equal."""
    if a == b:
        return None
    pairs = zip(a, b, strict=False)
    return next((i for i, (x, y) in enumerate(pairs) if x != y), min(len(a), len(b)))


def share_identical(identical: int, total: int) -> float | None:
    """Fraction of `total` items that were identical, rounded for a record (None: no items)."""
    return round(identical / total, 4) if total else None


def logprobs_close(
    ids_a: list[int], top_a: list[list[int]], ids_b: list[int], top_b: list[list[int]]
) -> bool | None:
    """vLLM's `check_logprobs_close` (tests/models/utils.py) for one request: at the first
    position where the token ids differ, each side's chosen token must be among the other side's
    top-k token ids there; the sequences diverge after it, so nothing later is compared.
    `top_*[i]`: token ids of the top-k logprobs at position i. True when the ids never differ;
    None when the top-k ids at the first difference were not recorded."""
    pos = first_difference(ids_a, ids_b)
    if pos is None or pos >= min(len(ids_a), len(ids_b)):
        return True  # identical, or one is a prefix of the other (no choice to compare)
    if pos >= min(len(top_a), len(top_b)):
        return None
    return ids_a[pos] in top_b[pos] and ids_b[pos] in top_a[pos]

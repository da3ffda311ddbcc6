"""Verdict and table for the dense vs sparse penalty benchmark (scripts/bench_penalties_apply.py).

The sparse path (0.22.0 patch 0008) is chosen for CPU logits while a row's prompt + output
ids are at most vocab / SPARSE_MIN_RATIO; it must give the dense path's results everywhere and
be faster where it is chosen: every such length's dense / sparse ratio of paired steps
(verify.stats, 95% interval on the log scale) resolved above 1 beyond the registry step's noise
threshold (`threshold`). A length
resolved slower fails; one not resolved either way leaves the step "no difference resolved".
On other devices the patch keeps the dense path, so there the sparse path must not be clearly
faster at any length (its interval's low end above UNUSED_GAIN: the patch would leave a gain
unused); a pass needs every interval's high end at most UNUSED_GAIN.

When the run also timed 0010's one-pass Triton path (`--one-pass`, CUDA, where the patched
engine takes it at every length), that path must equal the dense path bit for bit at every
length and must not be slower there (dense / one-pass resolved within the threshold of 1 or
above).

Runs recorded before the per-step times were kept (rows without `sparse_ms_steps`) are judged
on their medians, as then, and say that no interval was recorded.
"""

from __future__ import annotations

from verify import stats
from verify.verdicts import FAIL, PASS, UNRESOLVED, Verdict

SPARSE_MIN_RATIO = 12  # the patch's _SPARSE_PENALTIES_MIN_RATIO
UNUSED_GAIN = 1.10


def chosen_up_to(params: dict) -> int:
    """Largest output length L at which the patch picks the sparse path (-1: never)."""
    if params.get("device", "cpu") != "cpu":
        return -1
    return params["vocab_size"] // SPARSE_MIN_RATIO - params["prompt_len"]


def speedup(row: dict, variant: str) -> stats.Ratio | None:
    """Dense / `variant` step time of one row, paired per step (None: no per-step times)."""
    key = f"{variant}_ms_steps"
    return stats.paired_ratio(row[key], row["dense_ms_steps"]) if key in row else None


def speedups(rows: list[dict], variant: str) -> dict[int, stats.Ratio]:
    """{L: `speedup`} of the rows that kept per-step times."""
    found = {r["L"]: speedup(r, variant) for r in rows}
    return {L: r for L, r in found.items() if r is not None}


def verdict(params: dict, rows: list[dict], threshold: float) -> Verdict:
    """The step's verdict for one benchmark run, `threshold` the registry step's."""
    if not rows:
        return Verdict(FAIL, "no lengths measured")
    differ = [r["L"] for r in rows if not r["equal"]]
    if differ:
        return Verdict(FAIL, f"results differ at L={differ}")
    bits = [r["L"] for r in rows if r.get("one_pass_bit_identical") is False]
    if bits:
        return Verdict(FAIL, f"the one-pass path's bits differ from the dense path's at L={bits}")
    if all("sparse_ms_steps" in r for r in rows):
        return _interval_verdict(params, rows, threshold)
    return _median_verdict(params, rows)


def _interval_verdict(params: dict, rows: list[dict], threshold: float) -> Verdict:
    limit, cpu = chosen_up_to(params), params.get("device", "cpu") == "cpu"
    sparse, one_pass = speedups(rows, "sparse"), speedups(rows, "one_pass")
    state = {L: stats.classify(r, threshold, lower_is_better=False) for L, r in sparse.items()}
    effect = interval_effect(sparse, one_pass)
    behind = [
        L
        for L, r in one_pass.items()
        if stats.classify(r, threshold, lower_is_better=False) == stats.SLOWER
    ]
    if behind:
        return Verdict(FAIL, f"the one-pass path is slower than the dense path at L={behind}")
    slower = [L for L, s in state.items() if L <= limit and s == stats.SLOWER]
    if slower:
        return Verdict(FAIL, f"the sparse path is slower where it is chosen: L={slower}; {effect}")
    off_cpu = {L: r for L, r in sparse.items() if L > limit and not cpu}
    unused = [L for L, r in off_cpu.items() if r.low is not None and r.low > UNUSED_GAIN]
    if unused:
        return Verdict(FAIL, f"the sparse path, unused on {params['device']}, is more than "
                       f"{UNUSED_GAIN:.2f}x faster at L={unused}; {effect}")  # fmt: skip
    open_ = [L for L, s in state.items() if L <= limit and s != stats.FASTER]
    open_ += [L for L, r in off_cpu.items() if r.high is None or r.high > UNUSED_GAIN]
    open_ += [
        L for L, r in one_pass.items() if not stats.within(r, threshold, lower_is_better=False)
    ]
    if open_:
        return Verdict(UNRESOLVED, f"not resolved at L={sorted(set(open_))}: {effect}")
    return Verdict(PASS, effect)


def interval_effect(sparse: dict[int, stats.Ratio], one_pass: dict[int, stats.Ratio]) -> str:
    """`dense / sparse 24.4 [23.9, 24.9], n=9 at L=256; ...`, with each run's resolution."""
    parts = [f"dense / one-pass {r.text(2)} at L={L}" for L, r in one_pass.items()]
    parts += [f"dense / sparse {r.text(2)} at L={L}" for L, r in sparse.items()]
    mde = max((r.mde for r in (*sparse.values(), *one_pass.values()) if r.mde), default=None)
    return "; ".join(parts) + (f" (paired steps; resolves changes above {mde:.1%})" if mde else "")


def _median_verdict(params: dict, rows: list[dict]) -> Verdict:
    """Runs without per-step times: the medians of per-step ratios, no interval."""
    limit = chosen_up_to(params)
    behind = [r["L"] for r in rows if r.get("dense_over_one_pass_median_of_steps", 1) < 1]
    if behind:
        return Verdict(FAIL, f"the one-pass path is slower than the dense path at L={behind}")
    slower = [r["L"] for r in rows if r["L"] <= limit and r["ratio_median_of_steps"] < 1]
    if slower:
        return Verdict(FAIL, f"the sparse path is slower where it is chosen: L={slower}")
    if params.get("device", "cpu") != "cpu":
        unused = [r["L"] for r in rows if r["ratio_median_of_steps"] > UNUSED_GAIN]
        if unused:
            return Verdict(FAIL, f"the sparse path, unused on {params['device']}, is more than "
                           f"{UNUSED_GAIN:.2f}x faster at L={unused}")  # fmt: skip
    return Verdict(PASS, median_effect(rows))


def median_effect(rows: list[dict]) -> str:
    """Dense / sparse (and dense / one-pass) median step-time ratios of a run without intervals."""
    parts = [
        f"dense / one-pass {r['dense_over_one_pass_median_of_steps']:.2f}x at L={r['L']}"
        for r in rows
        if "dense_over_one_pass_median_of_steps" in r
    ]
    parts += [f"dense / sparse {r['ratio_median_of_steps']:.2f}x at L={r['L']}" for r in rows]
    return "; ".join(parts) + " (medians of interleaved steps; no interval recorded)"


def numbers(params: dict, rows: list[dict]) -> dict:
    """The record's numbers: the run's parameters, its rows and where the sparse path is chosen."""
    intervals = {
        f"dense_over_{variant}": {str(L): r.as_dict() for L, r in speedups(rows, variant).items()}
        for variant in ("sparse", "one_pass")
    }
    return {
        **params,
        "results": rows,
        "sparse_chosen_up_to_L": chosen_up_to(params),
        **{k: v for k, v in intervals.items() if v},
    }


def _ratio_cell(row: dict, variant: str, median_key: str) -> str:
    """`24.37x [23.90, 24.85]` from the row's per-step times, else its median ratio."""
    r = speedup(row, variant)
    if r is None:
        return f"{row[median_key]:.2f}x (median)"
    return f"{r.ratio:.2f}x [{r.low:.2f}, {r.high:.2f}]" if r.low is not None else f"{r.ratio:.2f}x"


def table(rows: list[dict]) -> str:
    """Markdown table, one row per L (with the one-pass path's columns when it was timed)."""
    one_pass = any("one_pass_ms" in r for r in rows)
    return "\n".join(
        [
            "| L | dense ms | sparse ms | dense / sparse [95% CI] | results equal |"
            + (" one-pass ms | dense / one-pass | bit-identical |" if one_pass else ""),
            "|---|---|---|---|---|" + ("---|---|---|" if one_pass else ""),
            *(
                f"| {r['L']} | {r['dense_ms']:.3f} | {r['sparse_ms']:.3f} "
                f"| {_ratio_cell(r, 'sparse', 'ratio_median_of_steps')} | {r['equal']} |"
                + (
                    f" {r['one_pass_ms']:.3f} "
                    f"| {_ratio_cell(r, 'one_pass', 'dense_over_one_pass_median_of_steps')} "
                    f"| {r['one_pass_bit_identical']} |"
                    if "one_pass_ms" in r
                    else (" - | - | - |" if one_pass else "")
                )
                for r in rows
            ),
        ]
    )

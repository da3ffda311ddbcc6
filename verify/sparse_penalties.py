"""Verdict and table for the dense vs sparse penalty benchmark (scripts/bench_penalties_apply.py).

The sparse path (0.22.0 patch 0008) is chosen for CPU logits while a row's prompt + output
ids are at most vocab / SPARSE_MIN_RATIO; it must give the dense path's results everywhere and
must not be slower (median of per-step dense / sparse ratios >= 1) at every length where it is
chosen. On other devices the patch keeps the dense path, so there the sparse path must not be
clearly faster at any length (dense / sparse above UNUSED_GAIN: the patch would leave a gain
unused). The GPU timings are host-launch bound (0.4-0.9 ms, 15 steps per length), so a median
ratio a few percent above 1 is within their noise.
"""

from __future__ import annotations

SPARSE_MIN_RATIO = 12  # the patch's _SPARSE_PENALTIES_MIN_RATIO
UNUSED_GAIN = 1.10


def chosen_up_to(params: dict) -> int:
    """Largest output length L at which the patch picks the sparse path (-1: never)."""
    if params.get("device", "cpu") != "cpu":
        return -1
    return params["vocab_size"] // SPARSE_MIN_RATIO - params["prompt_len"]


def verdict(params: dict, rows: list[dict]) -> tuple[bool, str]:
    """(ok, reason) for one benchmark run."""
    if not rows:
        return False, "no lengths measured"
    limit = chosen_up_to(params)
    differ = [r["L"] for r in rows if not r["equal"]]
    slower = [r["L"] for r in rows if r["L"] <= limit and r["ratio_median_of_steps"] < 1]
    if differ:
        return False, f"results differ at L={differ}"
    if slower:
        return False, f"the sparse path is slower where it is chosen: L={slower}"
    if params.get("device", "cpu") != "cpu":
        unused = [r["L"] for r in rows if r["ratio_median_of_steps"] > UNUSED_GAIN]
        if unused:
            return False, (
                f"the sparse path, unused on {params['device']}, is more than "
                f"{UNUSED_GAIN:.2f}x faster at L={unused}"
            )
    return True, ""


def numbers(params: dict, rows: list[dict]) -> dict:
    """The record's numbers: the run's parameters, its rows and where the sparse path is chosen."""
    return {**params, "results": rows, "sparse_chosen_up_to_L": chosen_up_to(params)}


def table(rows: list[dict]) -> str:
    """Markdown table, one row per L (with the fused candidate's columns when it was timed)."""
    fused = any("fused_ms" in r for r in rows)
    return "\n".join(
        [
            "| L | dense ms | sparse ms | dense / sparse | results equal |"
            + (" fused ms | dense / fused | fused bit-identical |" if fused else ""),
            "|---|---|---|---|---|" + ("---|---|---|" if fused else ""),
            *(
                f"| {r['L']} | {r['dense_ms']:.3f} | {r['sparse_ms']:.3f} "
                f"| {r['ratio_median_of_steps']:.2f}x | {r['equal']} |"
                + (
                    f" {r['fused_ms']:.3f} | {r['dense_over_fused_median_of_steps']:.2f}x "
                    f"| {r['fused_bit_identical']} |"
                    if "fused_ms" in r
                    else (" - | - | - |" if fused else "")
                )
                for r in rows
            ),
        ]
    )

"""Verdict and table for the dense vs sparse penalty benchmark (scripts/bench_penalties_apply.py).

The sparse path (0.22.0 patch 0008) is chosen for CPU logits while a row's prompt + output
ids are at most vocab / SPARSE_MIN_RATIO; it must give the dense path's results everywhere and
must not be slower (median of per-step dense / sparse ratios >= 1) at every length where it is
chosen. On other devices the patch keeps the dense path, so there the sparse path must not be
clearly faster at any length (dense / sparse above UNUSED_GAIN: the patch would leave a gain
unused). The GPU timings are host-launch bound (0.4-0.9 ms, 15 steps per length), so a median
ratio a few percent above 1 is within their noise.

When the run also timed 0010's one-pass Triton path (`--one-pass`, CUDA, where the patched
engine takes it at every length), that path must equal the dense path bit for bit at every
length and must not be slower there (median of per-step dense / one-pass ratios >= 1).
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
    one_pass = [r for r in rows if "one_pass_ms" in r]
    bits = [r["L"] for r in one_pass if not r["one_pass_bit_identical"]]
    if bits:
        return False, f"the one-pass path's bits differ from the dense path's at L={bits}"
    behind = [r["L"] for r in one_pass if r["dense_over_one_pass_median_of_steps"] < 1]
    if behind:
        return False, f"the one-pass path is slower than the dense path at L={behind}"
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
    """Markdown table, one row per L (with the one-pass path's columns when it was timed)."""
    one_pass = any("one_pass_ms" in r for r in rows)
    return "\n".join(
        [
            "| L | dense ms | sparse ms | dense / sparse | results equal |"
            + (" one-pass ms | dense / one-pass | bit-identical |" if one_pass else ""),
            "|---|---|---|---|---|" + ("---|---|---|" if one_pass else ""),
            *(
                f"| {r['L']} | {r['dense_ms']:.3f} | {r['sparse_ms']:.3f} "
                f"| {r['ratio_median_of_steps']:.2f}x | {r['equal']} |"
                + (
                    f" {r['one_pass_ms']:.3f} | {r['dense_over_one_pass_median_of_steps']:.2f}x "
                    f"| {r['one_pass_bit_identical']} |"
                    if "one_pass_ms" in r
                    else (" - | - | - |" if one_pass else "")
                )
                for r in rows
            ),
        ]
    )

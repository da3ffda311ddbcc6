"""Verdict and table for the penalty staging-fill A/B (scripts/bench_penalty_staging_ab.py).

Side a is the per-row loop of the series up to 0.22.0 patch 0008, side b the one-gather fill of
patch 0009. Rule: the two builds give equal tensors at every step, and b is faster at every
length with the whole 95% interval of the per-step a / b ratio above 1.
"""

from __future__ import annotations


def verdict(rows: list[dict]) -> tuple[bool, str]:
    """(ok, reason) for one benchmark run."""
    if not rows:
        return False, "no lengths measured"
    differ = [r["L"] for r in rows if r["mismatched_steps"]]
    if differ:
        return False, f"tensors differ at L={differ}"
    slower = [r["L"] for r in rows if r["ci95"][0] <= 1.0]
    if slower:
        return False, f"not faster (95% interval reaches 1) at L={slower}"
    return True, ""


def numbers(params: dict, rows: list[dict]) -> dict:
    """The record's numbers: the run's batch, device and placeholder mode, and its rows."""
    return {
        "batch": params["batch"],
        "device": params["device"],
        "async_placeholders": params["async_placeholders"],
        "results": rows,
    }


def table(rows: list[dict]) -> str:
    """Markdown table, one row per L."""
    return "\n".join(
        [
            "| L | per-row loop (0008) ms | one gather (0009) ms | loop / gather (95% CI) "
            "| steps | mismatched steps |",
            "|---|---|---|---|---|---|",
            *(
                f"| {r['L']} | {r['a_ms_median']:.3f} | {r['b_ms_median']:.3f} "
                f"| {r['a_over_b']:.2f}x [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] "
                f"| {r['steps']} | {r['mismatched_steps']} |"
                for r in rows
            ),
        ]
    )

"""Table rows and cells of the penalty-cost records (verify/importer/gpu_engine_ab.py): ratios
with their intervals, penalty costs (1 - penalized/plain) and the sampler's host times."""

from __future__ import annotations

from verify import stats


def sampler_row(label: str, host: dict) -> str:
    step = host["difference_step_us"]
    text = (
        f"sample_tokens plain {host['plain_sample_tokens_us']:.0f} µs, penalized "
        f"{host['penalized_sample_tokens_us']:.0f} µs ({host['difference_sample_tokens_us']:+.0f}"
        f" µs; engine step {'-' if step is None else f'{step:+.0f}'} µs)"
    )
    return f"| {label} | {text} | - | {host['n']} | - |"


def cost_row(label: str, r: stats.Ratio, cost: bool = True) -> str:
    share = cost_text(r) if cost else "-"
    mde = f"{r.mde:.1%}" if r.mde is not None else "-"
    return f"| {label} | {interval_text(r)} | {share} | {r.n} | {mde} |"


def interval_text(r: stats.Ratio) -> str:
    interval = f"[{r.low:.3f}, {r.high:.3f}]" if r.low is not None else "(no interval)"
    return f"{r.ratio:.3f} {interval}"


def interval_cell(r: stats.Ratio | None) -> str:
    return "-" if r is None else interval_text(r)


def cost_text(r: stats.Ratio) -> str:
    """Penalty cost (1 - penalized/plain) with its interval, e.g. `2.5% [-0.1%, 5.0%]`."""
    text = f"{1 - r.ratio:.1%}"
    if r.low is not None:
        text += f" [{1 - r.high:.1%}, {1 - r.low:.1%}]"
    return text


def cost_cell(r: stats.Ratio | None) -> str:
    """A key-table cell: the cost with its interval and rounds, or `not run`."""
    return "not run" if r is None else f"{cost_text(r)}, n={r.n}"

"""Where a penalized step's time goes: the GPU profiles of scripts/gpu_profile_penalties.py
(`--cuda`: torch.profiler tables of a plain and a penalized config of one engine), read into the
penalty-cost record of their runner as a diagnostic (not judged: one profiled call per config,
no rounds). A cost step names its profiles in its registry `params.profiles` (a glob of
`summary.json` files under results/gpu/<pin>/, one folder per build named `<runner>-<build>`).

Per build: the GPU time per step (self CUDA time total over the config's output length) of the
plain and the penalized config, what the penalized one adds, and the operations that add most
(named ops and Triton kernels among the 40 rows the table lists; `void ...` template kernels
are their ops' time again).
"""

from __future__ import annotations

import re
from pathlib import Path

from verify import results
from verify.gpu import penalty_plan
from verify.importer import gpu as gpu_tier

UNIT_US = {"us": 1.0, "ms": 1e3, "s": 1e6}
BUILDS = {"pristine": "v{pin}", "patched": "this PR"}
TOP = 3
#: An op is named among those that add most from 1 µs per step and a tenth of what the
#: penalized config adds (below that: the run-to-run spread of unrelated kernels).
MIN_US, MIN_SHARE = 1.0, 0.1


def _us(text: str) -> float | None:
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", text.strip())
    return float(m.group(1)) * UNIT_US[m.group(2)] if m else None


def gpu_table(text: str) -> tuple[float, dict[str, float]]:
    """(self CUDA time total, {name: self CUDA time}) in µs of the first table torch.profiler
    printed (rows of one displayed name summed: long names are cut to one prefix)."""
    first = text.split("\n\n")[0]
    total = re.search(r"Self CUDA time total: ([\d.]+(?:us|ms|s))", first)
    if total is None:
        raise ValueError("no 'Self CUDA time total' line: not a torch.profiler CUDA table")
    rows: dict[str, float] = {}
    for line in first.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == 11 and cells[10].isdigit() and _us(cells[6]) is not None:
            rows[cells[0]] = rows.get(cells[0], 0.0) + _us(cells[6])
    return _us(total.group(1)), rows


def _named(name: str) -> bool:
    return not name.startswith(("void ", "cuda", "Memset")) and "CompiledFxGraph" not in name


def build_profile(summary: Path) -> dict:
    """The GPU time per step of a profile folder's plain and penalized configs (the summary's
    order: plain first), what the penalized one adds, and the named ops that add most."""
    data = results.read_json(summary)
    (plain, p_cfg), (pen, _) = list(data["configs"].items())[:2]
    steps = p_cfg["config"]["output_len"]
    (base, base_rows), (more, more_rows) = (
        gpu_table((summary.parent / f"{name}.txt").read_text()) for name in (plain, pen)
    )
    added = {n: more_rows.get(n, 0.0) - base_rows.get(n, 0.0) for n in {*base_rows, *more_rows}}
    floor = max(steps * MIN_US, MIN_SHARE * (more - base))
    top = sorted((n for n in added if _named(n) and added[n] >= floor), key=lambda n: -added[n])
    return {
        "runner": data.get("model_runner"),
        "gpu": (data.get("machine") or {}).get("gpu"),
        "build": summary.parent.name.rsplit("-", 1)[-1],
        "plain": plain.rsplit("-b", 1)[0],
        "penalized": pen.rsplit("-b", 1)[0],
        "batch": p_cfg["config"]["batch"],
        "steps": steps,
        "measured_entropy_nats": (data.get("output_entropy") or {}).get("measured_nats"),
        "plain_gpu_us_per_step": base / steps,
        "penalized_gpu_us_per_step": more / steps,
        "added_gpu_us_per_step": (more - base) / steps,
        "added_share": (more - base) / base,
        "top_added_us_per_step": {n: added[n] / steps for n in top[:TOP]},
    }


def profiles(version: str, record: str, runner: str) -> list[dict]:
    """The profiles of `runner` that the registry step making `record` names, by build."""
    pattern = gpu_tier.params(version, record).get("profiles")
    if not pattern:
        return []
    found = [build_profile(p) for p in sorted((gpu_tier.gpu_root() / version).glob(pattern))]
    mine = [p for p in found if p["runner"] == runner]
    return sorted(mine, key=lambda p: p["build"] != "pristine")


def line(found: list[dict], version: str) -> str | None:
    """One sentence: the GPU time per step a penalized config adds, per build."""
    if not found:
        return None
    first, base = found[0], next((p for p in found if p["build"] == "pristine"), None)
    builds = []
    for p in found:
        ops = ", ".join(f"{n} {us:.0f} µs" for n, us in p["top_added_us_per_step"].items())
        who = BUILDS.get(p["build"], p["build"]).format(pin=version)
        vs = ""
        if base is not None and p is not base:
            d = p["penalized_gpu_us_per_step"] - base["penalized_gpu_us_per_step"]
            vs = f"; its penalized step {d:+.0f} µs against v{version}'s"
        builds.append(f"{who} +{p['added_gpu_us_per_step']:.0f} µs ({p['added_share']:.1%}"
                      f"{': ' + ops if ops else ''}{vs})")  # fmt: skip
    try:
        sampling = penalty_plan.describe(first["plain"], first["penalized"])
    except KeyError:
        sampling = f"{first['penalized']} vs {first['plain']}"
    gpu = first["gpu"] or "GPU not recorded"
    return (f"GPU time a penalized step adds (torch.profiler, {gpu}, {first['runner']}, "
            f"B={first['batch']}, {first['steps']} steps, {sampling}, one profiled call each, "
            "not judged): " + "; ".join(builds))  # fmt: skip


def attach(record: dict, version: str, runner: str) -> dict:
    """`record` with its step's profiles of `runner` in numbers["profile"] (the builds and the
    sentence the PR body shows) and the sentence as a table."""
    found = profiles(version, record["step"], runner)
    text = line(found, version)
    if text is None:
        return record
    numbers = {**record.get("numbers", {}), "profile": {"summary": text, "builds": found}}
    return {**record, "numbers": numbers, "tables": [*record.get("tables", []), text]}

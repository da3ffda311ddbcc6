"""What the steps of ``scripts/gpu_verify.py`` share: their log line, the compile environment of
their engines and servers, the paired ratio their summaries carry, and the step file writer."""

from __future__ import annotations

import json
import time
from pathlib import Path

from verify import stats
from verify.ab.variants import COMPILE_ENV  # Inductor's deterministic mode

COMPILE_CACHES = Path("/tmp/pb-vllm-cache")


def compile_env(env: dict[str, str], step: str) -> dict[str, str]:
    """`env` with COMPILE_ENV and one compile cache per step (unless VLLM_CACHE_ROOT is set),
    so no engine or server loads artifacts compiled for another step's config or without
    COMPILE_ENV."""
    env.update(COMPILE_ENV)
    env.setdefault("VLLM_CACHE_ROOT", str(COMPILE_CACHES / step))
    return env


def say(message: str) -> None:
    print(f"[gpu_verify {time.strftime('%H:%M:%S')}] {message}", flush=True)


def ratio_ci(a: list[float], b: list[float]) -> dict[str, float]:
    """Paired ratio b/a of interleaved rounds through verify.stats (geometric mean, log-scale
    95% interval, minimum detectable effect); rounds where a is 0 are left out."""
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if x > 0 and y > 0]
    if not pairs:
        return {"ratio": float("nan"), "n": 0}
    r = stats.paired_ratio([x for x, _ in pairs], [y for _, y in pairs])
    out = {"ratio": r.ratio, "n": r.n}
    if r.low is not None:
        out.update(ci95_low=r.low, ci95_high=r.high, mde=r.mde)
    return out


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1, default=str))

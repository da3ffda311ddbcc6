"""What one variant of an A/B runs: its import roots and environment (`NAME=SITE[,K=V...]`), with
the harness shims laid on its path where asked for (verify/ab/plant, logit_scale,
penalty_check, penalty_history)."""

from __future__ import annotations

import os
from pathlib import Path

PLANT_SITE = Path(__file__).resolve().parent / "plant"
#: A dummy-weight model's calibrated logit scale for processes the harness does not drive
#: (`vllm serve`): verify/ab/logit_scale.
LOGIT_SCALE_SITE = Path(__file__).resolve().parent / "logit_scale"
LOGIT_SCALE_ENV = "PATCHBENCH_LOGIT_SCALE"
#: Every engine and server of an A/B compiles in Inductor's deterministic mode. Without it
#: Inductor times candidate reduction configs on the device and keeps the fastest, so two
#: compiles of one model may sum in different orders, and one build's tokens then change
#: between calls (one fresh compile, later cache loads). vLLM's AOT compile stays on: with
#: VLLM_USE_AOT_COMPILE=0 an 8B-shaped engine fails to start in that mode (torch 2.11: Inductor
#: refuses the combo-kernel benchmarking vLLM's config asks for), while an AOT artifact that
#: fails to load falls back to the Inductor graph cache (a few seconds per start).
COMPILE_ENV = {"TORCHINDUCTOR_DETERMINISTIC": "1"}
#: Diagnostic shims, each on a variant's path where its variable is set: 0011's device penalty
#: state against a shadow (verify/ab/penalty_check), and the host output lists that upstream's
#: penalties read against the sampled ids (verify/ab/penalty_history).
DIAGNOSTIC_SITES = {
    "PATCHBENCH_PENALTY_CHECK": Path(__file__).resolve().parent / "penalty_check",
    "PATCHBENCH_PENALTY_HISTORY": Path(__file__).resolve().parent / "penalty_history",
}


def parse_variant(spec: str, base_site: str) -> tuple[str, list[str], dict[str, str]]:
    """`NAME=SITE[,K=V...]` -> (name, PYTHONPATH entries, extra env)."""
    name, _, rest = spec.partition("=")
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise SystemExit(f"--variant {spec!r}: expected NAME=SITE[,KEY=VALUE...]")
    site, *pairs = rest.split(",") if rest else [""]
    env = dict(p.split("=", 1) for p in pairs if "=" in p)
    bad = [p for p in pairs if "=" not in p]
    if bad:
        raise SystemExit(f"--variant {spec!r}: {bad} is not KEY=VALUE")
    if site == "plant":
        paths = [str(PLANT_SITE), base_site]
    elif site and is_full_install(Path(site)):
        paths = [site]  # a whole vLLM installation (e.g. a patched wheel's bundle): alone
    else:
        paths = [site or base_site] + ([base_site] if site and site != base_site else [])
    return name, paths, env


def is_full_install(site: Path) -> bool:
    """Whether `site` holds an installed vLLM distribution (a wheel's dist-info), not overlay
    files meant to be laid in front of the base site."""
    return any(site.glob("vllm-*.dist-info/METADATA"))


def variant_env(name: str, paths: list[str], env: dict, cache: Path) -> dict[str, str]:
    """The process environment of one variant: its import roots (and, where a logit scale or
    a diagnostic shim is asked for, the shims that do them), its own compile cache,
    COMPILE_ENV, then the variant's own KEY=VALUE pairs."""
    merged = {**os.environ, **env}
    if merged.get(LOGIT_SCALE_ENV):
        paths = [*paths, str(LOGIT_SCALE_SITE)]
    paths = [*paths, *(str(site) for var, site in DIAGNOSTIC_SITES.items() if merged.get(var))]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(paths),
        "VLLM_CACHE_ROOT": str(cache / name),
        **COMPILE_ENV,
        **env,
    }

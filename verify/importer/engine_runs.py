"""Engine A/B runs (`python -m verify.ab engine`) as the readers see them: a run's shapes,
samplings, model, runner and notes; `pool_runs`, which pools the rounds of several device calls
that measured the same cells on one GPU model, model shape and runner; the per-round GPU and
sampler diagnostics; and the tokens' identity across engines (`_tokens`). The penalty-cost
reader (verify/importer/gpu_engine_ab.py) judges on them."""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field

from verify import registry, stats
from verify.ab import rounds as ab_rounds
from verify.gpu import penalty_plan
from verify.importer import kept_tokens
from verify.series import read_series
from verify.verdicts import NOT_RUN, PASS, Verdict, identity

PENALTY_KEYS = ("presence_penalty", "frequency_penalty", "repetition_penalty")


def shape_of(stage: dict) -> str:
    """`B=64 L=2048` of a stage."""
    return f"B={stage['batch']} L={stage['output_len']}"


def sampling_of(config: dict) -> tuple[bool, bool]:
    """(penalized, with top-k/top-p) of a config."""
    penalized = any(config.get(k, 1.0 if k == "repetition_penalty" else 0.0) not in (0.0, 1.0)
                    for k in PENALTY_KEYS)  # fmt: skip
    return penalized, "top_k" in config or "top_p" in config


def stage_cells(run: dict, stage: dict) -> dict[tuple[str, bool, bool], str]:
    """{(variant, penalized, top-k/top-p): cell} of one stage."""
    out = {}
    for cell in stage["cells"]:
        variant, config = cell.split("/", 1)
        out[(variant, *sampling_of(run["configs"][config]))] = cell
    return out


def ratio(rounds: list[ab_rounds.Round], base: str, var: str) -> stats.Ratio | None:
    """var/base tok/s over the counted rounds that measured both; None when none did."""
    both = [r for r in rounds if base in r.values and var in r.values]
    if not any(not r.warmup for r in both):
        return None
    return ab_rounds.paired(both, base, var, "tok_per_s")


def _diagnostics(rnd: ab_rounds.Round, cell: str, group: str) -> dict:
    """`cell`'s `group` of diagnostics in `rnd` ("steps", "cpus"); {} where the run has none
    (runs before they were recorded)."""
    return (rnd.values.get(cell) or {}).get(group) or {}


def engines_apart(run: dict) -> str:
    """How the run's engines ran apart, so that their plain A/A holds more than the builds'
    difference: "one GPU per engine" (PB_GPU_PER_VARIANT=1: each variant's
    CUDA_VISIBLE_DEVICES; the cards differ too), "engines in turn on one GPU"
    (PB_ENGINES_IN_TURN=1: at different times); "" when they ran side by side on one GPU."""
    if run.get("in_turn"):
        return "engines in turn on one GPU"
    variants = run.get("variants") or {}
    devices = {(v.get("env") or {}).get("CUDA_VISIBLE_DEVICES") for v in variants.values()}
    return "one GPU per engine" if len(devices) > 1 else ""


def run_name(run: dict) -> str:
    """`<date> <tag>` of a run: jobs of one call beside each other start in the same second,
    each with its own engines and tag (gpu_penalties_ab.sh's argument; else the command)."""
    command = run.get("command") or ""
    tag = re.search(r"gpu_penalties_ab\.sh (\S+)", command)
    return f"{run['date']} {tag.group(1) if tag else command}".strip()


def comparable(config: dict) -> bool:
    """Whether two engines' tokens of `config` can be compared: greedy, or a seed per request
    (without one, each engine draws from its own generator in its own order of calls)."""
    return config.get("temperature") == 0 or config.get("seed", 0) is not None


def run_note(run: dict, stage: dict, rounds: list[ab_rounds.Round]) -> str:
    """How one run of a pool measured, so that its runs can be told apart: alone on its host
    or beside other jobs (gpu_penalties_ab_parallel.sh's PB_PARALLEL), whether its engine
    threads hopped CPUs (PB_HOP_CPUS_EVERY), and its own patched
    penalized/plain tok/s (no top-k/top-p) with the spread of its rounds (sd of the log
    ratios), where it has two rounds of both."""
    parallel = re.search(r"beside (\d+) other jobs", run.get("command", ""))
    where = f"beside {parallel.group(1)} other jobs" if parallel else "alone"
    hop = re.search(r"PB_HOP_CPUS_EVERY=(\d+)", run.get("command", ""))
    if hop:  # verify.ab.cpus.CpuHopper: each cell spread over all CPUs
        where += f", engine threads hopping CPUs every {hop.group(1)} steps"
    apart = engines_apart(run)
    if apart:
        where += f", {apart}"
    cells = stage_cells(run, stage)
    plain, pen = cells.get(("patched", False, False)), cells.get(("patched", True, False))
    both = [r for r in rounds if not r.warmup and plain in r.values and pen in r.values]
    if not (plain and pen) or len(both) < 2:
        return where
    own = ratio(both, plain, pen)
    spread = stats.paired_spread(*([r.values[c]["tok_per_s"] for r in both] for c in (plain, pen)))
    gpu = gpu_note(both, [plain, pen])
    note = f"{where}: patched penalized/plain {own.ratio:.3f}, n={own.n}, sd {spread:.1%}"
    return f"{note}; {gpu}" if gpu else note


def gpu_note(rounds: list[ab_rounds.Round], cells: list[str]) -> str:
    """The GPU's state over `cells` of `rounds`, where they recorded it (verify.ab.nvml): the
    range of the cells' mean power and SM clock (share of its maximum) and the largest share
    of a cell's time held back by the power cap or temperature; "" where none did."""
    found = [_diagnostics(r, c, "gpu") for r in rounds for c in cells]
    found = [g for g in found if "power_w" in g]
    if not found:
        return ""
    power = [g["power_w"] for g in found]
    parts = [f"GPU {min(power):.0f}-{max(power):.0f} W"]
    clocks = [g["sm_clock"] for g in found if "sm_clock" in g]
    if clocks:
        parts.append(f"SM clock {min(clocks):.0%}-{max(clocks):.0%} of max")
    held = max(g.get("power_throttle", 0) + g.get("thermal_throttle", 0) for g in found)
    parts.append(f"throttled up to {held:.0%} of a cell")
    return ", ".join(parts)


@dataclass
class Pool:
    """The measured stages of one shape and set of configs on one GPU, pooled over runs: a
    round pairs cells on one run's engines, so the rounds of several device calls add up."""

    run: dict  # the first run (its configs name the cells)
    stage: dict  # its shape, with the cells of every run
    pristine_only: bool  # runs of an earlier patch form: only pristine's cost is used
    rounds: list = field(default_factory=list)
    runs: list = field(default_factory=list)
    by_run: dict = field(default_factory=dict)  # {`run_name`: that run's rounds}
    apart: set = field(default_factory=set)  # `run_name`s whose engines ran apart

    def add(self, run: dict, stage: dict, rounds: list) -> None:
        self.stage["cells"] += [c for c in stage["cells"] if c not in self.stage["cells"]]
        self.rounds += rounds
        name = run_name(run)
        self.by_run[name] = rounds
        if engines_apart(run):
            self.apart.add(name)
        self.runs.append(f"{run['date'][:16]}: {stage['status']} [{run_note(run, stage, rounds)}]")

    @property
    def one_gpu_runs(self) -> dict[str, list]:
        """`by_run` without the runs whose engines ran apart (`engines_apart`): the units of the
        plain A/A (the same work in both builds, so a difference is the engines', not the
        cards' or the hours')."""
        return {name: rounds for name, rounds in self.by_run.items() if name not in self.apart}

    @property
    def one_gpu_rounds(self) -> list:
        """The pooled rounds of `one_gpu_runs`."""
        return [r for rounds in self.one_gpu_runs.values() for r in rounds]

    @property
    def shape(self) -> str:
        return shape_of(self.stage)

    @property
    def seeded(self) -> str:
        """`seeded` or `unseeded`: whether the pool's configs give each request a seed."""
        config = self.run["configs"][self.stage["cells"][0].split("/", 1)[1]]
        return "seeded" if comparable(config) else "unseeded"

    @property
    def gpu(self) -> str:
        """The GPU model its runs report (pools never mix models: `pool_key`)."""
        return (self.run.get("machine") or {}).get("gpu") or "GPU not recorded"

    @property
    def model(self) -> str:
        """The model shape its runs measured (pools never mix shapes: `pool_key`), with the
        next-token entropy the engines measured where they calibrated it."""
        return model_of(self.run)

    @property
    def has_topkp(self) -> bool:
        """Whether the pool's configs sample with top-k/top-p (its rounds had both)."""
        names = {c.split("/", 1)[1] for c in self.stage["cells"]}
        return any(sampling_of(self.run["configs"][n])[1] for n in names)

    @property
    def label(self) -> str:
        """`B=32 L=2048 (H100, unseeded)`: the pool as the verdict's reason names it."""
        extra = ", top-k/top-p run" if self.has_topkp else ""
        return f"{self.shape} ({gpu_model(self.gpu)}, {self.model}, {self.seeded}{extra})"

    @property
    def title(self) -> str:
        return (
            f"{self.shape}, input {self.stage['input_len']}, {self.seeded}, {self.gpu}, "
            f"{self.model}, runner {runner_of(self.run)} "
            f"({len(self.runs)} run(s): {'; '.join(self.runs)})"
        )


#: What runs before model shapes were recorded measured.
DEFAULT_MODEL = "qwen3-0.6b-random"


def entropy_of(run: dict) -> str | None:
    """`1.00 nats`: the mean next-token entropy the run's engines measured after calibrating
    their logit scale (verify.ab.output_entropy); None where they did not."""
    nats = sorted(
        {
            round(w["output_entropy"]["measured_nats"], 2)
            for w in (run.get("workers") or {}).values()
            if isinstance(w.get("output_entropy"), dict)
        }
    )
    if not nats:
        return None
    return f"{nats[0]:.2f} nats" if len(nats) == 1 else f"{nats[0]:.2f}-{nats[-1]:.2f} nats"


def model_of(run: dict) -> str:
    """`qwen3-8b, 1.00 nats`: the run's model shape, and its entropy where calibrated."""
    name, nats = run.get("model") or DEFAULT_MODEL, entropy_of(run)
    return f"{name}, {nats}" if nats else name


def runner_of(run: dict) -> str:
    """`V1` or `MRV2`: the runner the run's engines used (the front-end records it per
    worker; runs that did not are V1, which the penalty script forced before)."""
    runners = sorted({w.get("model_runner") or "V1" for w in (run.get("workers") or {}).values()})
    return "/".join(runners) or "V1"


def pool_key(run: dict, stage: dict, earlier: bool) -> tuple:
    """Stages pool when they ran the same configs at the same shape on the same GPU model,
    model shape, output entropy and runners (and, for runs of an earlier patch form, the same
    series)."""
    names = sorted({c.split("/", 1)[1] for c in stage["cells"]})
    configs = json.dumps({n: run["configs"][n] for n in names}, sort_keys=True)
    gpu_name = (run.get("machine") or {}).get("gpu")
    series = run.get("series_hash") if earlier else ""
    shape = (model_of(run), runner_of(run))  # the shape and its output distribution
    return (
        series,
        gpu_name,
        *shape,
        stage["batch"],
        stage["output_len"],
        stage["input_len"],
        configs,
    )


def series_runners(run: dict) -> set[str] | None:
    """The runners of the run's engines that ran the series (`pristine` and `mrv2` run the
    pin's own code: what the series changes cannot reach them); None where the run recorded
    no engines."""
    workers = run.get("workers")
    if not workers:
        return None
    return {
        (w or {}).get("model_runner") or "V1"
        for name, w in workers.items()
        if penalty_plan.build_of(name) not in penalty_plan.PRISTINE
    }


#: Model Runner V2's package, and the part of it a V1 engine imports (its pooling runners).
MRV2_PACKAGE, MRV2_SHARED_WITH_V1 = "vllm/v1/worker/gpu/", "vllm/v1/worker/gpu/pool/"


def reaches_v1(patch) -> bool:
    """Whether `patch` may change what a V1 engine runs: anything but a patch whose code files
    all lie in MRV2's package outside the part V1 imports (MRV2 itself imports V1's model
    runner, so no V1 patch is taken to leave an MRV2 engine alone)."""
    code = [f for f in patch.files if not f.startswith("tests/")]
    return not code or any(
        not f.startswith(MRV2_PACKAGE) or f.startswith(MRV2_SHARED_WITH_V1) for f in code
    )


def same_code(run: dict, newest: dict, version: str) -> bool:
    """Whether `run` measured the code of `newest` (taken to be the current code): the same
    series, or each patch's recorded diff the current one or a committed form of it that
    differed only in tests/ (`registry.tests_only_change`); patches that differ do not count
    where the run had no series engine, or where its series engines all ran V1 and the patch
    changes only MRV2's own files (`reaches_v1`; e.g. an MRV2 patch added since a V1 run)."""
    if run.get("series_hash") == newest.get("series_hash"):
        return True
    recorded = run.get("patch_hashes") or {}
    patches = {p.subject: p for p in read_series(version)}
    if not recorded or recorded.keys() - patches.keys():
        return False
    ran = series_runners(run)

    def reaches_run(patch) -> bool:  # no engines recorded: any; no series engine: none
        return ran is None or (bool(ran) and (ran != {"V1"} or reaches_v1(patch)))

    def unchanged(patch) -> bool:
        h = recorded.get(patch.subject)
        return h is not None and (
            h == registry.diff_hash(patch) or registry.tests_only_change(patch, h)
        )

    return all(unchanged(p) or not reaches_run(p) for p in patches.values())


def pool_runs(runs: list[dict], version: str) -> tuple[list[Pool], list[dict], list[str]]:
    """(pools, the runs of the newest run's code as listed in the record, each with why it
    stopped where it did, shapes no run measured)."""
    pools: dict[tuple, Pool] = {}
    entries, unmeasured = [], {}
    for run in runs:
        earlier = not same_code(run, runs[-1], version)
        if earlier and not any(c.startswith("pristine/") for c in run["cells"]):
            continue
        done = ab_rounds.from_records(run["rounds"])
        for stage in run["stages"]:
            wanted = set(stage["rounds"])
            rounds = [r for r in done if r.index in wanted]
            if any(not r.warmup for r in rounds):
                key = pool_key(run, stage, earlier)
                pools.setdefault(key, Pool(run, {**stage, "cells": []}, earlier))
                pools[key].add(run, stage, rounds)
            elif not earlier:
                shape = shape_of(stage)
                unmeasured.setdefault(shape, f"{shape} ({stage['status']})")
        if not earlier:
            shapes = {shape_of(s): s["status"] for s in run["stages"]}
            entry = {"date": run["date"], "command": run.get("command"), "shapes": shapes}
            if run.get("stopped"):
                entry["stopped"] = stop_cause(run["stopped"])
            entries.append(entry)
    measured = {p.shape for p in pools.values() if not p.pristine_only}
    not_run = [text for shape, text in unmeasured.items() if shape not in measured]
    return list(pools.values()), entries, not_run


def stop_cause(stopped: str) -> str:
    """Why a run stopped, in a line: the front-end's first line and, where a log tail follows,
    its last exception line (the record keeps the whole tail)."""
    head, _, tail = stopped.partition("\n")
    errors = re.findall(r"^[\w.]*(?:Error|Exception|Exit)\b.*$", tail, re.M)
    head = head.split("; log tail", 1)[0]
    return f"{head}: {errors[-1][:300]}" if errors else head[:300]


def gpu_model(gpu_name: str) -> str:
    """`H100` of `NVIDIA H100 80GB HBM3`: the model a GPU name gives (else the name)."""
    model = re.search(r"\b[A-Z]\d{2,4}\b", gpu_name)
    return model.group(0) if model else gpu_name


def step_ratio(rounds: list[ab_rounds.Round], base: str, var: str) -> stats.Ratio | None:
    """var/base of the engine's median-step token rate (verify.ab.engines.step_stats) over the
    counted rounds that recorded it for both; None when fewer than two did. A diagnostic
    beside tok/s: stalls move tok/s, not this."""
    key = "median_tok_per_s"
    counted = [r for r in rounds if not r.warmup]
    pairs = [
        (_diagnostics(r, base, "steps").get(key), _diagnostics(r, var, "steps").get(key))
        for r in counted
    ]
    pairs = [(b, v) for b, v in pairs if b and v]
    if len(pairs) < 2:
        return None
    return stats.paired_ratio([b for b, _ in pairs], [v for _, v in pairs])


def median_of(rounds: list[ab_rounds.Round], cell: str, group: str, key: str) -> float | None:
    """The median over counted rounds of `cell`'s `group`/`key` (e.g. steps/slow_share, the
    share of its decode time in slow steps; cpus/steal, the share of its CPUs' time stolen)."""
    found = [_diagnostics(r, cell, group).get(key) for r in rounds if not r.warmup]
    found = [x for x in found if x is not None]
    return statistics.median(found) if found else None


#: verify.ab.nvml's per-cell keys shown beside the median step: mean power (W), the shares of
#: the cell's time held back by the power cap and by temperature, the SM clock over its maximum.
GPU_KEYS = ("power_w", "power_throttle", "thermal_throttle", "sm_clock")


def gpu_diagnostics(rounds: list[ab_rounds.Round], plain: str, pen: str) -> dict:
    """The median over counted rounds of each GPU_KEYS of the `plain` and `pen` cells, as
    gpu_<key>_plain / _penalized; only those the cells recorded (runs before verify.ab.nvml
    have none)."""
    found = {
        f"gpu_{key}_{side}": median_of(rounds, cell, "gpu", key)
        for key in GPU_KEYS
        for side, cell in (("plain", plain), ("penalized", pen))
    }
    return {k: v for k, v in found.items() if v is not None}


def sampler_host(rounds: list[ab_rounds.Round], plain: str, pen: str) -> dict | None:
    """Where a penalized step's time goes, from the counted rounds whose `plain` and `pen`
    cells both recorded the series' sampler timers (verify.ab.engines.take_sampler_timers):
    the medians of each cell's host time per step in sample_tokens and in the sampler call
    (µs), of their paired differences, and of the paired difference of the engines' median
    steps (µs); None where fewer than two rounds recorded both."""
    pairs = []
    for rnd in (r for r in rounds if not r.warmup):
        a, b = _diagnostics(rnd, plain, "sampler"), _diagnostics(rnd, pen, "sampler")
        if "sample_tokens_us" in a and "sample_tokens_us" in b:
            steps = [_diagnostics(rnd, c, "steps").get("median_step_ms") for c in (plain, pen)]
            pairs.append((a, b, steps))
    if len(pairs) < 2:
        return None
    out: dict = {"n": len(pairs)}
    for key in ("sample_tokens_us", "sample_us"):
        out[f"plain_{key}"] = statistics.median(a[key] for a, _, _ in pairs)
        out[f"penalized_{key}"] = statistics.median(b[key] for _, b, _ in pairs)
        out[f"difference_{key}"] = statistics.median(b[key] - a[key] for a, b, _ in pairs)
    steps = [1000 * (q - p) for _, _, (p, q) in pairs if p and q]
    out["difference_step_us"] = statistics.median(steps) if steps else None
    return out


#: (version, output entropy) whose kept outputs join a token control (kept_tokens), or None.
TokenControl = tuple[str, str | None] | None


def _tokens(
    rounds: list, base: str, cell: str, control: str | None, what: str, kept: TokenControl = None
) -> Verdict:
    """Identity of `cell`'s tokens with `base`'s. The control is a second engine of `base`'s
    build (`control`): GPU engines of one build need not agree across starts, so without it the
    comparison is reported, not judged. Tokens are compared round by round, only in rounds that
    ran every engine compared (a pool's other runs started other engines)."""
    cells = [base, cell] + ([control] if control else [])
    mine = [r for r in rounds if all(c in r.values for c in cells)]

    def agree(a: str, b: str) -> bool:
        return all(r.values[a]["token_ids_hash"] == r.values[b]["token_ids_hash"] for r in mine)

    if not mine:
        return _tokens_across_starts(rounds, base, cell, control, what, kept)
    identical = agree(base, cell)
    if control is None:
        seen = "identical" if identical else "differ"
        return Verdict(
            NOT_RUN, f"{what}: {seen}; not judged (no second engine of the baseline's build)"
        )
    build = base.split("/")[0]
    verdict = identity.judge(identical, agree(base, control), what, baseline=build)
    if verdict.outcome == PASS and not verdict.reason:
        same = f"identical in {len(mine)} round(s), {build} agreeing with its second engine"
        return Verdict(PASS, f"{what}: {same}")
    return verdict


def _tokens_across_starts(
    rounds: list, base: str, cell: str, control: str | None, what: str, kept: TokenControl = None
) -> Verdict:
    """`cell`'s tokens against `base`'s where no round ran them together (engines that took
    turns, or calls of one engine each): judged only when the baseline and its second engine
    gave one and the same output in every round each ran (so separate starts of that build
    agree, here across calls too), and `cell` ran; else not run. Outputs of the baseline's
    build kept by other runs (`kept`: the version and output distribution whose kept outputs
    of the same sampling and batch, any length, join the control; kept_tokens) are part of the
    control: where their common prefix differs, the control failed."""
    hashes = {
        c: {r.values[c]["token_ids_hash"] for r in rounds if c in r.values}
        for c in (base, cell, control)
        if c
    }
    missing = [c for c, h in hashes.items() if not h]
    if control is None or missing:
        absent = ", ".join(missing) or "a second engine of the baseline's build"
        return Verdict(NOT_RUN, f"{what}: not judged across engine starts (no {absent})")
    build = base.split("/")[0]
    control_agrees = len(hashes[base] | hashes[control]) == 1
    elsewhere = None
    if control_agrees and kept:
        elsewhere = kept_tokens.disagreement(kept[0], build, base.split("/", 1)[1], kept[1])
        control_agrees = elsewhere is None
    identical = hashes[cell] == hashes[base] and len(hashes[base]) == 1
    verdict = identity.judge(identical, control_agrees, what, baseline=build)
    if elsewhere:
        return Verdict(verdict.outcome, f"{verdict.reason}: {elsewhere}")
    if verdict.outcome == PASS and not verdict.reason:
        same = f"identical across separate engine starts, {build} agreeing with its second engine"
        return Verdict(PASS, f"{what}: {same}")
    return verdict

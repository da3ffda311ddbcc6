"""verify.importer.gpu: verdict rules of the GPU records, on synthetic step files."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from verify.importer import gpu, gpu_kernels, loop

META = {
    "command": "gpu_verify.py --steps x",
    "gpu": "NVIDIA H100 80GB HBM3",
    "vllm_version": "0.22.0",
    "series_hash": "abc1234567",
    "date": "2026-11-24T08:00:00+00:00",
}


@pytest.fixture
def mod(gpu_results_root: Path) -> ModuleType:
    return gpu


def _write(root: Path, step: str, data: dict) -> None:
    (root / "0.22.0" / f"{step}.json").write_text(json.dumps({**META, **data}))


def test_gsm8k_verdict_is_the_one_at_a_time_check(mod, tmp_path):
    side = {"identical_responses": 64, "differing": [], "accuracy": {"pristine": 0.0}}
    gsm8k = {"samples": 64, "sequential": side,
             "concurrent": {**side, "identical_responses": 57, "differing": [1, 2]}}  # fmt: skip
    scores = {"exact_match,strict-match": 0.0}
    lm = {"differing_doc_ids": [], "scores": {"pristine": scores, "patched": scores}}
    _write(tmp_path, "gsm8k-lmeval", {"gsm8k": gsm8k, "lm_eval": lm})
    identity, lmeval = mod.gsm8k("0.22.0")
    assert identity["outcome"] == "pass"
    assert identity["numbers"]["concurrent_identical"] == 57
    assert lmeval["outcome"] == "pass"
    gsm8k["sequential"] = {**side, "identical_responses": 63, "differing": [5]}
    lm["differing_doc_ids"] = [5]
    _write(tmp_path, "gsm8k-lmeval", {"gsm8k": gsm8k, "lm_eval": lm})
    # No pristine-vs-pristine control in this step: a difference cannot be attributed.
    assert [r["outcome"] for r in mod.gsm8k("0.22.0")] == ["inconclusive", "inconclusive"]
    _write(tmp_path, "gsm8k-lmeval", {"gsm8k": gsm8k, "lm_eval": {"error": "rc 1"}})
    assert mod.gsm8k("0.22.0")[1]["outcome"] == "fail"


def _bench_row(length: int, pen: tuple[float, float], think: tuple[float, float]) -> dict:
    return {
        "L": length,
        "penalties_pristine_ms": pen[0],
        "penalties_patched_ms": pen[1],
        "penalties_ratio": pen[0] / pen[1],
        "think_pristine_ms": think[0],
        "think_patched_ms": think[1],
        "think_ratio": think[0] / think[1],
    }


@pytest.mark.parametrize(
    ("patched_pen_long", "outcome"), [(0.5, "pass"), (3.8, "fail")]
)  # fmt: skip
def test_micro_003_patched_cost_must_stay_flat(mod, tmp_path, patched_pen_long, outcome):
    rows = [
        _bench_row(256, (1.4, 0.4), (3.9, 0.22)),
        _bench_row(12288, (55.0, patched_pen_long), (193.0, 0.34)),
    ]
    bench = {"command": "bench_penalty_host_cpu.py", "date": META["date"], "device": "cuda",
             "params": {"batch": 128}, "results": rows}  # fmt: skip
    (tmp_path / "0.22.0" / "micro-003.json").write_text(json.dumps(bench))
    _write(tmp_path, "micro", {})
    rec = mod.micro_003("0.22.0")
    assert rec["outcome"] == outcome
    if outcome == "fail":
        assert "penalties" in rec["reason"] and "think" not in rec["reason"]


def _staging(mismatched: int, control: int) -> dict:
    run = {"steps": 200, "staging_pinned": True, "num_buffers": 2}
    return {
        "command": "python3 scripts/gpu_check_penalty_staging.py",
        "penalties": ".gpu/overlay/0.22.0/patched/vllm/v1/sample/ops/penalties.py",
        "stress": {**run, "mismatched_steps": mismatched},
        "control_no_events": {**run, "mismatched_steps": control},
        "timing_B128": [],
    }


def test_staging_check_needs_a_clean_stress_and_a_control_that_sees_races(mod, tmp_path):
    _write(tmp_path, "micro", {"step": "micro"})
    _write(tmp_path, "gpu_check_003_staging", _staging(0, 196))
    rec = mod.staging_003("0.22.0")
    assert rec["step"] == "equivalence-gpu-003-staging" and rec["outcome"] == "pass"
    _write(tmp_path, "gpu_check_003_staging", _staging(3, 196))
    assert mod.staging_003("0.22.0")["outcome"] == "fail"
    _write(tmp_path, "gpu_check_003_staging", _staging(0, 0))
    rec = mod.staging_003("0.22.0")
    assert rec["outcome"] == "fail" and "control" in rec["reason"]


def _apply_bench(ratios: dict[int, float]) -> dict:
    rows = [{"L": n, "dense_ms": 1.0, "sparse_ms": 1.0 / r, "ratio_median_of_steps": r,
             "equal": True} for n, r in ratios.items()]  # fmt: skip
    params = {"batch": 64, "prompt_len": 512, "vocab_size": 151936}
    return {"command": "bench_penalties_apply.py", "date": META["date"], "params": params,
            "device": "cuda", "results": rows}  # fmt: skip


def test_apply_record_passes_when_dense_is_faster_on_cuda(mod, tmp_path):
    # The patch keeps the dense path for CUDA logits: right while sparse is not clearly faster.
    _write(tmp_path, "micro", {})
    _write(tmp_path, "micro-003-apply", _apply_bench({256: 0.7, 4096: 1.04, 12288: 0.6}))
    record = mod.micro_003_apply("0.22.0")
    assert record["outcome"] == "pass" and record["numbers"]["sparse_chosen_up_to_L"] == -1


def test_apply_record_fails_when_sparse_is_clearly_faster_on_cuda(mod, tmp_path):
    _write(tmp_path, "micro", {})
    _write(tmp_path, "micro-003-apply", _apply_bench({256: 1.5, 4096: 0.9}))
    record = mod.micro_003_apply("0.22.0")
    assert record["outcome"] == "fail" and "unused on cuda" in record["reason"]


def _contract(eager_split: float, identical: bool = True) -> dict:
    rounds = [1.0, 1.02, 0.99, 1.01, 1.0]
    shape = {"vocab": 151936, "requests": 1, "draft_tokens": [1, 3], "draft_probs": False}
    row = {"baseline": "0.22.0", **shape, "graph_us": [x * 40 for x in rounds]}
    return {
        "machine": {
            "python": "3.12.3",
            "gpu": "NVIDIA H100 80GB HBM3",
            "cpu": "Xeon",
            "torch": "2.11.0",
            "triton": "3.6.0",
            "cuda": "13.0",
        },  # fmt: skip
        "command": "python3 scripts/gpu_kernel_bench.py",
        "date": "2026-11-25T00:00:00+00:00",
        "rows": [
            {
                **row,
                "variant": "0.22.0",
                "identical": True,
                "eager_us": [x * 50 for x in rounds],
                "host_us": [x * 20 for x in rounds],
            },
            {
                **row,
                "variant": "0.22.0+0006",
                "identical": identical,
                "eager_us": [x * eager_split for x in rounds],
                "host_us": [x * 19 for x in rounds],
            },
        ],  # fmt: skip
    }


@pytest.mark.parametrize(
    ("eager", "identical", "outcome"),
    [(20.0, True, "pass"), (80.0, True, "fail"), (20.0, False, "fail")],
)
def test_kernel_records_read_the_raw_data_contract(mod, tmp_path, eager, identical, outcome):
    (tmp_path / "0.22.0" / "kernel_eager_host_run10.json").write_text(
        json.dumps(_contract(eager, identical))
    )
    records = {r["step"]: r for r in gpu_kernels.kernels("0.22.0")}
    split = records["kernel-010"]
    assert split["outcome"] == outcome and split["machine"]["python"] == "3.12.3"
    assert list(split["patches"]) == ["recovered-tokens-split-vocab"]
    assert "ragged" in split["tables"][0]


def test_a_shorter_newer_kernel_run_does_not_displace_a_longer_one(mod, tmp_path):
    """Of two contract files that measured the variant (neither with the build tree's sha256),
    the one of more rounds is read although the other is newer; at equal rounds, the newer."""
    long = {**_contract(20.0), "method": {"rounds": 5}}
    short = {**_contract(80.0), "method": {"rounds": 3}, "date": "2026-12-01T00:00:00+00:00"}
    (tmp_path / "0.22.0" / "kernel-long.json").write_text(json.dumps(long))
    (tmp_path / "0.22.0" / "kernel-short.json").write_text(json.dumps(short))
    split = {r["step"]: r for r in gpu_kernels.kernels("0.22.0")}["kernel-010"]
    assert split["numbers"]["source"] == "kernel-long.json" and split["outcome"] == "pass"
    short["method"]["rounds"] = 5
    (tmp_path / "0.22.0" / "kernel-short.json").write_text(json.dumps(short))
    split = {r["step"]: r for r in gpu_kernels.kernels("0.22.0")}["kernel-010"]
    assert split["numbers"]["source"] == "kernel-short.json" and split["outcome"] == "fail"


def test_a_kernel_file_outside_the_raw_data_contract_makes_no_record(mod, tmp_path):
    """A file without top-level `machine` (gpu_kernel_bench.py's first format kept `meta`)
    measures no variant the importer reads: no kernel record, where a contract file makes one."""
    first_format = {k: v for k, v in _contract(20.0).items() if k != "machine"}
    first_format["meta"] = _contract(20.0)["machine"]
    (tmp_path / "0.22.0" / "kernel-first-format.json").write_text(json.dumps(first_format))
    assert "kernel-010" not in {r["step"] for r in gpu_kernels.kernels("0.22.0")}
    (tmp_path / "0.22.0" / "kernel-contract.json").write_text(json.dumps(_contract(20.0)))
    assert "kernel-010" in {r["step"] for r in gpu_kernels.kernels("0.22.0")}


def test_recorded_patch_hashes_decide_staleness_per_patch(mod, tmp_path):
    """A step file that carries the overlay's {subject: diff hash} is current evidence for a
    patch whose diff is unchanged (even from another series), and stale for a changed one."""
    from verify import registry, results
    from verify.series import read_series

    by_subject = {p.subject: registry.diff_hash(p) for p in read_series("0.22.0")}
    slug = "penalties-one-pass-triton"
    subject = registry.load()[slug].pins["0.22.0"]
    src = {**META, "patch_hashes": by_subject}
    rec = mod._record(src, "e2e-gpu-penalties-v1", slug, "pass", {})
    assert rec["patches"][slug] == by_subject[subject]
    assert results.staleness(rec, slug, "0.22.0") == ""
    src["patch_hashes"] = {**by_subject, subject: "0" * 12}
    rec = mod._record(src, "e2e-gpu-penalties-v1", slug, "pass", {})
    assert results.staleness(rec, slug, "0.22.0").startswith("patch changed")


def _ab_rounds(effects: dict[str, float], rounds: int = 12, itl: bool = True) -> list[dict]:
    """Synthetic serve A/B rounds: each variant's metrics = pristine's x its effect, with a
    shared per-round drift and a little alternating noise."""
    out = []
    for i in range(rounds):
        drift = 1 + 0.03 * ((i % 3) - 1)
        values = {}
        for j, (name, effect) in enumerate(effects.items()):
            noise = 1 + 0.002 * (-1) ** (i + j)
            rate = 200.0 * drift * effect * noise
            values[name] = {"output_throughput": 20000 * drift * noise, "duration": 3.0}
            if itl:
                values[name] |= {"server_token_rate": rate, "server_mean_itl_ms": 1000 / rate}
            if name == "planted":
                values[name] |= {"planted_steps": 500, "planted_slept_s": 0.5 * 0.15e-3 * 200}
        out.append({"index": i, "order": list(effects), "warmup": False, "values": values})
    return out


def _ab_file(effects: dict[str, float], predicted: float, **kw) -> dict:
    variants = {name: {"pythonpath": [], "env": {}} for name in effects}
    comparisons = [
        {"baseline": "pristine", "variant": v, "server_token_rate": {
            "predicted_if_all_on_critical_path": predicted}}
        for v in effects if v != "pristine"
    ]  # fmt: skip
    return {
        "workload": "mrv2",
        "machine": {"python": "3.12", "cpu": "x", "gpu": "H100", "torch": "2.11"},
        "variants": variants,
        "rounds": _ab_rounds(effects, **kw),
        "comparisons": comparisons,
        "startup_s": {},
    }


def _serve_ab(version: str) -> list[dict]:
    """The serving A/B records the importer loop makes for `version` (registry reader serve-ab)."""
    return [r for r in loop.records(version) if r["step"].startswith("gpu-serve-ab")]


def test_serve_ab_judges_the_engine_rate_with_the_runs_controls(mod: ModuleType, tmp_path: Path):
    effects = {"pristine": 1.0, "pristine2": 1.0, "planted": 0.97, "only-0001": 1.05}
    _write(tmp_path, "ab-serve", _ab_file(effects, predicted=0.97))
    (record,) = _serve_ab("0.22.0")
    assert record["step"] == "gpu-serve-ab"
    assert record["numbers"]["metric"] == "server_token_rate"
    assert record["numbers"]["calibration"] == "pass"  # A/A within 1%, planted at its size
    assert record["outcome"] == "pass"
    assert "A/A" in record["tables"][0] and "engine token rate" in record["tables"][0]


@pytest.mark.parametrize(
    ("control", "effect", "reason"),
    [
        ("planted", 1.0, "planted slowdown not resolved"),  # the planted effect is missed
        ("pristine2", 1.04, "excludes 1"),  # A/A sees a difference
    ],
)
def test_serve_ab_is_inconclusive_when_a_control_fails(
    mod: ModuleType, tmp_path: Path, control: str, effect: float, reason: str
):
    effects = {"pristine": 1.0, "pristine2": 1.0, "planted": 0.97, "only-0001": 1.05}
    _write(tmp_path, "ab-serve", _ab_file({**effects, control: effect}, predicted=0.97))
    (record,) = _serve_ab("0.22.0")
    assert record["outcome"] == "inconclusive"
    assert reason in record["reason"]


def test_serve_ab_ngram_compares_the_patch_on_top_of_its_base(mod: ModuleType, tmp_path: Path):
    effects = {"pristine": 1.0, "pristine2": 1.0, "planted": 0.97, "at-0005": 1.0, "at-0006": 1.0}
    data = _ab_file(effects, predicted=0.97)
    data["comparisons"][-1]["baseline"] = "at-0005"
    _write(tmp_path, "ab-serve-ngram", {**data, "workload": "ngram"})
    (record,) = _serve_ab("0.22.0")
    assert record["step"] == "gpu-serve-ab-ngram"
    assert (record["numbers"]["baseline"], record["numbers"]["variant"]) == ("at-0005", "at-0006")
    assert record["outcome"] == "no difference resolved"


def test_serve_ab_reader_judges_the_newest_production_shape_run_into_the_registry_record(
    mod: ModuleType, tmp_path: Path
):
    """The loop reader `serve-ab`: the registry step's record name, the newest run by date, and
    the model shape and logit scale in the workload; a failed A/A still makes it inconclusive."""
    effects = {"pristine": 1.0, "pristine2": 1.0, "planted": 0.97, "only-0001": 1.05}
    shape = {"workload": "mrv2", "model": "qwen3-8b", "logit_scale": "667142.7"}
    old = {**_ab_file({**effects, "pristine2": 1.04}, predicted=0.97), **shape}
    new = {**_ab_file(effects, predicted=0.97), **shape, "date": "2026-12-02T00:00:00+00:00"}
    _write(tmp_path, "ab-serve-qwen3-8b-a", new)
    _write(tmp_path, "ab-serve-qwen3-8b-b", {**old, "date": "2026-11-30T00:00:00+00:00"})
    made = {r["step"]: r for r in loop.records("0.22.0")}
    record = made["gpu-serve-ab-qwen3-8b"]
    assert record["outcome"] == "pass" and record["date"].startswith("2026-12-02")
    assert "qwen3-8b shape on vLLM's dummy weights" in record["numbers"]["workload"]
    assert "667143" in record["numbers"]["workload"]
    _write(tmp_path, "ab-serve-qwen3-8b-b", {**old, "date": "2026-12-03T00:00:00+00:00"})
    record = {r["step"]: r for r in loop.records("0.22.0")}["gpu-serve-ab-qwen3-8b"]
    assert record["outcome"] == "inconclusive" and "excludes 1" in record["reason"]


def test_serve_ab_run_of_an_unknown_workload_is_a_named_error(mod: ModuleType, tmp_path: Path):
    from verify.importer.gpu_serve_ab import UnknownWorkload

    effects = {"pristine": 1.0, "pristine2": 1.0, "planted": 0.97, "only-0001": 1.05}
    _write(tmp_path, "ab-serve", {**_ab_file(effects, predicted=0.97), "workload": "chat"})
    with pytest.raises(UnknownWorkload, match="ab-serve.json: workload 'chat'; known: mrv2"):
        _serve_ab("0.22.0")


def _grit_file(effects: dict[str, float], short: dict[str, int] | None = None) -> dict:
    """A `gpu_ab.sh TAG grit` run on 0.18.1: embeddings rounds (request throughput, no output
    tokens, no ITL); `short`: variant -> rounds in which it completed 1990 of 2000 requests."""
    rounds = []
    for i in range(12):
        drift = 1 + 0.03 * ((i % 3) - 1)
        values = {}
        for j, (name, effect) in enumerate(effects.items()):
            rate = 900.0 * drift * effect * (1 + 0.002 * (-1) ** (i + j))
            completed = 1990 if i < (short or {}).get(name, 0) else 2000
            values[name] = {"request_throughput": rate, "duration": 2000 / rate}
            values[name] |= {"completed": completed, "total_input_tokens": 70000}
            if name == "planted":
                values[name] |= {"planted_steps": 80, "planted_slept_s": 0.04}
        rounds.append({"index": i, "order": list(effects), "warmup": False, "values": values})
    comparisons = [{"baseline": "pristine", "variant": v, "metric": "request_throughput"}
                   for v in effects if v != "pristine"]  # fmt: skip
    comparisons[1]["predicted_if_all_on_critical_path"] = 0.98
    return {
        "workload": "grit",
        "vllm_version": "0.18.1",
        "machine": {"python": "3.12", "cpu": "x", "gpu": "H100", "torch": "2.11"},
        "variants": {name: {"pythonpath": [], "env": {}} for name in effects},
        "metrics": ["request_throughput"],
        "rounds": rounds,
        "comparisons": comparisons,
        "startup_s": {},
    }


GRIT = {"pristine": 1.0, "pristine2": 1.0, "planted": 0.98, "only-0001": 1.3}


def _write_grit(root: Path, data: dict) -> None:
    (root / "0.18.1").mkdir(exist_ok=True)
    (root / "0.18.1" / "ab-serve-grit.json").write_text(json.dumps({**META, **data}))


def test_serve_ab_grit_judges_request_throughput_on_the_0181_pin(mod: ModuleType, tmp_path):
    _write_grit(tmp_path, _grit_file(GRIT))
    (record,) = _serve_ab("0.18.1")
    assert (record["step"], record["seed"], record["vllm_version"]) == (
        "gpu-serve-ab-grit",
        "pooling-prompt-ids-on-cpu",
        "0.18.1",
    )
    assert list(record["patches"]) == ["pooling-prompt-ids-on-cpu"]
    numbers = record["numbers"]
    assert (numbers["metric"], numbers["variant"], numbers["calibration"]) == (
        "request_throughput",
        "only-0001",
        "pass",
    )
    assert numbers["ratio"]["ratio"] == pytest.approx(1.3, rel=1e-2)
    assert numbers["total_input_tokens_per_run"] == [70000]
    assert record["outcome"] == "pass"
    assert "client request throughput" in record["tables"][0]
    assert "ITL" not in record["tables"][0] and "output throughput" not in record["tables"][0]


@pytest.mark.parametrize(
    ("change", "outcome", "reason"),
    [
        ({"pristine2": 1.04}, "inconclusive", "excludes 1"),  # A/A sees a difference
        ({"planted": 1.0}, "inconclusive", "planted slowdown not resolved"),
        ({"planted": 0.90}, "inconclusive", "misses its expected size 0.980"),
        ({"only-0001": 1.0}, "no difference resolved", "patched/pristine"),
    ],
)
def test_serve_ab_grit_controls_decide_what_the_ratio_means(
    mod: ModuleType, tmp_path, change, outcome, reason
):
    _write_grit(tmp_path, _grit_file({**GRIT, **change}))
    (record,) = _serve_ab("0.18.1")
    assert record["outcome"] == outcome
    assert reason in record["reason"]


@pytest.mark.parametrize(
    ("short", "outcome"), [({"only-0001": 2}, "fail"), ({"pristine2": 1}, "inconclusive")]
)
def test_serve_ab_failed_requests_are_never_a_pass(mod: ModuleType, tmp_path, short, outcome):
    """A server that fails requests finishes its benchmark sooner: the patched one failing is
    a fail, a control failing leaves the run inconclusive."""
    _write_grit(tmp_path, _grit_file(GRIT, short))
    (record,) = _serve_ab("0.18.1")
    assert record["outcome"] == outcome
    assert "requests failed" in record["reason"]
    assert record["numbers"]["rounds_with_failed_requests"] == short


def test_serve_ab_grit_without_request_throughput_is_a_named_error(mod: ModuleType, tmp_path):
    from verify.errors import PatchbenchError

    data = _grit_file(GRIT)
    for rnd in data["rounds"]:
        del rnd["values"]["planted"]["request_throughput"]
    _write_grit(tmp_path, data)
    with pytest.raises(PatchbenchError, match="ab-serve-grit.json: no counted round has"):
        _serve_ab("0.18.1")


def test_serve_ab_grit_says_when_the_servers_ran_eager(mod: ModuleType, tmp_path):
    data = _grit_file(GRIT)
    _write_grit(tmp_path, {**data, "argv": ["serve", "--serve-args", "--seed 0 --enforce-eager"]})
    (record,) = _serve_ab("0.18.1")
    assert "vllm serve ran with --enforce-eager" in record["numbers"]["workload"]
    _write_grit(tmp_path, {**data, "argv": ["serve", "--serve-args", "--seed 0"]})
    (record,) = _serve_ab("0.18.1")
    assert "enforce-eager" not in record["numbers"]["workload"]


def _state_micro_record(version: str) -> dict:
    """The importer loop's record of the penalty-state micro (its registry step names it)."""
    (record,) = [r for r in loop.records(version) if r["step"] == "microbench-gpu-003-state"]
    return record


def _state_micro(now_record_us: float, identical: bool = True, step_us=None) -> dict:
    """A penalty-state micro file (scripts/gpu_penalty_state_bench.py) with one record_sampled
    and one kernel shape; `now` takes `now_record_us` per record_sampled call; `step_us`:
    also a decode-step shape where `now` takes that long (before: 300 us)."""
    rows = []
    benches = [
        ("record", "record_sampled, 64 rows", 250.0, now_record_us),
        ("apply", "apply, 64 rows", 60.0, 60.0),
    ]
    if step_us is not None:
        benches.append(("step", "step, 64 rows", 300.0, step_us))
    for bench, shape, before_us, now_us in benches:
        for variant, us in (("before", before_us), ("now", now_us)):
            jitter = [us * (1 + 0.002 * k) for k in range(5)]
            rows.append({"variant": variant, "baseline": "before", "shape": shape,
                         "vocab": 151936, "bench": bench, "identical": identical,
                         "graph_us": jitter, "eager_us": jitter, "host_us": jitter})  # fmt: skip
    machine = {"python": "3.12", "gpu": "H100", "cpu": "Xeon", "torch": "2.11", "triton": "3.6"}
    variants = {n: {"path": f"{n}.py", "sha256": "0" * 64} for n in ("before", "now")}
    return {"kind": "penalty-state-micro", "date": META["date"], "command": "bench",
            "machine": machine, "timed": True, "variants": variants, "rows": rows}  # fmt: skip


@pytest.mark.parametrize(
    "now_us,identical,outcome",
    [(25.0, True, "pass"), (250.0, True, "no difference resolved"), (25.0, False, "fail")],
)
def test_penalty_state_micro_judges_record_faster_and_kernel_not_slower(
    mod, tmp_path, now_us, identical, outcome
):
    (tmp_path / "0.22.0" / "micro-penalty-state.json").write_text(
        json.dumps(_state_micro(now_us, identical))
    )
    record = _state_micro_record("0.22.0")
    assert record["outcome"] == outcome
    assert record["series_hash"] == "unknown"  # the measured file is not the build tree's


@pytest.mark.parametrize("step_us,outcome", [(150.0, "pass"), (330.0, "fail")])
def test_penalty_state_micro_judges_the_decode_step_where_timed(mod, tmp_path, step_us, outcome):
    """With step rows the decode step must be faster; record_sampled on its own (here slower:
    its work moved into the next penalty launch) is shown, not judged."""
    data = _state_micro(280.0, step_us=step_us)
    (tmp_path / "0.22.0" / "micro-penalty-state.json").write_text(json.dumps(data))
    record = _state_micro_record("0.22.0")
    assert record["outcome"] == outcome
    assert "decode step" in record["reason"] and "record_sampled:" not in record["reason"]
    assert any(t.startswith("record (now / before), not judged") for t in record["tables"])


def _kernel_row(variant: str, eager: list[float], vocab=151936, requests=1) -> dict:
    shape = {"vocab": vocab, "requests": requests, "draft_tokens": 1, "draft_probs": False}
    return {"variant": variant, "baseline": "9.9.0", **shape, "identical": True, "eager_us": eager}


def test_a_kernel_headline_states_the_eager_time_at_its_shape() -> None:
    rows = [
        _kernel_row("9.9.0", [80.0, 84.0, 83.0]),
        _kernel_row("9.9.0+0006", [28.0, 29.0, 28.5]),
        _kernel_row("9.9.0+0006", [1.0, 1.0, 1.0], requests=4),
    ]
    line = gpu_kernels.kernel_headline(
        rows, "9.9.0+0006", "vocab 151936, 1x1", "NVIDIA H200", "x: pass"
    )
    assert line.startswith(
        "kernel eager time (L2 flushed) v9.9.0 83.0 us -> this PR 28.5 us (0.35 ["
    )
    assert line.endswith(
        ", n=3, this PR / v9.9.0) at vocab 151936, 1x1 (H200, kernel alone, no model runner); pass"
    )
    assert gpu_kernels.kernel_headline(rows, "9.9.0+0006", "vocab 32000, 1x1", "H200", "pass") == ""

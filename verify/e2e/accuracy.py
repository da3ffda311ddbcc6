"""Step 3 (accuracy): `lm_eval --model local-completions` against each served root on gsm8k,
read offline from the local jsonl files through a task YAML written here (gsm8k's usual
settings: 5-shot, "Question: ...\\nAnswer:", strict-match and flexible-extract filters),
`--log_samples`. A/B: equal scores and identical per-sample responses.

With the tiny random-weight model the score is ~0: this step proves that the patched code
serves exactly the same completions as the pristine code, not that the model can do math."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

from verify.e2e.common import Context, log_tail, say, workdir, write_result
from verify.e2e.identity import IDENTITY_RUNS
from verify.e2e.serving import ab_servers
from verify.errors import PatchbenchError
from verify.verdicts import PASS, Verdict, identity

DATA_DEFAULT = Path(__file__).resolve().parents[3] / "shared" / "data" / "gsm8k"

TASK_YAML = """\
task: gsm8k_local
dataset_path: json
dataset_kwargs:
  data_files:
    train: {train}
    test: {test}
output_type: generate_until
training_split: train
fewshot_split: train
test_split: test
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: false
    regexes_to_ignore:
      - ","
      - "\\\\$"
      - "(?s).*#### "
      - "\\\\.$"
generation_kwargs:
  until:
    - "Question:"
    - "</s>"
    - "<|im_end|>"
  do_sample: false
  temperature: 0.0
  max_gen_toks: {max_gen_toks}
repeats: 1
num_fewshot: 5
filter_list:
  - name: "strict-match"
    filter:
      - function: "regex"
        regex_pattern: "#### (\\\\-?[0-9\\\\.\\\\,]+)"
      - function: "take_first"
  - name: "flexible-extract"
    filter:
      - function: "regex"
        group_select: -1
        regex_pattern: "(-?[$0-9.,]{{2,}})|(-?[0-9]+)"
      - function: "take_first"
metadata:
  version: 3.0
"""


#: Why lm_eval sends one request at a time: with several in flight, which requests share a
#: batch depends on timing, batch shape changes CPU matmul rounding, and near-tied logits of a
#: random-weight model then flip. One at a time, every response is computed the same way.
GSM8K_CONCURRENCY = 1


def data_dir() -> Path:
    return Path(os.environ.get("PATCHBENCH_GSM8K_DIR") or DATA_DEFAULT)


def write_task(dest: Path, max_gen_toks: int, data: Path | None = None) -> Path:
    data = data or data_dir()
    for split in ("train", "test"):
        if not (data / f"{split}.jsonl").is_file():
            raise PatchbenchError(
                f"gsm8k {split} split not found at {data}/{split}.jsonl (set PATCHBENCH_GSM8K_DIR)"
            )
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "gsm8k_local.yaml").write_text(
        TASK_YAML.format(
            train=data / "train.jsonl", test=data / "test.jsonl", max_gen_toks=max_gen_toks
        )
    )
    return dest


def lm_eval_cmd(ctx: Context, url: str, tasks_dir: Path, out: Path, limit: int | None) -> list[str]:
    return lm_eval_argv(
        ctx.runtime.python, url, "tiny", ctx.model, tasks_dir, out, limit, GSM8K_CONCURRENCY
    )


def lm_eval_argv(
    python: str,
    url: str,
    model: str,
    tokenizer: Path,
    tasks_dir: Path,
    out: Path,
    limit: int | None,
    num_concurrent: int = 4,
) -> list[str]:
    """`lm_eval --model local-completions` on gsm8k_local against the server at `url`."""
    model_args = (
        f"base_url={url}/v1/completions,model={model},tokenizer_backend=huggingface,"
        f"tokenizer={tokenizer},num_concurrent={num_concurrent},max_retries=2,"
        "tokenized_requests=False,max_length=4096,seed=0"
    )
    cmd = [
        python,
        "-m",
        "lm_eval",
        "--model",
        "local-completions",
        "--model_args",
        model_args,
        "--tasks",
        "gsm8k_local",
        "--include_path",
        str(tasks_dir),
        "--output_path",
        str(out),
        "--log_samples",
        "--seed",
        "0",
        "--batch_size",
        "1",
    ]
    if limit:
        cmd += ["--limit", str(limit)]
    return cmd


def differing_docs(a: list[dict], b: list[dict]) -> list[int]:
    """doc_id of every sample row (as `_load` sorts them) whose responses differ."""
    return [
        ra["doc_id"]
        for ra, rb in zip(a, b, strict=True)
        if ra["resps"] != rb["resps"] or ra["filtered_resps"] != rb["filtered_resps"]
    ]


def _load(out: Path) -> tuple[dict, list[dict]]:
    results = sorted(out.rglob("results_*.json"))
    samples = sorted(out.rglob("samples_gsm8k_local_*.jsonl"))
    if not results or not samples:
        raise PatchbenchError(f"lm_eval wrote no results/samples under {out}")
    res = json.loads(results[-1].read_text())["results"]["gsm8k_local"]
    rows = [json.loads(line) for line in samples[-1].read_text().splitlines() if line.strip()]
    return res, sorted(rows, key=lambda r: (r["doc_id"], str(r.get("filter", ""))))


def gsm8k_verdict(samples: dict[str, list[dict]], scores: dict[str, dict]) -> Verdict:
    """Identity of every response, pristine vs patched, after pristine vs pristine."""
    control = differing_docs(samples["pristine"], samples["pristine-control"])
    differing = differing_docs(samples["pristine"], samples["patched"])
    keys = [k for k in scores["pristine"] if k.startswith("exact_match")]
    equal_scores = all(scores["pristine"][k] == scores["patched"][k] for k in keys)
    n = len(samples["pristine"])
    verdict = identity.judge(
        not differing and equal_scores, not control, what=f"gsm8k responses ({n} samples)"
    )
    detail = f"{len(differing)} of {n} responses differ pristine vs patched"
    if control:
        detail += f"; pristine differs from itself on {len(control)}"
    numbers = {"differing_doc_ids": differing, "control_differing_doc_ids": control}
    if verdict.outcome == PASS:
        return Verdict(PASS, verdict.reason, numbers)
    return Verdict(verdict.outcome, f"{verdict.reason}: {detail}", numbers)


def gsm8k(
    ctx: Context,
    *,
    limit: int | None = 50,
    max_gen_toks: int = 256,
    health_timeout: float = 600,
    servers=None,
) -> bool:
    work = workdir(ctx.version, "gsm8k")
    tasks = write_task(work / "tasks", max_gen_toks)
    started = time.monotonic()
    scores, samples, timing = {}, {}, {}
    with contextlib.ExitStack() as stack:
        if servers is None:
            servers = stack.enter_context(ab_servers(ctx, work, health_timeout))
        for root, name in IDENTITY_RUNS:
            out = work / f"lm_eval-{name}"
            cmd = lm_eval_cmd(ctx, servers[root].url, tasks, out, limit)
            log = work / f"lm_eval-{name}.log"
            say(f"lm_eval ({name}) -> {log}")
            t0 = time.monotonic()
            env = {**ctx.runtime.env("pristine"), "HF_DATASETS_CACHE": str(work / "hf-datasets")}
            with open(log, "w") as fh:
                proc = subprocess.run(
                    cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=3000, cwd=work
                )
            if proc.returncode:
                raise PatchbenchError(f"lm_eval failed ({name}); log tail:\n{log_tail(log)}")
            timing[name] = round(time.monotonic() - t0, 1)
            scores[name], samples[name] = _load(out)
    verdict = gsm8k_verdict(samples, scores)
    numbers = {
        "limit": limit,
        "max_gen_toks": max_gen_toks,
        "num_concurrent": GSM8K_CONCURRENCY,
        "n_samples": len(samples["pristine"]),
        "scores": {r: {k: scores[r][k] for k in scores[r] if "exact_match" in k} for r in scores},
        **verdict.numbers,
        "lm_eval_s": timing,
        "step_s": round(time.monotonic() - started, 1),
        "command_example": lm_eval_cmd(ctx, "http://127.0.0.1:PORT", tasks, work / "OUT", limit),
        "note": "random-weight tiny model: a score of ~0 is expected; the A/B identity of every "
        "response, after pristine agreed with itself, is what this step proves",
        "workdir": str(work),
    }
    say(f"gsm8k scores: {numbers['scores']} (random weights: ~0 is expected)")
    write_result(ctx, "e2e-gsm8k", "series", verdict.outcome, numbers, reason=verdict.reason)
    return verdict.outcome == PASS

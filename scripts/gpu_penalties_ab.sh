#!/usr/bin/env bash
# One device call of 0011's penalty-cost A/B (python -m verify.ab engine, V1 runner): one
# LLM per variant, started at once (or in turn: PB_ENGINES_IN_TURN), each config run as
# LLM.generate of B requests x L tokens (32 random prompt tokens, ignore_eos, seeded per
# request), cells in rotating order per shape.
#   pristine  the bundle
#   series    the 0.22.0 series without 0011's device penalty state
#   patched   the series with it (its default on CUDA)
# series: VLLM_V1_PENALTY_STATE=0 on the patched site (PB_SERIES=switch, the default), or the
# series through 0010 from the overlay's at-0010 root (PB_SERIES=at-0010; pack it with
# `python -m verify.gpu_overlay 0.22.0 --at-patch 0010`).
# Samplings: plain (temperature 1, no top-k/top-p), pen (plain + presence 1.5, frequency 0.5,
# repetition 1.1), plain-topkp / pen-topkp (top_k 50, top_p 0.9).
# Knobs (device time is the limit; a round of one shape measures every cell once):
#   PB_DEADLINE=540           s from the script's start: everything, engine start-up included
#   PB_VARIANTS="series patched"   any of pristine series patched
#   PB_SHAPES="64x2048"       BxL shapes of series and patched (e.g. "32x2048 128x2048")
#   PB_PRISTINE_SHAPES="64x2048"   pristine's shapes (it is ~5x slower with penalties)
#   PB_SAMPLING="plain pen"   add plain-topkp pen-topkp for the top-k/top-p rows
#   PB_ROUNDS=20              rounds per shape at most (each shape: an equal share of time)
#   PB_GPU_GIB=74             GPU memory all engines may take (about 130 on an H200); per GPU
#                             with PB_GPU_PER_VARIANT=1
#   PB_GPU_PER_VARIANT=0      1: each variant's engine on its own GPU of the machine (the i-th
#                             of CUDA_VISIBLE_DEVICES, else of nvidia-smi -L), for shapes whose
#                             engines do not fit one GPU together; cells still run one at a
#                             time. The engines' plain A/A then includes the cards' difference:
#                             the importer leaves such runs out of it (penalized/plain and
#                             patched/series penalized over plain stay within each engine)
#   PB_ENGINES_IN_TURN=0      1: the variants' engines take turns on one GPU, each sized to
#                             have it alone (verify.ab engine --in-turn): per shape, each
#                             engine started, measured in rounds of its own cells and stopped,
#                             in PB_VARIANTS order (swap the order from call to call). For
#                             shapes whose engines do not fit one GPU together on a one-GPU
#                             machine; each engine start (30-90 s) comes out of the rounds.
#                             The importer leaves such runs out of the plain A/A too
#   PB_CACHE_ROOT=/tmp/pb-vllm-cache/penalties-ab   the engines' compile cache (one per GPU when
#                             several runs share a host: scripts/gpu_penalties_ab_parallel.sh)
#   PB_PIN_ENGINES=0          1: each engine pinned to its own half of the call's CPUs (does it
#                             steady a host-bound step, whose speed varies from cell to cell
#                             unpinned? recorded per worker as `cpus`)
#   PB_HOP_CPUS_EVERY=0       K: each engine's main thread moves to the next of its CPUs every K
#                             engine steps (the probe saw each vCPU run at full or half speed for
#                             seconds at a time: hopping spreads a cell over all CPUs' states;
#                             recorded per cell as `cpu_hops`)
#   PB_TIMERS=0               1: the series' sampler timers on (VLLM_SAMPLE_TOKENS_TIMING=1,
#                             patch 0005): each series/patched cell records its sample_tokens
#                             host time per step, shown beside the step time, not judged
#   PB_SEEDED=1               0: no per-request seeds (vLLM's seeded sampling costs one generator
#                             call per request and step, which dilutes the penalty cost; tokens
#                             are then not comparable across engines)
# KV cache per engine: the largest shape's B x (32 + L) tokens (no preemption); the script
# refuses shapes whose engines do not fit the GPU together (on an H100, B=256 or L=8160 at B=64:
# one engine alone, PB_ENGINES_IN_TURN=1, or PB_GPU_PER_VARIANT=1 on a machine with a GPU per
# variant). Needs the bundle installed and .gpu/overlay carried (packed with
# `python -m verify.gpu_overlay 0.22.0`).
#   PB_MODEL_SHAPE=           a verify/gpu/shapes.py shape (qwen3-8b ...) on vLLM's dummy weights,
#                             instead of the Qwen3-0.6B-shaped random model
#   PB_ENTROPY=               nats: each engine first scales the dummy model's logits to this
#                             mean next-token entropy (verify/ab/output_entropy.py)
#   PB_RUNNER=V1              or MRV2 (VLLM_USE_V2_MODEL_RUNNER=1; the release's default for Qwen3)
#   PB_KEEP_TOKENS=0          1: every distinct batch output kept whole (verify.ab.engines
#                             keep_tokens), packed as $OUT/gpu/<TAG>-tokens.tgz
#   PB_PENALTY_CHECK=0        1: 0011's device penalty state checked against a shadow at every
#                             step (verify/ab/penalty_check: logits bit for bit, counts, lists),
#                             findings of the patched engine in $OUT/gpu/<TAG>-findings.json
#                             (commit as results/gpu/<v>/raw/<TAG>-findings.json); its tok/s
#                             are no penalty cost (name the run penalty-state-check*, not
#                             penalties-ab*: the cost importer would pool it)
#   PB_PENALTY_HISTORY=0      1: the host output lists that V1's penalties read (pristine, or
#                             the series without its state) compared at every step with the
#                             sampled ids (verify/ab/penalty_history); -> $OUT/gpu/<TAG>-history.json
# Record -> $OUT/gpu/<TAG>.json. PB_BUNDLE (default /tmp/vllm-bundle) and PB_WORK (default
# /root/pb-ab) move the bundle and the engines' work folders.
set -uo pipefail
tag=${1:?usage: gpu_penalties_ab.sh TAG}
bundle=${PB_BUNDLE:-/tmp/vllm-bundle}  # where .gpu/a and .gpu/b installed it
# vLLM: PB_SITE and PB_PYTHON (a runtime venv: `nox -s gpu-0.22.0` sets them), else the bundle
site=${PB_SITE:-$bundle/site} py=${PB_PYTHON:-python3}
[ -n "${PB_SITE:-}" ] || test -f "$site/.ready" || { echo "no vLLM bundle: install .gpu/a, .gpu/b"; exit 3; }
export PYTHONPATH=$site PATCHBENCH_VLLM_SITE=$site PYTHONUNBUFFERED=1
export VLLM_USE_FLASHINFER_SAMPLER=0
case ${PB_RUNNER:=V1} in
  V1) export VLLM_USE_V2_MODEL_RUNNER=0 ;;
  MRV2) export VLLM_USE_V2_MODEL_RUNNER=1 ;;
  *) echo "PB_RUNNER=$PB_RUNNER: expected V1 or MRV2"; exit 2 ;;
esac
deadline=${PB_DEADLINE:-540}
OUT=${OUT:-/tmp/pb-out}
work=${PB_WORK:-/root/pb-ab}/$tag && rm -rf "$work" && mkdir -p "$work" "$OUT/gpu"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader  # GPU free at start?
overlay=${PB_OVERLAY:-$PWD/.gpu/overlay}/${PB_PIN:-0.22.0}  # packed by python -m verify.gpu_overlay
: "${PB_VARIANTS:=series patched}" "${PB_SHAPES:=64x2048}" "${PB_PRISTINE_SHAPES:=64x2048}"
: "${PB_SAMPLING:=plain pen}" "${PB_SERIES:=switch}" "${PB_ROUNDS:=20}" "${PB_SEEDED:=1}" "${PB_GPU_GIB:=74}"
knobs="PB_VARIANTS='$PB_VARIANTS' PB_SHAPES='$PB_SHAPES' PB_PRISTINE_SHAPES='$PB_PRISTINE_SHAPES'"
knobs+=" PB_SAMPLING='$PB_SAMPLING' PB_SERIES=$PB_SERIES PB_ROUNDS=$PB_ROUNDS PB_SEEDED=$PB_SEEDED"
knobs+=" PB_GPU_GIB=$PB_GPU_GIB PB_DEADLINE=$deadline"
[ "${PB_PIN_ENGINES:-0}" = 1 ] && knobs+=" PB_PIN_ENGINES=1"
[ "${PB_HOP_CPUS_EVERY:-0}" != 0 ] && knobs+=" PB_HOP_CPUS_EVERY=$PB_HOP_CPUS_EVERY"
[ "${PB_TIMERS:-0}" = 1 ] && knobs+=" PB_TIMERS=1" && export VLLM_SAMPLE_TOKENS_TIMING=1
gpu_each=()
if [ "${PB_GPU_PER_VARIANT:-0}" = 1 ]; then
  knobs+=" PB_GPU_PER_VARIANT=1"
  gpu_each=(--gpu-each "${CUDA_VISIBLE_DEVICES:-$(seq -s, 0 $(($(nvidia-smi -L | wc -l) - 1)))}")
fi
in_turn=()
[ "${PB_ENGINES_IN_TURN:-0}" = 1 ] && knobs+=" PB_ENGINES_IN_TURN=1" && in_turn=(--in-turn)
[ -n "${PB_PARALLEL:-}" ] && knobs+=" PB_PARALLEL='$PB_PARALLEL'"  # set by gpu_penalties_ab_parallel.sh
knobs+=" PB_RUNNER=$PB_RUNNER"
model=/tmp/pb-model shape=() entropy=()
if [ -n "${PB_MODEL_SHAPE:-}" ]; then
  model=/tmp/pb-$PB_MODEL_SHAPE shape=(--model-shape "$PB_MODEL_SHAPE")
  knobs+=" PB_MODEL_SHAPE=$PB_MODEL_SHAPE"
  python3 -m verify.gpu.shapes "$PB_MODEL_SHAPE" "$model" || exit 5
fi
[ -n "${PB_ENTROPY:-}" ] && entropy=(--target-entropy "$PB_ENTROPY") && knobs+=" PB_ENTROPY=$PB_ENTROPY"
if [ "${PB_PENALTY_CHECK:-0}" = 1 ]; then
  knobs+=" PB_PENALTY_CHECK=1" && export PATCHBENCH_PENALTY_CHECK=$OUT/gpu/$tag-penalty-check
fi
if [ "${PB_PENALTY_HISTORY:-0}" = 1 ]; then
  knobs+=" PB_PENALTY_HISTORY=1" && export PATCHBENCH_PENALTY_HISTORY=$OUT/gpu/$tag-penalty-history
fi
if [ "${PB_KEEP_TOKENS:-0}" = 1 ]; then
  knobs+=" PB_KEEP_TOKENS=1" && export PB_KEEP_TOKENS=$work/tokens
else
  unset PB_KEEP_TOKENS
fi
python3 -m verify.gpu.penalty_plan --variants "$PB_VARIANTS" --shapes "$PB_SHAPES" \
  --pristine-shapes "$PB_PRISTINE_SHAPES" --sampling "$PB_SAMPLING" --series "$PB_SERIES" \
  --gpu-gib "$PB_GPU_GIB" "${gpu_each[@]}" "${in_turn[@]}" "${shape[@]}" \
  $([ "$PB_SEEDED" = 0 ] && echo --unseeded) --out-args "$work/args" || exit 5
PYTHONPATH=$site:$PWD "$py" - "$overlay" "$work/meta.json" "$knobs bash scripts/gpu_penalties_ab.sh $tag" "$PB_SERIES" \
  "$PB_RUNNER" "${PB_MODEL_SHAPE:-qwen3-0.6b-random}" <<'PY' || exit 4
import json, sys; from pathlib import Path
from verify.gpu import device
overlay = Path(sys.argv[1])
if sys.argv[6] == "qwen3-0.6b-random":
    device.build_model()
device.build_sites(overlay, {"patched"} | ({"at-0010"} if sys.argv[4] == "at-0010" else set()))
Path(sys.argv[2]).write_text(json.dumps({
    "vllm_version": overlay.name,
    "series_hash": (overlay / "SERIES_HASH").read_text().strip(),
    "patch_hashes": json.loads((overlay / "PATCH_HASHES.json").read_text()),
    "command": sys.argv[3],
    "runner": {"V1": "V1 (VLLM_USE_V2_MODEL_RUNNER=0, VLLM_USE_FLASHINFER_SAMPLER=0)",
               "MRV2": "MRV2 (VLLM_USE_V2_MODEL_RUNNER=1)"}[sys.argv[5]],
    "model": sys.argv[6],
}))
PY
mapfile -t plan < "$work/args"
timeout -s INT -k 15 $((deadline - SECONDS + 5)) "$py" -m verify.ab engine --python "$py" \
  --model "$model" --base-site "$site" "${plan[@]}" "${entropy[@]}" \
  --rounds "$PB_ROUNDS" --budget-s $((deadline - SECONDS - 25)) --grace-s 20 --start-s 300 \
  --work "$work" --cache-root "${PB_CACHE_ROOT:-/tmp/pb-vllm-cache/penalties-ab}" --meta "$work/meta.json" \
  $([ "${PB_PIN_ENGINES:-0}" = 1 ] && echo --pin-cpus) --out "$OUT/gpu/$tag.json"
rc=$?
if [ "$rc" -ne 0 ]; then  # workers left behind if the driver was killed (own process groups)
  for pid in "$work"/*.pid; do kill -KILL -- "-$(cat "$pid")" 2>/dev/null; done
fi
for log in "$work"/*.log; do tail -n 40 "$log" > "$OUT/gpu/$tag-$(basename "$log")"; done
[ -d "$work/tokens" ] && tar czf "$OUT/gpu/$tag-tokens.tgz" -C "$work" tokens
if [ -n "${PATCHBENCH_PENALTY_CHECK:-}" ]; then  # one file per engine that kept a state
  found=("$PATCHBENCH_PENALTY_CHECK"/penalty-check-*.json)
  if [ "${#found[@]}" -eq 1 ] && [ -f "${found[0]}" ]; then
    mv "${found[0]}" "$OUT/gpu/$tag-findings.json" && rmdir "$PATCHBENCH_PENALTY_CHECK"
  else
    echo "penalty check: ${#found[@]} findings files in $PATCHBENCH_PENALTY_CHECK (expected 1)"
  fi
fi
if [ -n "${PATCHBENCH_PENALTY_HISTORY:-}" ]; then  # one file per engine that penalized
  for f in "$PATCHBENCH_PENALTY_HISTORY"/penalty-history-*.json; do
    [ -f "$f" ] && mv "$f" "$OUT/gpu/$tag-history-$(basename "$f" .json | cut -d- -f3).json"
  done
fi
echo "gpu_penalties_ab $tag: rc $rc"
exit $rc

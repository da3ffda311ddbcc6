#!/usr/bin/env bash
# The engine-level resolution proof in one device call (python -m verify.ab engine):
# three LLMs of the official bundle, started at once, measure one config (LLM.generate of B
# requests x L tokens: 32 random prompt tokens, ignore_eos, seeded per request) in rotating
# order until PB_DEADLINE s after the call started. Record -> $OUT/gpu/<TAG>.json (TAG engine-aa*:
# the importer reads results/gpu/<v>/engine-aa*.json into the record gpu-engine-resolution).
#   pristine, pristine2   the bundle twice: the A/A control (its CI must hold 1, within +-1%)
#   planted               pristine + PB_PLANT_MS of host sleep per Scheduler.schedule call
#                         (verify/ab/plant); each round predicts its slowdown from the seconds
#                         it slept (all on the critical path)
# Runner and async scheduling are the pin's defaults (MRV2 for Qwen3 on 0.22.0; the record's
# workers say which). Knobs: PB_DEADLINE=480 (s, engine start-up included), PB_SHAPE=64x1024
# (BxL; a round = 3 cells of ~5 s on the H100), PB_PLANT_MS=0.1, PB_SAMPLING=plain
# (temperature 1), greedy or a penalty A/B sampling (verify/gpu/penalty_plan.SAMPLINGS),
# PB_WARMUP=1 (rounds discarded), PB_ASYNC=default|0|1, PB_GPU_GIB=74.
# Production shape: PB_MODEL_SHAPE=qwen3-8b (verify/gpu/shapes.py; vLLM's dummy weights),
# PB_ENTROPY=1.0 (nats: the logit scale each engine calibrates first), PB_PLANT_GPU_US=100 (a GPU
# spin per step: the planted effect of a GPU-bound step, instead of PB_PLANT_MS), PB_PLANT_BOTH=1
# (the same delay on the host too), PB_PLANT_SPIN=1 (the host delay busy-waits, keeping the GIL),
# PB_RESTART_EVERY=K (every engine started afresh after K counted rounds; the intervals are then
# over these blocks, so an engine instance's own offset is inside them).
# A patch beside the controls: PB_PATCHES='only-0001' (overlay roots of the carried .gpu/overlay,
# packed with --only-patch / --at-patch; 'at-0005 at-0006' compares a patch with its base),
# PB_INPUT_LEN (prompt tokens; seed 000's workload: 2), PB_RUNNER=V1 (VLLM_USE_V2_MODEL_RUNNER=0).
# Needs the bundle installed (.gpu/a, then .gpu/b); an overlay only with PB_PATCHES (otherwise a
# carried .gpu/overlay of the same series only adds per-patch hashes to the record).
set -uo pipefail
tag=${1:?usage: gpu_engine_aa.sh TAG}
# vLLM: PB_SITE and PB_PYTHON (a runtime venv: `nox -s gpu-0.22.0` sets them), else the bundle
site=${PB_SITE:-/tmp/vllm-bundle/site} py=${PB_PYTHON:-python3}
[ -n "${PB_SITE:-}" ] || test -f "$site/.ready" || { echo "no vLLM bundle: install .gpu/a, .gpu/b"; exit 3; }
export PYTHONPATH=$site PATCHBENCH_VLLM_SITE=$site PYTHONUNBUFFERED=1
deadline=${PB_DEADLINE:-480}
OUT=${OUT:-/tmp/pb-out}
work=/root/pb-ab/$tag && rm -rf "$work" && mkdir -p "$work" "$OUT/gpu"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader  # GPU free at start?
: "${PB_SHAPE:=64x1024}" "${PB_PLANT_MS:=0.1}" "${PB_SAMPLING:=plain}" "${PB_WARMUP:=1}"
: "${PB_ASYNC:=default}" "${PB_GPU_GIB:=74}"
knobs="PB_SHAPE=$PB_SHAPE PB_PLANT_MS=$PB_PLANT_MS PB_SAMPLING=$PB_SAMPLING PB_WARMUP=$PB_WARMUP"
knobs+=" PB_ASYNC=$PB_ASYNC PB_GPU_GIB=$PB_GPU_GIB PB_DEADLINE=$deadline"
model=/tmp/pb-model shape=() entropy=() plant=()
if [ -n "${PB_MODEL_SHAPE:-}" ]; then
  model=/tmp/pb-$PB_MODEL_SHAPE shape=(--model-shape "$PB_MODEL_SHAPE")
  knobs+=" PB_MODEL_SHAPE=$PB_MODEL_SHAPE"
fi
[ -n "${PB_ENTROPY:-}" ] && entropy=(--target-entropy "$PB_ENTROPY") && knobs+=" PB_ENTROPY=$PB_ENTROPY"
[ -n "${PB_PLANT_GPU_US:-}" ] && plant=(--plant-gpu-us "$PB_PLANT_GPU_US") && knobs+=" PB_PLANT_GPU_US=$PB_PLANT_GPU_US"
[ "${PB_PLANT_BOTH:-0}" = 1 ] && plant+=(--plant-both) && knobs+=" PB_PLANT_BOTH=1"  # host and GPU
[ "${PB_PLANT_SPIN:-0}" = 1 ] && plant+=(--plant-spin) && knobs+=" PB_PLANT_SPIN=1"  # busy host wait
patches=()  # overlay roots measured beside the controls
for p in ${PB_PATCHES:-}; do patches+=(--patch "$p"); done
[ -n "${PB_PATCHES:-}" ] && knobs+=" PB_PATCHES='$PB_PATCHES'"
[ -n "${PB_INPUT_LEN:-}" ] && patches+=(--input-len "$PB_INPUT_LEN") && knobs+=" PB_INPUT_LEN=$PB_INPUT_LEN"
if [ "${PB_RUNNER:-}" = V1 ]; then
  export VLLM_USE_V2_MODEL_RUNNER=0 VLLM_USE_FLASHINFER_SAMPLER=0 && knobs+=" PB_RUNNER=V1"
fi
restart=()  # every engine afresh after K counted rounds: intervals over engine instances
[ -n "${PB_RESTART_EVERY:-}" ] && restart=(--restart-every "$PB_RESTART_EVERY") && knobs+=" PB_RESTART_EVERY=$PB_RESTART_EVERY"
PYTHONPATH=$site:$PWD "$py" -m verify.gpu.engine_aa --shape "$PB_SHAPE" --plant-ms "$PB_PLANT_MS" "${plant[@]}" \
  --sampling "$PB_SAMPLING" --async-scheduling "$PB_ASYNC" --gpu-gib "$PB_GPU_GIB" "${shape[@]}" \
  "${patches[@]}" --base-site "$site" \
  --command "$knobs bash scripts/gpu_engine_aa.sh $tag" --build-model \
  --out-args "$work/args" --meta "$work/meta.json" || exit 5
mapfile -t plan < "$work/args"
timeout -s INT -k 15 $((deadline - SECONDS + 5)) "$py" -m verify.ab engine --python "$py" \
  --model "$model" --base-site "$site" "${plan[@]}" "${entropy[@]}" "${restart[@]}" --rounds 400 \
  --warmup "$PB_WARMUP" --budget-s $((deadline - SECONDS - 25)) --grace-s 20 --start-s 300 \
  --work "$work" --cache-root /tmp/pb-vllm-cache/engine-aa --meta "$work/meta.json" \
  --out "$OUT/gpu/$tag.json"
rc=$?
if [ "$rc" -ne 0 ]; then  # a killed driver leaves its workers (each in its own process group)
  for pid in "$work"/*.pid; do kill -KILL -- "-$(cat "$pid")" 2>/dev/null; done
fi
for log in "$work"/*.log; do tail -n 40 "$log" > "$OUT/gpu/$tag-$(basename "$log")"; done
echo "gpu_engine_aa $tag: rc $rc"
exit $rc

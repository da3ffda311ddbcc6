#!/usr/bin/env bash
# One device call of the A/B core (python -m verify.ab serve): the A/A + planted-effect proof
# and one seed's serving A/B in one run. Servers on the H100, all alive, measured in rotating
# order until PB_DEADLINE s after the call started (record -> $OUT/gpu/<TAG>.json):
#   pristine, pristine2   the official bundle twice (the A/A control)
#   planted               pristine + a host delay of PB_PLANT_MS per engine step (verify/ab/plant)
#   only-NNNN             pristine + that patch alone (overlay packed with --only-patch NNNN), or
#   at-MMMM, at-NNNN      the series through the patch before it and through it (--at-patch), for
#                         a patch that does not apply alone (0006 needs 0002)
#   wheel                 the patched CUDA wheel, installed as its own bundle at /tmp/vllm-patched
#                         (nox -s wheel-0.22.0 -- --flavor cuda; make-bundle.py --wheel), if there
# Workloads (second argument), each on its pin's bundle and overlay (.gpu/overlay/<pin>):
#   mrv2   0.22.0, seed 000: MRV2 (the default runner for Qwen3), 128 prompts x 2 in / 512 out,
#          rate inf
#   ngram  0.22.0, seed 010: V1 runner, ngram speculative decoding (4 tokens), 4
#          requests at a time, 64 in / 512 out, temperature 1, on a model that repeats its last
#          token (so a draft is proposed at every step and the recovered-token kernel runs)
#   grit   0.18.1, seed 002: a random GritLM served with --runner pooling, 2000 GritLM
#          instruction prompts through /v1/embeddings at rate inf (100 warm-ups per run), judged
#          on request throughput; the 0.18.1 bundle installed with BUNDLE_ROOT=/tmp/vllm-0181
# Knobs: PB_CPUS (default: (nproc - 2) / servers): CPUs of its own per server (taskset; the driver and its benchmark
# client get the rest; 0: no pinning); PB_WHEEL=0 leaves the wheel out; PB_WORK (/root/pb-ab); PB_PLANT_MS (0.15, grit
# 2: a pooling run has few engine steps); PB_BUNDLE: the bundle root (default /tmp/vllm-bundle, grit /tmp/vllm-0181); PB_SERVE_EXTRA:
# more vllm serve arguments; grit retries with --enforce-eager if its servers fail to start
# (PB_EAGER_RETRY=0: no retry); PB_PLANT_SPIN=1: the planted host delay busy-waits instead of
# sleeping; PB_PLANT_GPU_US: the planted variant also spins the GPU that long per step. Production shape: PB_MODEL_SHAPE=qwen3-8b (verify/gpu/shapes.py,
# vLLM's dummy weights, with a word-level tokenizer) and PB_LOGIT_SCALE (the logit scale an
# engine run calibrated for the target entropy: its record's workers[*].output_entropy).
# Needs the pin's bundle installed (pieces a and b, one call each) and .gpu/overlay/<pin>.
set -uo pipefail
tag=${1:?usage: gpu_ab.sh TAG [mrv2|ngram|grit]}
workload=${2:-mrv2}
work=${PB_WORK:-/root/pb-ab}/$tag
version=0.22.0 bundle=${PB_BUNDLE:-/tmp/vllm-bundle} sites_root=/tmp/pb-sites
wheel_root=/tmp/vllm-patched plant_ms=0.15 plant_every=8 kind=plain dataset="" metric=()
case $workload in
  mrv2) sites="only-0001" model=/tmp/pb-model kv_gib=10
    serve="--max-model-len 4096"
    bench="--dataset-name random --ignore-eos --random-input-len 2 --random-output-len 512 --num-prompts 128 --request-rate inf" ;;
  ngram) sites="at-0005 at-0006" model=/tmp/pb-model-repeat kind=repeat kv_gib=3
    export VLLM_USE_V2_MODEL_RUNNER=0 VLLM_USE_FLASHINFER_SAMPLER=0
    serve="--max-model-len 2048 --speculative-config '{\"method\":\"ngram\",\"num_speculative_tokens\":4,\"prompt_lookup_max\":4,\"prompt_lookup_min\":2}'"
    bench="--dataset-name random --ignore-eos --random-input-len 64 --random-output-len 512 --num-prompts 16 --max-concurrency 4 --temperature 1.0" ;;
  grit) version=0.18.1 bundle=${PB_BUNDLE:-/tmp/vllm-0181} sites_root=/tmp/pb-sites-0.18.1
    wheel_root=/tmp/vllm-patched-0181 plant_ms=2 plant_every=1 kind=grit kv_gib=1
    sites="only-0001" model=/tmp/pb-grit-model dataset=$work/gritlm_bench.jsonl
    serve="--runner pooling --max-model-len 4000"
    bench="--backend openai-embeddings --endpoint /v1/embeddings --dataset-name custom --dataset-path $dataset --skip-chat-template --custom-output-len 1 --num-prompts 2000 --num-warmups 100 --request-rate inf"
    metric=(--metric request_throughput) ;;
  *) echo "unknown workload $workload (mrv2|ngram|grit)"; exit 2 ;;
esac
if [ -n "${PB_MODEL_SHAPE:-}" ] && [ "$kind" != plain ]; then
  echo "PB_MODEL_SHAPE: only the mrv2 workload runs a production shape ($workload needs its own model)"
  exit 2
fi
if [ -n "${PB_MODEL_SHAPE:-}" ]; then  # the shape on dummy weights, its whole-vocab tokenizer
  model=/tmp/pb-$PB_MODEL_SHAPE kind=shape serve+=" --load-format dummy"
  PYTHONPATH=. python3 -m verify.gpu.shapes "$PB_MODEL_SHAPE" "$model" --tokenizer || exit 5
fi
[ -n "${PB_LOGIT_SCALE:-}" ] && export PATCHBENCH_LOGIT_SCALE=$PB_LOGIT_SCALE
test -f "$bundle/site/.ready" || { echo "no vLLM $version bundle at $bundle: install its pieces a and b"; exit 3; }
overlay=$PWD/.gpu/overlay/$version
test -f "$overlay/SERIES_HASH" || { echo "no overlay $overlay: carry .gpu/overlay/$version"; exit 3; }
export PYTHONPATH=$bundle/site PYTHONUNBUFFERED=1
rm -rf "$work" && mkdir -p "$work" "$OUT/gpu"
python3 - "$overlay" "$work/meta.json" "$tag $workload" "$sites" "$model" "$kind" "$bundle/site" \
  "$sites_root" "$wheel_root/site" "$dataset" <<'PY' || exit 4
import json, os, sys; from pathlib import Path
from verify.gpu import device, gritlm
overlay, meta, args, sites, model, kind, bundle, sites_root, wheel, dataset = sys.argv[1:]
overlay, wheel = Path(overlay), Path(wheel)
if kind == "grit":
    device.build_grit_model(Path(model))
    gritlm.write_dataset(Path(dataset), 2000)
elif kind != "shape":  # a production shape's config and tokenizer are written already
    device.build_model(Path(model), repeat=kind == "repeat")
device.build_sites(overlay, set(sites.split()), Path(bundle), Path(sites_root))
marker = next(wheel.glob("vllm/_patchbench.json"), None)
Path(meta).write_text(json.dumps({
    "vllm_version": overlay.name,
    "series_hash": (overlay / "SERIES_HASH").read_text().strip(),
    "patch_hashes": json.loads((overlay / "PATCH_HASHES.json").read_text()),
    "command": f"bash scripts/gpu_ab.sh {args}",
    "workload": args.split()[1],
    "model": Path(model).name.removeprefix("pb-"),
    "logit_scale": os.environ.get("PATCHBENCH_LOGIT_SCALE"),
    "wheel": device.installed_wheel(wheel, overlay / "patched") if marker else None,
}))
PY
planted="plant,PATCHBENCH_PLANT_DELAY_MS=${PB_PLANT_MS:-$plant_ms},PATCHBENCH_PLANT_COUNT_EVERY=$plant_every"
[ "${PB_PLANT_SPIN:-0}" = 1 ] && planted+=",PATCHBENCH_PLANT_SPIN=1"  # a busy host wait (keeps the GIL)
[ -n "${PB_PLANT_GPU_US:-}" ] && planted+=",PATCHBENCH_PLANT_GPU_US=$PB_PLANT_GPU_US"  # and a GPU spin per step
variants=(--variant pristine= --variant pristine2= --variant "planted=$planted")
compare=(--compare pristine:pristine2 --compare pristine:planted)
for site in $sites; do variants+=(--variant "$site=$sites_root/$site"); done
case $sites in
  only-*) compare+=(--compare "pristine:$sites") ;;
  *) compare+=(--compare "${sites// /:}") ;;  # at-MMMM:at-NNNN: the patch on top of its base
esac
if test -f "$wheel_root/site/.ready" && test "${PB_WHEEL:-1}" = 1; then
  variants+=(--variant "wheel=$wheel_root/site") compare+=(--compare pristine:wheel)
fi
servers=$((${#variants[@]} / 2))
cpus=${PB_CPUS:-$((($(nproc) - 2) / servers))}
kv=$((kv_gib * 1024 * 1024 * 1024))
deadline=${PB_DEADLINE:-540}
ab() {  # one A/B attempt: $1 its work folder, $2 extra serve arguments
  timeout -s INT -k 20 $((deadline - SECONDS + 10)) python3 -m verify.ab serve \
    --model "$model" --base-site "$bundle/site" "${variants[@]}" "${compare[@]}" "${metric[@]}" \
    --serve-args "--gpu-memory-utilization 0.18 --kv-cache-memory-bytes $kv --seed 0 $serve $2" \
    --bench-args "$bench" \
    --cpus-per-server "$cpus" --rounds 400 --warmup 2 --budget-s $((deadline - SECONDS)) \
    --work "$1" --meta "$work/meta.json" --out "$OUT/gpu/$tag.json"
  rc=$?
  for log in "$1"/server-*.log; do
    [ -f "$log" ] && tail -n 30 "$log" > "$OUT/gpu/$tag-${3:-}$(basename "$log")"
  done
}
ab "$work" "${PB_SERVE_EXTRA:-}"
# grit: vLLM 0.18.1 was built for torch 2.10; if its servers fail to start on the image's torch
# 2.11 (e.g. in torch.compile), try once more without compilation while 4 minutes are left.
if [ "$rc" != 0 ] && [ "$kind" = grit ] && [ ! -f "$OUT/gpu/$tag.json" ] \
  && [ $((deadline - SECONDS)) -gt 240 ] && [ "${PB_EAGER_RETRY:-1}" = 1 ]; then
  echo "gpu_ab $tag: rc $rc; again with --enforce-eager ($((deadline - SECONDS)) s left)"
  ab "$work/eager" "${PB_SERVE_EXTRA:-} --enforce-eager" eager-
fi
echo "gpu_ab $tag: rc $rc"
exit $rc

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
# Workloads (second argument):
#   mrv2   seed 000: MRV2 (the default runner for Qwen3), 128 prompts x 2 in / 512 out, rate inf
#   ngram  seed 010 (issue 21): V1 runner, ngram speculative decoding (4 tokens), 4 requests at a
#          time, 64 in / 512 out, temperature 1, on a model that repeats its last token (so a
#          draft is proposed at every step and the recovered-token kernel runs at every step)
# Knobs: PB_CPUS (default: (nproc - 2) / servers): CPUs of its own per server (taskset; the driver and its benchmark
# client get the rest; 0: no pinning); PB_WHEEL=0 leaves the wheel out; PB_PLANT_MS (0.15).
# Needs .gpu/b installed in this call (after .gpu/a in the previous one) and .gpu/overlay.
set -uo pipefail
tag=${1:?usage: gpu_ab.sh TAG [mrv2|ngram]}
workload=${2:-mrv2}
test -f /tmp/vllm-bundle/site/.ready || { echo "no vLLM bundle: install .gpu/a, .gpu/b"; exit 3; }
export PYTHONPATH=/tmp/vllm-bundle/site PYTHONUNBUFFERED=1
work=/root/pb-ab/$tag && rm -rf "$work" && mkdir -p "$work" "$OUT/gpu"
overlay=$(ls -d "$PWD"/.gpu/overlay/*/ | head -1)
case $workload in
  mrv2) sites="only-0001" model=/tmp/pb-model repeat=0 kv_gib=10
    serve="--max-model-len 4096"
    bench="--random-input-len 2 --random-output-len 512 --num-prompts 128 --request-rate inf" ;;
  ngram) sites="at-0005 at-0006" model=/tmp/pb-model-repeat repeat=1 kv_gib=3
    export VLLM_USE_V2_MODEL_RUNNER=0 VLLM_USE_FLASHINFER_SAMPLER=0
    serve="--max-model-len 2048 --speculative-config '{\"method\":\"ngram\",\"num_speculative_tokens\":4,\"prompt_lookup_max\":4,\"prompt_lookup_min\":2}'"
    bench="--random-input-len 64 --random-output-len 512 --num-prompts 16 --max-concurrency 4 --temperature 1.0" ;;
  *) echo "unknown workload $workload (mrv2|ngram)"; exit 2 ;;
esac
python3 - "$overlay" "$work/meta.json" "$tag $workload" "$sites" "$model" "$repeat" <<'PY' || exit 4
import json, sys; from pathlib import Path
from verify.gpu import device
overlay, meta, args, sites, model, repeat = sys.argv[1:]
overlay = Path(overlay)
device.build_model(Path(model), repeat=repeat == "1")
device.build_sites(overlay, set(sites.split()))
wheel = Path("/tmp/vllm-patched/site")
marker = next(wheel.glob("vllm/_patchbench.json"), None)
Path(meta).write_text(json.dumps({
    "vllm_version": overlay.name,
    "series_hash": (overlay / "SERIES_HASH").read_text().strip(),
    "patch_hashes": json.loads((overlay / "PATCH_HASHES.json").read_text()),
    "command": f"bash scripts/gpu_ab.sh {args}",
    "workload": args.split()[1],
    "wheel": device.installed_wheel(wheel, overlay / "patched") if marker else None,
}))
PY
variants=(--variant pristine= --variant pristine2=
  --variant "planted=plant,PATCHBENCH_PLANT_DELAY_MS=${PB_PLANT_MS:-0.15}")
compare=(--compare pristine:pristine2 --compare pristine:planted)
for site in $sites; do variants+=(--variant "$site=/tmp/pb-sites/$site"); done
case $sites in
  only-*) compare+=(--compare "pristine:$sites") ;;
  *) compare+=(--compare "${sites// /:}") ;;  # at-MMMM:at-NNNN: the patch on top of its base
esac
if test -f /tmp/vllm-patched/site/.ready && test "${PB_WHEEL:-1}" = 1; then
  variants+=(--variant wheel=/tmp/vllm-patched/site) compare+=(--compare pristine:wheel)
fi
servers=$((${#variants[@]} / 2))
cpus=${PB_CPUS:-$((($(nproc) - 2) / servers))}
kv=$((kv_gib * 1024 * 1024 * 1024))
timeout -s INT -k 20 $((${PB_DEADLINE:-540} - SECONDS + 10)) python3 -m verify.ab serve \
  --model "$model" --base-site /tmp/vllm-bundle/site "${variants[@]}" "${compare[@]}" \
  --serve-args "--gpu-memory-utilization 0.18 --kv-cache-memory-bytes $kv --seed 0 $serve" \
  --bench-args "--dataset-name random --ignore-eos $bench" \
  --cpus-per-server "$cpus" --rounds 400 --warmup 2 --budget-s $((${PB_DEADLINE:-540} - SECONDS)) \
  --work "$work" --meta "$work/meta.json" --out "$OUT/gpu/$tag.json"
rc=$?
for log in "$work"/server-*.log; do tail -n 30 "$log" > "$OUT/gpu/$tag-$(basename "$log")"; done
echo "gpu_ab $tag: rc $rc"
exit $rc

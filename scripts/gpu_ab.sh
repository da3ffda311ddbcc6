#!/usr/bin/env bash
# One device call of the A/B core (python -m verify.ab serve): the A/A + planted-effect proof
# and seed 000's serving A/B in one run. Four servers on the H100 (pristine twice, pristine with
# a planted host delay of PB_PLANT_MS per engine step, only-0001 = pristine + patch 0001 alone,
# the MRV2 FP32-copy skip), 128 prompts x 2 in / 512 out per measurement (the seed's config),
# rounds in rotating order until PB_DEADLINE s after the call started. Needs .gpu/b installed in
# this call (after .gpu/a in the previous one) and .gpu/overlay carried, packed with
# `python -m verify.gpu_overlay 0.22.0 --only-patch 0001`. Record -> $OUT/gpu/<TAG>.json.
set -uo pipefail
tag=${1:?usage: gpu_ab.sh TAG}
test -f /tmp/vllm-bundle/site/.ready || { echo "no vLLM bundle: install .gpu/a, .gpu/b"; exit 3; }
export PYTHONPATH=/tmp/vllm-bundle/site PYTHONUNBUFFERED=1
work=/root/pb-ab/$tag && rm -rf "$work" && mkdir -p "$work" "$OUT/gpu"
overlay=$(ls -d "$PWD"/.gpu/overlay/*/ | head -1)
python3 - "$overlay" "$work/meta.json" "$tag" <<'PY' || exit 4
import json, sys; from pathlib import Path
from verify.gpu import device
overlay = Path(sys.argv[1])
device.build_model()
device.build_sites(overlay, {"only-0001"})
Path(sys.argv[2]).write_text(json.dumps({
    "vllm_version": overlay.name,
    "series_hash": (overlay / "SERIES_HASH").read_text().strip(),
    "patch_hashes": json.loads((overlay / "PATCH_HASHES.json").read_text()),
    "command": f"bash scripts/gpu_ab.sh {sys.argv[3]}",
}))
PY
kv=$((10 * 1024 * 1024 * 1024))
timeout -s INT -k 20 $((${PB_DEADLINE:-540} - SECONDS + 10)) python3 -m verify.ab serve \
  --model /tmp/pb-model --base-site /tmp/vllm-bundle/site \
  --variant pristine= --variant pristine2= \
  --variant "planted=plant,PATCHBENCH_PLANT_DELAY_MS=${PB_PLANT_MS:-0.5}" \
  --variant only-0001=/tmp/pb-sites/only-0001 \
  --compare pristine:pristine2 --compare pristine:planted --compare pristine:only-0001 \
  --serve-args "--gpu-memory-utilization 0.2 --kv-cache-memory-bytes $kv --max-model-len 4096 --seed 0" \
  --bench-args "--dataset-name random --random-input-len 2 --random-output-len 512 --num-prompts 128 --ignore-eos --request-rate inf" \
  --rounds 200 --warmup 2 --budget-s $((${PB_DEADLINE:-540} - SECONDS)) \
  --work "$work" --meta "$work/meta.json" --out "$OUT/gpu/$tag.json"
rc=$?
for log in "$work"/server-*.log; do tail -n 40 "$log" > "$OUT/gpu/$tag-$(basename "$log")"; done
echo "gpu_ab $tag: rc $rc"
exit $rc

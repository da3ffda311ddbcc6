#!/usr/bin/env bash
# The penalty-cost A/B on every GPU of a multi-GPU machine (4 GPUs of one host ...) in one
# device call: each job is one `gpu_penalties_ab.sh` run alone on its GPUs (CUDA_VISIBLE_DEVICES,
# the next free ones in job order), pinned to those GPUs' equal share of the CPU cores, with its
# own compile cache. A job takes one GPU, or one per variant with PB_GPU_PER_VARIANT=1 (B=256 or
# L=8160 beside the series on H100s, whose two engines do not fit one card). Each job is
# "TAG KNOB=VALUE ..." with gpu_penalties_ab.sh's knobs; the record names the job's GPU and
# cores (PB_PARALLEL). Each job asks for the model and its sites; the first builds them, the
# others wait for it (verify.locks.build_once). Job i's engines take their VLLM_PORT from
# 20000 + 1000 i up (verify.ab engine_ports: 100 each), so that engines started at once on
# one host never pick the same free port.
# Records -> $OUT/gpu/<TAG>.json; the jobs' output and engine log tails ->
# $OUT/gpu/logs-<first TAG>.tgz (a device call returns at most 8 files). PB_BUNDLE (default
# /tmp/vllm-bundle) and PB_LOGS (default /root/pb-ab/parallel) move the bundle and the logs.
#   bash scripts/gpu_penalties_ab_parallel.sh "b32-x PB_SHAPES=32x2048 PB_SEEDED=0" ...
set -uo pipefail
(($#)) || { echo "usage: gpu_penalties_ab_parallel.sh 'TAG KNOB=VALUE ...' ..."; exit 2; }
bundle=${PB_BUNDLE:-/tmp/vllm-bundle}  # where .gpu/a and .gpu/b installed it
test -f "$bundle/site/.ready" || { echo "no vLLM bundle: install .gpu/a, .gpu/b"; exit 3; }
gpus=$(nvidia-smi -L | wc -l)
job_gpus() {  # GPUs a job's knobs ask for: one per variant with PB_GPU_PER_VARIANT=1, else one
  (eval "export $1" >/dev/null && if [ "${PB_GPU_PER_VARIANT:-0}" = 1 ]; then
    set -- ${PB_VARIANTS:-series patched} && echo $#; else echo 1; fi)
}
need=0 && counts=()
for job in "$@"; do
  read -r tag knobs <<<"$job"
  n=$(job_gpus "$knobs") || { echo "job $tag: knobs a shell cannot read: $knobs"; exit 2; }
  counts+=("$n") && need=$((need + n))
done
((need <= gpus)) || { echo "$# jobs need $need GPUs; this machine has $gpus"; exit 2; }
OUT=${OUT:-/tmp/pb-out}
logs=${PB_LOGS:-/root/pb-ab/parallel} && rm -rf "$logs" && mkdir -p "$logs" "$OUT/gpu"
per=$(($(nproc) / gpus)) && pin=$(command -v taskset || true)
i=0 && first=0 && pids=() && tags=()
for job in "$@"; do
  read -r tag knobs <<<"$job"
  n=${counts[$i]} && on=$(seq -s, "$first" $((first + n - 1)))
  cpus="$((first * per))-$(((first + n) * per - 1))"
  note="GPU $on of $gpus, CPUs $cpus${pin:+ (taskset)}, beside $(($# - 1)) other jobs"
  (  # the knobs as a shell would read them: PB_SAMPLING='plain pen plain-topkp pen-topkp'
    eval "export $knobs" && export CUDA_VISIBLE_DEVICES=$on PB_PARALLEL="$note" \
      PB_CACHE_ROOT=/tmp/pb-vllm-cache/gpu$first OUT="$logs/$tag" VLLM_PORT=$((20000 + i * 1000))
    exec ${pin:+$pin -c $cpus} bash scripts/gpu_penalties_ab.sh "$tag"
  ) >"$logs/$tag.out" 2>&1 &
  pids+=($!) && tags+=("$tag") && i=$((i + 1)) && first=$((first + n))
  echo "job $tag: $note, knobs: $knobs"
done
rc=0
for k in "${!pids[@]}"; do
  wait "${pids[$k]}"; job_rc=$?
  echo "job ${tags[$k]}: rc $job_rc; $(tail -n 1 "$logs/${tags[$k]}.out")"
  ((job_rc == 0)) || rc=1
  cp "$logs/${tags[$k]}/gpu/${tags[$k]}.json" "$OUT/gpu/" 2>/dev/null
done
tar -C "$logs" -czf "$OUT/gpu/logs-${tags[0]}.tgz" .
exit $rc

#!/usr/bin/env bash
# Pack lm_eval for the GPU machine (no network there): .gpu/lmeval/site.tar.xz, ~6 MiB.
# Only the pure-python packages the GPU image lacks (its pandas, pyarrow, numpy, aiohttp,
# transformers, huggingface_hub, sacrebleu, scikit-learn ... are used as they are; see
# ../shared/gpu/gpu-image-freeze.txt), and lm_eval without its bundled task folders: the
# gsm8k task is a local YAML (verify/e2e/accuracy.py), passed with --include_path.
# On the GPU machine: tar xJf .gpu/lmeval/site.tar.xz -C /tmp/lmeval  (PYTHONPATH=/tmp/lmeval/site)
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pip download -q "lm_eval[api]==0.4.13" -d "$work/all"
pip download -q multiprocess==0.70.19 --python-version 3.12 --only-binary=:all: --no-deps -d "$work/py312"
pip wheel -q --no-deps -w "$work/built" "$work"/all/*.tar.gz "$work"/all/*.zip
mkdir -p "$work/site"
for name in chardet dataproperty datasets defusedxml dill evaluate lm_eval mbstrdecoder \
    more_itertools nltk pathvalidate pytablewriter pytz tabledata tcolorpy tenacity typepy; do
  unzip -q -o "$work"/all/"$name"-*.whl -d "$work/site"
done
for whl in "$work"/py312/*.whl "$work"/built/*.whl; do unzip -q -o "$whl" -d "$work/site"; done
find "$work/site/lm_eval/tasks" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
rm -f "$work"/site/*.dist-info/RECORD
mkdir -p .gpu/lmeval
tar -C "$work" -cJf .gpu/lmeval/site.tar.xz site
du -h .gpu/lmeval/site.tar.xz

"""Whole outputs kept by GPU engine runs (PB_KEEP_TOKENS), as a token control across runs.

results/gpu/<v>/raw/tokens-*.tar.xz hold one JSON file per distinct output, named
`<build>[-and-<build>...]-<sampling>-b<B>-l<L>.json` (the builds that gave it, the engine
config's name): one list of token ids per request, the requests in one order in every run of a
config. Runs of one build at the same batch and sampling but another length share the requests
(the same seeds and prompts), so their common prefix must agree if the build reproduces itself;
`disagreement` finds where it does not. An archive's optional `run.json` names the output
distribution its engines sampled from (`{"output_entropy": "1.00 nats"}`, as
`engine_runs.entropy_of` writes it); without it the logits were not scaled. Outputs of
different distributions are never compared.
"""

from __future__ import annotations

import functools
import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

from verify.importer import gpu
from verify.verdicts.identity import first_difference

#: An engine config's name, `<sampling>-b<batch>-l<length>` (verify.gpu.penalty_plan).
CONFIG = r"(?P<sampling>.+)-b(?P<batch>\d+)-l(?P<length>\d+)"
CONFIG_NAME = re.compile(f"^{CONFIG}$")
MEMBER = re.compile(rf"^(?P<builds>[a-z0-9]+(?:-and-[a-z0-9]+)*)-{CONFIG}$")


@dataclass(frozen=True)
class Kept:
    archive: str
    builds: tuple[str, ...]
    sampling: str
    batch: int
    length: int
    outputs: tuple[tuple[int, ...], ...]
    entropy: str | None = None


@functools.cache
def _read(path: Path, mtime: float) -> tuple[Kept, ...]:
    found = []
    with tarfile.open(path) as tar:
        meta = next((m for m in tar.getmembers() if Path(m.name).name == "run.json"), None)
        entropy = json.load(tar.extractfile(meta)).get("output_entropy") if meta else None
        for member in tar.getmembers():
            name = Path(member.name).name
            match = MEMBER.match(name.removesuffix(".json"))
            if not member.isfile() or not name.endswith(".json") or not match:
                continue
            outputs = json.load(tar.extractfile(member))
            found.append(
                Kept(path.name, tuple(match["builds"].split("-and-")), match["sampling"],
                     int(match["batch"]), int(match["length"]),
                     tuple(tuple(o) for o in outputs), entropy)
            )  # fmt: skip
    return tuple(found)


def load(version: str) -> list[Kept]:
    """Every kept output of `version`'s GPU runs."""
    paths = sorted((gpu.gpu_root() / version / "raw").glob("tokens-*.tar.xz"))
    return [k for p in paths for k in _read(p, p.stat().st_mtime)]


def disagreement(version: str, build: str, config: str, entropy: str | None = None) -> str | None:
    """Where two kept outputs of `build` at engine config `config`'s sampling and batch (any
    lengths) and output distribution (`entropy`; None: unscaled logits) differ on their common
    prefix, as text naming both runs, the request and the step; None if they agree, fewer
    than two were kept or `config` is no such name."""
    found = CONFIG_NAME.match(config)
    if found is None:
        return None
    key = (found["sampling"], int(found["batch"]), entropy)
    mine = [
        k for k in load(version) if build in k.builds and (k.sampling, k.batch, k.entropy) == key
    ]
    for i, a in enumerate(mine):
        for b in mine[i + 1 :]:
            for request, (x, y) in enumerate(zip(a.outputs, b.outputs, strict=True)):
                n = min(len(x), len(y))
                step = first_difference(x[:n], y[:n])
                if step is not None:
                    return (
                        f"{build} at L={a.length} ({a.archive}) and at L={b.length} "
                        f"({b.archive}) differ in request {request} from step {step} "
                        f"({x[step]} vs {y[step]})"
                    )
    return None

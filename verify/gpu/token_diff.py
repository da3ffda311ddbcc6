"""Where two kept batch outputs first differ (PB_KEEP_TOKENS files: one list of token ids per
request): the requests that differ, each one's first differing step, the two ids there and
whether the request had generated either before (a presence penalty would then apply to it).

    python -m verify.gpu.token_diff tokens-A.json tokens-B.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from verify.verdicts.identity import first_difference


def first_differences(a: list[list[int]], b: list[list[int]]) -> list[dict]:
    """One entry per request whose outputs differ, in request order."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} requests against {len(b)}: not the same batch")
    out = []
    for row, (x, y) in enumerate(zip(a, b, strict=True)):
        step = first_difference(x, y)
        if step is None:
            continue
        ids = [seq[step] if step < len(seq) else None for seq in (x, y)]
        seen = [i is not None and i in seq[:step] for i, seq in zip(ids, (x, y), strict=True)]
        out.append({"request": row, "step": step, "ids": ids, "seen_before": seen})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    a, b = (json.loads(p.read_text()) for p in (args.a, args.b))
    diffs = first_differences(a, b)
    print(f"{len(diffs)} of {len(a)} requests differ")
    for d in sorted(diffs, key=lambda d: d["step"]):
        print(
            f"request {d['request']}: first at step {d['step']}: {d['ids'][0]} vs {d['ids'][1]}"
            f" (generated before in that request: {d['seen_before'][0]} / {d['seen_before'][1]})"
        )
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())

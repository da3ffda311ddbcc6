"""Command line: `python -m verify <command> ...` (also installed as `patchbench`)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from verify import status as status_mod
from verify.buildtree import BuildTree
from verify.errors import PatchbenchError
from verify.progress import say
from verify.versions import PINNED, require_pinned

RESULTS = Path(__file__).resolve().parent.parent / "results"


def _apply(args: argparse.Namespace) -> int:
    started = time.monotonic()
    tree = BuildTree(require_pinned(args.version))
    patches = tree.apply(force=args.force)
    say(
        f"vLLM {args.version}: {len(patches)} patch(es) applied in {tree.path} "
        f"({time.monotonic() - started:.1f}s)"
    )
    return 0


def _check(args: argparse.Namespace) -> int:
    tree = BuildTree(require_pinned(args.version))
    if not args.no_apply:
        tree.apply()
    result = tree.check()
    if result.ok:
        say(f"patches/{args.version}/ is exactly what the build tree exports")
        return 0
    for line in result.differences:
        print(f"check: {line}", file=sys.stderr)
    say(f"patches/{args.version}/ is out of date: run `nox -s export-{args.version}`")
    return 1


def _export(args: argparse.Namespace) -> int:
    tree = BuildTree(require_pinned(args.version))
    patches = tree.export()
    say(f"exported {len(patches)} patch(es) to {tree.series_path}")
    return 0


def _status(args: argparse.Namespace) -> int:
    pins = tuple(args.pins or PINNED)
    for pin in pins:
        require_pinned(pin)
    rows = status_mod.compute(pins)
    print(status_mod.render(rows, pins))
    status_mod.write_json(rows, Path(args.json))
    say(f"wrote {args.json}")
    return 0


def _wheel(args: argparse.Namespace) -> int:
    from verify import wheel

    wheel.build(require_pinned(args.version), args.flavor, Path(args.out))
    return 0


def _report(args: argparse.Namespace) -> int:
    from verify import report

    index = report.build(require_pinned(args.version))
    say(f"wrote {index} and one report per patch beside it")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="patchbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("apply", help="pristine source -> build tree -> series applied")
    p.add_argument("version")
    p.add_argument("--force", action="store_true", help="discard build-tree commits not exported")
    p.set_defaults(func=_apply)
    p = sub.add_parser("check", help="fail if patches/<version>/ differs from the build tree")
    p.add_argument("version")
    p.add_argument("--no-apply", action="store_true", help="compare the build tree as it is")
    p.set_defaults(func=_check)
    p = sub.add_parser("export", help="regenerate patches/<version>/ from the build tree")
    p.add_argument("version")
    p.set_defaults(func=_export)
    p = sub.add_parser("status", help="every patch x every pinned version")
    p.add_argument("pins", nargs="*", help=f"pins to check (default: {' '.join(PINNED)})")
    p.add_argument("--json", default=str(RESULTS / "status.json"))
    p.set_defaults(func=_status)
    p = sub.add_parser("wheel", help="official wheel + the series' Python files, local version")
    p.add_argument("version")
    p.add_argument("--flavor", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--out", default="dist")
    p.set_defaults(func=_wheel)
    p = sub.add_parser("report", help="PR-ready report per patch from the recorded results")
    p.add_argument("version")
    p.set_defaults(func=_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except PatchbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; re-run the same command to resume", file=sys.stderr)
        return 130

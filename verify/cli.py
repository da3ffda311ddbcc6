"""Command line: `python -m verify <command> ...` (also installed as `patchbench`)."""

from __future__ import annotations

import argparse
import contextlib
import errno
import signal
import sys
import time
from pathlib import Path

import git

from verify import claims, locks, paths
from verify import status as status_mod
from verify.buildtree import BuildTree
from verify.errors import PatchbenchError
from verify.progress import say
from verify.series import read_series
from verify.versions import PINNED, require_pinned


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so every `finally` (staging folders) runs."""


def _on_sigterm(signum, frame) -> None:
    raise Terminated


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
    if args.no_apply:
        say(f"--no-apply: comparing the build tree {tree.path} as it is; nothing is applied")
    else:
        tree.apply()
    problems = claims.check_series(args.version, read_series(args.version))
    for line in problems:
        print(f"check: {line}", file=sys.stderr)
    result = tree.check()
    if result.ok:
        say(f"patches/{args.version}/ is exactly what the build tree exports")
        return 1 if problems else 0
    for line in result.differences:
        print(f"check: {line}", file=sys.stderr)
    changed = tree.changed_since_applied()
    if changed:
        say(
            f"patches/{args.version}/ changed since the build tree was applied from it "
            f"({', '.join(changed)}): run `python -m verify apply {args.version}` to take the "
            f"files, or `python -m verify export {args.version} --force` to overwrite them"
        )
    else:
        say(f"patches/{args.version}/ is out of date: run `nox -s export-{args.version}`")
    return 1


def _export(args: argparse.Namespace) -> int:
    tree = BuildTree(require_pinned(args.version))
    patches = tree.export(force=args.force)
    say(f"exported {len(patches)} patch(es) to {tree.series_path}")
    return 0


def _prune_backups(args: argparse.Namespace) -> int:
    tree = BuildTree(require_pinned(args.version))
    old, kept = tree.prune_backups(args.older_than, args.keep, args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    for name in old:
        say(f"{verb} {name}")
    say(f"{verb} {len(old)} backup branch(es) of {tree.path} made more than {args.older_than:g} "
        f"day(s) ago; kept {len(kept)}{': ' + ', '.join(kept) if kept else ''}")  # fmt: skip
    return 0


def _newest() -> int:
    """`status --newest`: the newest release on the index (one query), on stdout."""
    from verify import upstream_code
    from verify.versions import version_key

    newest = upstream_code.releases()[-1]
    pin = max(PINNED, key=version_key)
    newer = version_key(newest) > version_key(pin)
    print(newest)
    say(f"newest vLLM release on the index: {newest}; newest pin: {pin}"
        f"{' (a newer release: port the series to it)' if newer else ''}")  # fmt: skip
    return 0


def _status(args: argparse.Namespace) -> int:
    if args.newest:
        return _newest()
    pins = tuple(args.pins or PINNED)
    for pin in pins:
        require_pinned(pin)
    listing = claims.release_list()
    rows = status_mod.compute(pins, release_list=listing)
    if args.drift:
        if not listing:
            raise PatchbenchError("--drift needs vLLM's release list (the index, or its cache)")
        rows.drift = status_mod.drift_of(rows, listing)
    print(status_mod.render(rows, pins))
    out = Path(args.json) if args.json else paths.results_root() / "status.json"
    written = status_mod.write_json(rows, out)
    say(f"wrote {out}" if written else f"{out} unchanged (only its timestamp would differ)")
    findings = [
        line for pin in pins for line in claims.check_series(pin, read_series(pin))
    ] + claims.status_findings(rows)
    for line in findings:
        print(f"status: {line}", file=sys.stderr)
    return 1 if findings else 0


def _port_target(args: argparse.Namespace) -> str:
    """The version a `port` command works on: its second argument, or with --continue /
    --abort the one given or the only port in progress."""
    from verify import port

    if not (args.resume or args.abort):
        if len(args.versions) != 2:
            raise PatchbenchError("usage: port <from-pin> <to-version> (or --continue / --abort)")
        return args.versions[1]
    if args.versions:
        return args.versions[-1]
    found = port.in_progress(paths.build_root())
    if len(found) != 1:
        raise PatchbenchError(
            "no port is in progress" if not found else
            f"ports in progress into {', '.join(found)}: name one (`port --continue VERSION`)"
        )  # fmt: skip
    return found[0]


def _port(args: argparse.Namespace) -> int:
    from verify import port, upstream_code

    target = BuildTree(_port_target(args))
    if args.abort:
        port.abort(target)
        return 0
    try:
        if args.resume:
            state = port.load(target)
            source = BuildTree(state.source if state else target.version)
            return port.resume(source, target, upstream_code.releases)
        source = BuildTree(require_pinned(args.versions[0]))
        state = port.start(source, target, replace=args.replace)
        return port.run(source, target, state, upstream_code.releases)
    except KeyboardInterrupt:
        return 130


def _range_diff(args: argparse.Namespace) -> int:
    from verify import range_diff

    print(range_diff.range_diff(args.patch, args.pins, args.rev))
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


def _propose(args: argparse.Namespace) -> int:
    from verify import readiness

    return readiness.propose(args.version, args.patch)


def _ci_config(args: argparse.Namespace) -> int:
    from verify import ci_config

    root = paths.repo_root()
    differing = ci_config.write(root, check=args.check)
    if args.check and differing:
        for path in differing:
            print(f"ci-config: {path} differs from the generator's output", file=sys.stderr)
        say("run `python -m verify ci-config` and commit the result")
        return 1
    say(f"{'checked' if args.check else 'wrote'} {', '.join(map(str, differing)) or 'nothing'}"
        f" ({'all current' if not differing else 'regenerated'})")  # fmt: skip
    return 0


def _bad_input_docs(args: argparse.Namespace) -> int:
    from verify import bad_input

    current = bad_input.write(paths.repo_root(), check=args.check)
    if args.check and not current:
        say(f"{bad_input.DOC} is not current: run `python -m verify bad-input-docs`")
        return 1
    say(f"{bad_input.DOC} {'is current' if current else 'written'}")
    return 0


def _add_follow_commands(sub) -> None:
    """`port` and `range-diff`: following upstream."""
    p = sub.add_parser("port", help="carry a pin's series to another release (see verify/port.py)")
    p.add_argument(
        "versions",
        nargs="*",
        metavar="VERSION",
        help="<from-pin> <to-version>; with --continue / --abort: [to-version]",
    )
    p.add_argument(
        "--continue",
        dest="resume",
        action="store_true",
        help="take the resolution of the stopped patch and carry on",
    )
    p.add_argument(
        "--abort",
        action="store_true",
        help="restore the build tree and patches/<to>/ as they were before the port",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="port over an existing patches/<to>/ (--abort puts it back)",
    )
    p.set_defaults(func=_port)  # fmt: skip
    p = sub.add_parser("range-diff", help="git range-diff of a patch's versions or its ports")
    p.add_argument("patch", help="<pin>/<NNNN>, e.g. 0.22.0/0011")
    p.add_argument("--pins", nargs=2, metavar=("A", "B"), help="its ports on pins A and B")
    p.add_argument("--rev", help="its version committed at REV against the current file")
    p.set_defaults(func=_range_diff)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="patchbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("apply", help="pristine source -> build tree -> series applied")
    p.add_argument("version")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace build-tree commits not in the series (kept on a backup branch)",
    )
    p.set_defaults(func=_apply)
    p = sub.add_parser("check", help="fail if patches/<version>/ differs from the build tree")
    p.add_argument("version")
    p.add_argument(
        "--no-apply", action="store_true", help="compare the build tree as it is; never apply"
    )
    p.set_defaults(func=_check)
    p = sub.add_parser("export", help="regenerate patches/<version>/ from the build tree")
    p.add_argument("version")
    p.add_argument(
        "--force",
        action="store_true",
        help="overwrite patch files changed since apply, or empty the series",
    )
    p.set_defaults(func=_export)
    p = sub.add_parser("prune-backups", help="delete old patchbench-backup/* branches of a tree")
    p.add_argument("version")
    p.add_argument("--older-than", type=float, default=30.0, metavar="DAYS",
                   help="delete backups made more than DAYS ago (default 30)")  # fmt: skip
    p.add_argument("--keep", type=int, default=1, help="always keep the newest N (default 1)")
    p.add_argument("--dry-run", action="store_true", help="list what would be deleted")
    p.set_defaults(func=_prune_backups)
    p = sub.add_parser("status", help="every patch x every pinned version")
    p.add_argument("pins", nargs="*", help=f"pins to check (default: {' '.join(PINNED)})")
    p.add_argument("--json", help="where to write the JSON (default: <results>/status.json)")
    p.add_argument(
        "--drift",
        action="store_true",
        help="also: per patch, the later releases that changed the code it touches, "
        "the newest it applies to, whether upstream absorbed it (cached sdists)",
    )
    p.add_argument(
        "--newest",
        action="store_true",
        help="print the newest vLLM release on the index (one query) and stop",
    )
    p.set_defaults(func=_status)  # fmt: skip
    _add_follow_commands(sub)
    p = sub.add_parser("wheel", help="official wheel + the series' Python files, local version")
    p.add_argument("version")
    p.add_argument("--flavor", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--out", default="dist")
    p.set_defaults(func=_wheel)
    p = sub.add_parser("report", help="PR-ready report per patch from the recorded results")
    p.add_argument("version")
    p.set_defaults(func=_report)
    p = sub.add_parser(
        "propose",
        help="a patch's PR body on stdout (for gh pr create --body-file -), its readiness "
        "checklist on stderr; exit 0 only when ready",
    )
    p.add_argument("version")
    p.add_argument("patch", help="the patch's series number (0011, 11) or registry id")
    p.set_defaults(func=_propose)
    p = sub.add_parser("ci-config", help="generate the GitHub workflow and Buildkite pipeline")
    p.add_argument("--check", action="store_true", help="fail if the committed files differ")
    p.set_defaults(func=_ci_config)
    p = sub.add_parser("bad-input-docs", help="docs/bad-input.md from the tests that try them")
    p.add_argument("--check", action="store_true", help="fail if the committed file differs")
    p.set_defaults(func=_bad_input_docs)
    return parser


def _check_environment() -> None:
    """Named errors for unusable PATCHBENCH_* variables, before any command starts."""
    from verify import sdist, versions

    paths.check_environment()
    versions.require_pin_data()
    sdist.index_url()
    locks.lock_timeout()


LOCKED = ("apply", "check", "export", "wheel", "report", "prune-backups")


def _pin_lock(args: argparse.Namespace) -> contextlib.AbstractContextManager[None]:
    """The lock of the pin a command changes (its build tree, patches or records)."""
    if args.command == "port":
        return locks.pin_lock(_port_target(args))
    if args.command in LOCKED:
        return locks.pin_lock(require_pinned(args.version))
    return contextlib.nullcontext()


_NOT_WRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        _check_environment()
        with _pin_lock(args):
            return args.func(args)
    except PatchbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        hint = (
            "; make it writable or point PATCHBENCH_BUILD_DIR / PATCHBENCH_CACHE_DIR / "
            "PATCHBENCH_RESULTS_DIR / PATCHBENCH_REPORTS_DIR at a writable folder"
            if exc.errno in _NOT_WRITABLE
            else ""
        )
        print(f"error: cannot access{where}: {exc.strerror or exc}{hint}", file=sys.stderr)
        return 2
    except git.GitCommandError as exc:
        detail = (exc.stderr or str(exc)).strip().splitlines()
        print(f"error: git {exc.command[1] if len(exc.command) > 1 else ''} failed: "
              f"{detail[-1] if detail else exc}", file=sys.stderr)  # fmt: skip
        return 2
    except KeyboardInterrupt:
        print("interrupted; re-run the same command to resume", file=sys.stderr)
        return 130
    except Terminated:
        print("terminated (SIGTERM); staging folders were removed; re-run to resume",
              file=sys.stderr)  # fmt: skip
        return 143
    finally:
        signal.signal(signal.SIGTERM, previous)

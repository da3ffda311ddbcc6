"""Trailer claims about upstream releases (``Status: merged-in X``, ``Obsolete-in: X``),
checked where they are made: the release X must exist on the package index.

The release list is the index's (`verify.upstream_code.releases`: read through
`verify.sdist`'s index, cached on disk for offline use) and is read once per process. Whether
release X's code contains the change is `verify.status`'s business (it needs X's sdist);
`status_findings` turns its disagreements into one-line findings.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from verify import sdist, upstream_code
from verify.errors import PatchbenchError
from verify.progress import say
from verify.series import Patch
from verify.versions import version_key

_LISTS: dict[str, list[str] | None] = {}


@dataclass(frozen=True)
class Claim:
    """One trailer of one patch that names a release."""

    where: str  # e.g. "patches/0.22.0/0003-....patch"
    trailer: str  # the trailer as written, e.g. "Status: merged-in 0.29.0"
    release: str


def claims_of(version: str, patches: Iterable[Patch]) -> list[Claim]:
    """The release-naming trailers of the series `patches` of pin `version`."""
    found = []
    for patch in patches:
        where = f"patches/{version}/{patch.name}"
        if patch.merged_in:
            found.append(Claim(where, f"Status: {patch.status}", patch.merged_in))
        if patch.obsolete_in:
            found.append(Claim(where, f"Obsolete-in: {patch.obsolete_in}", patch.obsolete_in))
    return found


def release_list(index: str | None = None) -> list[str] | None:
    """vLLM's releases on the index (cached), or None with a warning when it cannot be read."""
    url = index or sdist.index_url()
    if url not in _LISTS:
        try:
            _LISTS[url] = upstream_code.releases(url)
        except (PatchbenchError, OSError, ValueError) as exc:
            say(
                f"warning: cannot read vLLM's releases from the package index {url} ({exc}) "
                "and no cached list: the releases named by Status: merged-in / Obsolete-in "
                "trailers were not checked"
            )
            _LISTS[url] = None
    return _LISTS[url]


def missing_releases(claims: Iterable[Claim], releases: list[str]) -> list[str]:
    """One line per claim whose release is not on the index."""
    known = set(releases)
    newest = releases[-1] if releases else "none"
    return [
        f"{c.where}: '{c.trailer}' names vLLM {c.release}, which is not a release on the "
        f"package index (newest there: {newest}); name the release that shipped the change"
        for c in claims
        if c.release not in known
    ]


def check_series(version: str, patches: Iterable[Patch], index: str | None = None) -> list[str]:
    """One-line errors for the series' trailers naming a release the index does not have
    (none, after a warning, when the index cannot be read)."""
    claims = claims_of(version, patches)
    if not claims:
        return []
    releases = release_list(index)
    return [] if releases is None else missing_releases(claims, releases)


def status_findings(rows: Iterable) -> list[str]:
    """One line per `verify.status.Row` whose claim the released code contradicts: another
    first release, or no searched release containing the change."""
    out = []
    for row in rows:
        claim = row.claim
        if not claim or claim["agrees"]:
            continue
        claimed, first, last = claim["claimed"], claim["first_containing"], claim["searched_up_to"]
        kind = "Status: merged-in" if row.status.startswith("merged-in") else "Obsolete-in"
        if first:
            out.append(
                f"{row.ident}: '{kind} {claimed}', but the first release whose code contains "
                f"the change is {first}"
            )
        elif version_key(claimed) <= version_key(last):
            out.append(
                f"{row.ident}: '{kind} {claimed}', but no release up to {last} contains the "
                "change in its code"
            )
    return out

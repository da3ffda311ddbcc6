"""Identity with a control: pristine is first compared with itself (two engine starts, or two
runs); only when the control agrees does a pristine/patched difference mean the patch changed
the output. GPU engines are not reproducible across starts by default, so:

- control differs                      -> inconclusive (whatever the A/B showed)
- control agrees, A/B differs          -> fail
- control agrees, A/B identical        -> pass
- no control, A/B identical            -> pass (a difference was not seen; noted)
- no control, A/B differs              -> inconclusive (nondeterminism cannot be told apart)
"""

from __future__ import annotations

from verify.verdicts import FAIL, INCONCLUSIVE, PASS, Verdict


def judge(identical: bool, control_identical: bool | None, what: str = "tokens") -> Verdict:
    """`identical`: pristine vs patched; `control_identical`: pristine vs pristine (None: no
    control was run)."""
    if control_identical is False:
        return Verdict(
            INCONCLUSIVE, f"pristine's {what} differ from pristine's own (control failed)"
        )
    if control_identical is None:
        if identical:
            return Verdict(PASS, f"{what} identical (no pristine-vs-pristine control recorded)")
        return Verdict(
            INCONCLUSIVE,
            f"pristine and patched {what} differ and no pristine-vs-pristine control was run, "
            "so engine nondeterminism cannot be ruled out",
        )
    if identical:
        return Verdict(PASS)
    return Verdict(FAIL, f"patched {what} differ from pristine while pristine agrees with itself")

"""The GPU tier's import roots: the bundle is checked against the pristine files first, and a
variant's root is the bundle with that variant's overlay files (rebuilt when they change)."""

import pytest

from verify.gpu import device


@pytest.fixture
def roots(tmp_path, monkeypatch):
    bundle = tmp_path / "bundle"
    (bundle / "vllm").mkdir(parents=True)
    (bundle / "vllm" / "a.py").write_text("pristine a\n")
    (bundle / "vllm" / "b.py").write_text("pristine b\n")
    overlay = tmp_path / "overlay"
    for variant, text in (("pristine", "pristine a\n"), ("only-0001", "patched a\n")):
        (overlay / variant / "vllm").mkdir(parents=True)
        (overlay / variant / "vllm" / "a.py").write_text(text)
    monkeypatch.setattr(device, "BUNDLE", bundle)
    monkeypatch.setattr(device, "SITES", tmp_path / "sites")
    return bundle, overlay


def test_variant_root_is_the_bundle_with_its_files_overlaid(roots):
    bundle, overlay = roots
    info = device.build_sites(overlay, {"pristine", "only-0001"})
    site = device.site_of("only-0001")
    assert info["overlaid_files"] == {"only-0001": ["vllm/a.py"]}
    assert (site / "vllm" / "a.py").read_text() == "patched a\n"
    assert (site / "vllm" / "b.py").read_text() == "pristine b\n"
    assert device.site_of("pristine") == bundle
    (overlay / "only-0001" / "vllm" / "c.py").write_text("new\n")
    device.build_sites(overlay, {"only-0001"})
    assert (site / "vllm" / "c.py").read_text() == "new\n"


def test_a_bundle_that_is_not_the_pristine_sdist_is_refused(roots):
    bundle, overlay = roots
    (bundle / "vllm" / "a.py").write_text("something else\n")
    with pytest.raises(SystemExit, match="bundle files differ from the pristine sdist"):
        device.build_sites(overlay, {"only-0001"})


def test_a_second_pins_bundle_gets_roots_of_its_own(roots, tmp_path):
    """0.18.1's bundle beside 0.22.0's: its roots are made from it, in their own folder."""
    _, overlay = roots
    other = tmp_path / "bundle-0.18.1"
    (other / "vllm").mkdir(parents=True)
    (other / "vllm" / "a.py").write_text("pristine a\n")
    (other / "vllm" / "only-here.py").write_text("0.18.1\n")
    sites = tmp_path / "sites-0.18.1"
    device.build_sites(overlay, {"only-0001"}, other, sites)
    assert (sites / "only-0001" / "vllm" / "only-here.py").read_text() == "0.18.1\n"
    assert (sites / "only-0001" / "vllm" / "a.py").read_text() == "patched a\n"
    assert not (tmp_path / "sites").exists()

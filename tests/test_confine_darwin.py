"""The confinement's SBPL (``platforms/darwin/confine_profile.py``): golden profiles and structure.

sandbox-exec cannot run here; the profiles are compared with golden files (regenerate with
``SANDBOX_SHIM_UPDATE_GOLDEN=1``) and checked for the rules the options promise.  The resolver is
the macOS-like stand-in of ``test_seatbelt.py``.
"""

from __future__ import annotations

import re

import pytest
from sandbox_shim.platforms.darwin import confine_profile
from test_seatbelt import _balanced, check_golden, mac_resolve

RO = ["/usr/lib", "/System/Library", "/Users/u/.nvm/versions/node/v20.0.0/bin/node"]
RW = ["/Users/u/work", "/tmp/sandbox-shim-tmp-x"]
ISLANDS = ["/Users/u/work/.git/hooks", "/Users/u/work/.git/config", "/Users/u/work/vendor"]


def build(port: int | None) -> confine_profile.Profile:
    return confine_profile.build(
        RO, RW, deny=["/Users/u"], islands=ISLANDS, proxy_port=port, resolve=mac_resolve
    )


@pytest.mark.parametrize("name,port", [("confine_open_egress.sb", None), ("confine_allow_list.sb", 3128)])
def test_golden(name: str, port: int | None) -> None:
    check_golden(name, build(port).text)


def test_islands_come_after_the_grants_and_egress_is_only_the_proxy() -> None:
    prof = build(3128)
    text = prof.text
    assert _balanced(text)
    assert text.index('(subpath (param "RW_0"))') < text.index('(subpath (param "ISLAND_0"))')
    assert "(deny file-write*" in text.split("; read-only islands", 1)[1]
    assert "(allow network*)" not in text
    assert '(allow network-outbound (remote ip "localhost:3128"))' in text
    assert prof.params["XRW_0"] == "/private/tmp/sandbox-shim-tmp-x"  # the per-confinement TMPDIR
    assert [prof.params[f"ISLAND_{i}"] for i in range(3)] == ISLANDS
    used = set(re.findall(r'\(param "([A-Z_0-9]+)"\)', text))
    assert used == set(prof.params)
    for p in prof.params.values():
        assert f'"{p}"' not in text


def test_open_egress_without_allow_list() -> None:
    assert "(allow network*)" in build(None).text


def test_bad_port() -> None:
    with pytest.raises(ValueError, match="out of range"):
        build(70000)


def test_anchors_are_literal_denials_after_the_islands() -> None:
    prof = confine_profile.build(
        RO,
        RW,
        deny=["/Users/u"],
        islands=["/Users/u/proj/.git/hooks"],
        anchors=["/Users/u/proj/.git"],
        resolve=lambda p: p,
    )
    text = prof.text
    assert text.index("; read-only islands") < text.index("; the islands' parent directories")
    assert '(literal (param "ANCHOR_0"))' in text and prof.params["ANCHOR_0"] == "/Users/u/proj/.git"
    plain = confine_profile.build(RO, RW, deny=["/Users/u"], resolve=lambda p: p).text
    assert "ANCHOR" not in plain  # control: no anchors, no such rule

"""The SBPL builder: golden profiles and structural checks here; real ``sandbox-exec`` runs on macOS only.

macOS behaviour cannot run on this host, so the resolver that maps ``/tmp`` to ``/private/tmp`` is
a stand-in for macOS's own (the one stand-in these tests use); the real runs are marked ``darwin``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_shim.platforms.darwin import seatbelt

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("SANDBOX_SHIM_UPDATE_GOLDEN") == "1"


def mac_resolve(p: str) -> str:
    """macOS's root symlinks (/tmp, /var, /etc -> /private/...), then normalisation."""
    for top in ("/tmp", "/var", "/etc"):
        if p == top or p.startswith(top + "/"):
            p = "/private" + p
    return os.path.normpath(p)


def confine_like() -> seatbelt.Profile:
    return seatbelt.build_profile(
        ["/usr/lib", "/System/Library", "/opt/homebrew/Cellar/python@3.12/3.12.1"],
        ["/tmp/tenants/a"],
        network=True,
        deny=["/tmp/tenants"],
        extra_read_write=["/var/shared/cache"],
        resolve=mac_resolve,
    )


def tenant_like() -> seatbelt.Profile:
    return seatbelt.build_profile(
        ["/usr/lib", "/bin"], ["/Users/shim/bundles/b/storage"], network=False, resolve=mac_resolve
    )


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert path.is_file(), f"missing golden file {path}; run with SANDBOX_SHIM_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"profile differs from {path}"


@pytest.mark.parametrize(
    "name,build", [("confine_network.sb", confine_like), ("tenant_nonet.sb", tenant_like)]
)
def test_golden(name: str, build: object) -> None:
    check_golden(name, build().text)  # type: ignore[operator]


def _balanced(text: str) -> bool:
    depth = 0
    body = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    body = "\n".join(line.split(";", 1)[0] for line in body.splitlines())
    for ch in body:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def test_structure_deny_default_params_and_order() -> None:
    prof = confine_like()
    lines = prof.text.splitlines()
    assert lines[:2] == ["(version 1)", "(deny default)"]
    assert _balanced(prof.text)
    # no host path from the inputs is pasted into the text: every one is a -D parameter
    for p in prof.params.values():
        assert f'"{p}"' not in prof.text
    used = set(re.findall(r'\(param "([A-Z_0-9]+)"\)', prof.text))
    assert used == set(prof.params)
    # every path resolved: /tmp and /var are /private/... on macOS
    assert prof.params["RW_0"] == "/private/tmp/tenants/a"
    assert prof.params["DENY_0"] == "/private/tmp/tenants"
    assert prof.params["XRW_0"] == "/private/var/shared/cache"
    assert all(v.startswith("/") and not v.startswith(("/tmp", "/var/")) for v in prof.params.values())
    # later rules win: read-only, then the blanket deny, then read-write, then the extra subpaths
    pos = {k: prof.text.index(f'(param "{k}")') for k in ("RO_0", "DENY_0", "RW_0", "XRW_0")}
    assert pos["RO_0"] < pos["DENY_0"] < pos["RW_0"] < pos["XRW_0"]
    rule_of = {k: prof.text[: pos[k]].rsplit("\n(", 1)[1].split("\n", 1)[0] for k in pos}
    assert rule_of == {
        "RO_0": "allow file-read*",
        "DENY_0": "deny file-read* file-write*",
        "RW_0": "allow file-read* file-write*",
        "XRW_0": "allow file-read* file-write*",
    }
    assert "(allow network*)" in prof.text
    # the parent of the permitted path is denied, so its metadata grant (an ancestor) is overridden
    meta = {v for k, v in prof.params.items() if k.startswith("META_")}
    assert "/private/tmp" in meta and "/private/tmp/tenants" in meta


def test_network_flag_and_no_extras() -> None:
    prof = tenant_like()
    assert "network" not in prof.text
    assert "DENY_" not in prof.text and "XRW_" not in prof.text
    assert prof.params["RW_0"] == "/Users/shim/bundles/b/storage"


def test_define_args_and_argv() -> None:
    prof = tenant_like()
    argv = seatbelt.sandbox_exec_argv(prof, "/bin/echo", ["hi"])
    assert argv[:3] == ["/usr/bin/sandbox-exec", "-p", prof.text]
    d = argv[3:-2]
    assert d[0::2] == ["-D"] * len(prof.params)
    assert d[1::2] == [f"{k}={v}" for k, v in prof.params.items()]
    assert argv[-2:] == ["/bin/echo", "hi"]


@pytest.mark.parametrize("bad", ["relative/path", "/with\nnewline", "/nul\0byte"])
def test_bad_paths_rejected(bad: str) -> None:
    with pytest.raises(ValueError):
        seatbelt.build_profile([bad], [], network=False)


def test_paths_with_sbpl_syntax_stay_data() -> None:
    evil = '/tmp/x") (allow file-read* (subpath "/'
    prof = seatbelt.build_profile([], [evil], network=False, resolve=mac_resolve)
    assert 'allow file-read* (subpath "/' not in prof.text
    assert prof.params["RW_0"] == mac_resolve(evil)


def test_default_resolver_is_realpath(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    prof = seatbelt.build_profile([], [str(tmp_path / "link")], network=False)
    assert prof.params["RW_0"] == str(real.resolve())


darwin = pytest.mark.skipif(
    sys.platform != "darwin", reason="needs macOS sandbox-exec; this host is " + sys.platform
)


@pytest.mark.darwin
@darwin
def test_real_profile_compiles_and_confines(tmp_path: Path) -> None:  # pragma: no cover (macOS)
    from sandbox_shim.hardening.confinement import confine

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "mine").write_text("mine")
    (b / "secret").write_text("secret")
    spec = confine(("/bin/cat", [str(a / "mine")]), permit_path=str(a))
    r = subprocess.run(
        [spec["cmd"], *spec["args"]], env=spec["env"], cwd=spec["cd"], capture_output=True, text=True
    )
    assert (r.returncode, r.stdout) == (0, "mine")
    spec = confine(("/bin/cat", [str(b / "secret")]), permit_path=str(a))
    r = subprocess.run(
        [spec["cmd"], *spec["args"]], env=spec["env"], cwd=spec["cd"], capture_output=True, text=True
    )
    assert r.returncode != 0 and "secret" not in r.stdout
    assert "Operation not permitted" in r.stderr

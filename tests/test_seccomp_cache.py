"""The seccomp program cache (``platforms/linux/seccomp_cache.py``): one entry per input and host.

Each key part is changed on its own and must make the entry compiled for the old key unreachable
(a planted, different program under the old key is never served for the new inputs); a whole entry
is served byte for byte without compiling; a damaged one is a miss; and reading an entry, like
validating a bundle's section, loads no pyseccomp (whose import runs ``ldconfig -p``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

if not sys.platform.startswith("linux"):
    pytest.skip("seccomp is Linux only", allow_module_level=True)
pytest.importorskip("pyseccomp")

from sandbox_shim.platforms.linux import seccomp_cache as sc  # noqa: E402

BUNDLE: dict[str, Any] = {
    "defaultAction": "SCMP_ACT_ALLOW",
    "syscalls": [{"names": ["getpid"], "action": "SCMP_ACT_ERRNO"}],
}
PLANTED = [b"\x06\x00\x00\x00\x00\x00\xff\x7f"]  # RET ALLOW: what a stale entry would hand out


def plan(nested: bool = False, section: dict[str, Any] | None = None) -> Any:
    return SimpleNamespace(allow_nested_userns=nested, seccomp=section)


def test_an_entry_is_served_without_compiling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = plan(section=BUNDLE)
    first = sc.programs(p, str(tmp_path / "cache"))
    assert oct((tmp_path / "cache").stat().st_mode & 0o777) == "0o700"
    tmp_path = tmp_path / "cache"
    assert first == sc.compile_programs(p) and len(first) >= 2  # tenant filter + the bundle's
    monkeypatch.setattr(sc, "compile_programs", lambda _p: pytest.fail("compiled although cached"))
    assert sc.programs(p, str(tmp_path)) == first
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []  # atomic: no temp file left


HOST_CHANGES = {"arch": "aarch64", "kernel": "6.1.0 #1 SMP", "libseccomp": "2.6.0", "binding": "0" * 64}


@pytest.mark.parametrize("part", ["rules", "nested", "bundle", *HOST_CHANGES])
def test_each_key_part_makes_a_new_entry(part: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Control: the planted entry IS served under its own key (so the probe can see a stale answer);
    then, with ``part`` changed, it is not, and the programs are compiled afresh."""
    base = plan(section=BUNDLE)
    old = sc.cache_key(sc.inputs_for(base))
    sc.store(str(tmp_path), old, PLANTED)
    assert sc.programs(base, str(tmp_path)) == PLANTED  # the control
    p = base
    if part == "rules":
        monkeypatch.setattr(sc, "rules_digest", lambda: "f" * 64)
    elif part == "nested":
        p = plan(nested=True, section=BUNDLE)
    elif part == "bundle":
        p = plan(section={**BUNDLE, "syscalls": [{"names": ["getppid"], "action": "SCMP_ACT_ERRNO"}]})
    else:
        real = sc.host_facts
        monkeypatch.setattr(sc, "host_facts", lambda: {**real(), part: HOST_CHANGES[part]})
    new = sc.cache_key(sc.inputs_for(p))
    assert new != old
    compiled: list[Any] = []
    monkeypatch.setattr(sc, "compile_programs", lambda q: compiled.append(q) or [b"\0" * 8])
    assert sc.programs(p, str(tmp_path)) == [b"\0" * 8]
    assert compiled == [p]


def test_the_rules_digest_covers_the_filter_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "seccomp.py"
    src.write_text("DENY = ['keyctl']\n")
    (tmp_path / "seccomp_cache.py").write_text("")
    monkeypatch.setattr(sc, "__file__", str(tmp_path / "seccomp_cache.py"))
    one = sc.rules_digest()
    src.write_text("DENY = []\n")
    assert sc.rules_digest() != one


def test_the_host_facts_are_this_hosts() -> None:
    facts = sc.host_facts()
    u = os.uname()
    assert facts["arch"] == u.machine and u.release in facts["kernel"]
    import pyseccomp
    from sandbox_shim.platforms.linux.kernel_probes import libseccomp_version

    assert facts["libseccomp"] == libseccomp_version()
    assert facts["binding"] == sc._digest_file(pyseccomp.__file__)


@pytest.mark.parametrize("damage", ["truncate", "flip", "magic", "empty"])
def test_a_damaged_entry_is_a_miss(damage: str, tmp_path: Path) -> None:
    p = plan()
    key = sc.cache_key(sc.inputs_for(p))
    sc.store(str(tmp_path), key, PLANTED)
    f = tmp_path / key
    data = f.read_bytes()
    f.write_bytes(
        {
            "truncate": data[:-3],
            "flip": data[:-1] + bytes([data[-1] ^ 1]),
            "magic": b"x" + data[1:],
            "empty": b"",
        }[damage]
    )
    assert sc.programs(p, str(tmp_path)) == sc.compile_programs(p)


def test_a_symlinked_entry_is_not_followed(tmp_path: Path) -> None:
    p = plan()
    key = sc.cache_key(sc.inputs_for(p))
    other = tmp_path / "elsewhere"
    other.write_bytes(sc.encode(PLANTED))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / key).symlink_to(other)
    assert sc.programs(p, str(tmp_path / "cache")) != PLANTED


def test_a_cached_create_path_and_validation_load_no_pyseccomp(tmp_path: Path) -> None:
    sc.programs(plan(section=BUNDLE), str(tmp_path))
    code = (
        "import sys; from types import SimpleNamespace as N\n"
        "from sandbox_shim.platforms.linux import seccomp, seccomp_cache as sc\n"
        f"b = {BUNDLE!r}\n"
        "assert seccomp.validate(b) == []\n"
        f"progs = sc.programs(N(allow_nested_userns=False, seccomp=b), {str(tmp_path)!r})\n"
        "print(len(progs), 'pyseccomp' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    n, loaded = out.stdout.split()
    assert int(n) >= 2 and loaded == "False", out.stdout


def test_the_key_text_is_jsons_canonical_form() -> None:
    """``canonical`` (no ``json`` import on create's path) writes what ``json.dumps(sort_keys=True,
    separators=(",", ":"))`` writes, so the key is the same function of the inputs as before; a value
    of another type is refused, never keyed by its repr."""
    import hashlib
    import json

    section = {
        "defaultAction": "SCMP_ACT_ERRNO",
        "architectures": ["SCMP_ARCH_X86_64"],
        "syscalls": [
            {"names": ["ptrace", "é\u2028"], "action": "SCMP_ACT_ALLOW", "args": [{"value": 2**40}]}
        ],
        "z": None,
        "a": [True, False, 1.5, -0.0, '\x00\n"\\'],
    }
    inputs = {"rules": "r", "nested": False, "bundle": section, "arch": "x86_64", "kernel": "6 #1"}
    assert sc.canonical(inputs) == json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    want = hashlib.sha256(json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert sc.cache_key(inputs) == want
    with pytest.raises(TypeError):
        sc.canonical({"bundle": object()})
    with pytest.raises(TypeError):
        sc.canonical({1: "x"})

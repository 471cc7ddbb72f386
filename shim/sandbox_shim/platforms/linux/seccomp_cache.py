"""The sandbox's seccomp programs, compiled once per input and host and then read from the state root.

Compiling the tenant filter loads pyseccomp (whose import runs ``ldconfig -p`` twice) and libseccomp's
rule database on every ``create``; the program it yields depends only on the inputs below, so it is
stored under ``ROOT/.seccomp/KEY`` and read back (a few microseconds) while the key is the same.

The key is the SHA-256 of, as canonical JSON:

* ``rules``: the source of the modules that define the filter and how the programs are composed
  (``seccomp.py``, this module), so a changed rule or compile step is a new key;
* ``nested``: the plan's ``allow_nested_userns`` (the tenant filter without its namespace rules);
* ``bundle``: the bundle's own ``linux.seccomp`` section (stacked on the tenant filter), or null;
* ``arch``: the machine (uname(2) ``machine``): syscall numbers and ABIs differ per architecture;
* ``libseccomp``: the loaded library's version (seccomp_version(3)), which names the syscalls it
  resolves and generates the program;
* ``binding``: the digest of the pyseccomp module that drives it;
* ``kernel``: uname(2) ``release`` and ``version``: libseccomp's API level and the numbered denials
  depend on what the running kernel offers.

An entry is written atomically (a temporary file in the same directory, then rename(2)), carries the
SHA-256 of its payload and is used only when that digest matches; anything unreadable is a miss and the
programs are compiled again.  The directory is created mode 0700 under the (trusted) state root.
"""

from __future__ import annotations

import os
import struct

from ... import fastjson

try:  # the C module alone: ``hashlib`` (OpenSSL's _hashlib under it) costs create ~2.5 ms
    from _sha256 import sha256  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - an interpreter without it (3.12+ names it _sha2)
    from hashlib import sha256

TYPE_CHECKING = False  # typing is not loaded at run time
if TYPE_CHECKING:
    from typing import Any

    from .plan import Plan

MAGIC = b"sandbox-shim seccomp 1\n"
_RULE_SOURCES = ("seccomp.py", "seccomp_cache.py")


def _digest_file(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return str(sha256(fh.read()).hexdigest())
    except OSError:
        return ""


def rules_digest() -> str:
    """SHA-256 over the source of the modules that define and compose the filters."""
    here = os.path.dirname(os.path.abspath(__file__))
    return str(
        sha256("".join(_digest_file(os.path.join(here, n)) for n in _RULE_SOURCES).encode()).hexdigest()
    )


def host_facts() -> dict[str, str]:
    """``{"arch", "kernel", "libseccomp", "binding"}`` of this host (module docstring).

    Raises:
        OSError: libseccomp cannot be loaded (then nothing can be compiled either).
    """
    import importlib.util

    from . import libseccomp

    u = os.uname()
    spec = importlib.util.find_spec("pyseccomp")
    return {
        "arch": u.machine,
        "kernel": f"{u.release} {u.version}",
        "libseccomp": libseccomp.version(),
        "binding": _digest_file(spec.origin) if spec and spec.origin else "",
    }


def cache_key(inputs: dict[str, Any]) -> str:
    """SHA-256 (hex) of ``inputs`` (``rules``, ``nested``, ``bundle`` and the ``host_facts``), as
    canonical JSON (``canonical``)."""
    return str(sha256(canonical(inputs).encode()).hexdigest())


def canonical(value: Any) -> str:
    """``value`` as ``json.dumps(value, sort_keys=True, separators=(",", ":"))`` writes it (the same
    text), without importing ``json``.  Raises TypeError for a value JSON cannot hold (or a non-str
    key), ValueError for a non-finite float."""
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("canonical JSON keys must be strings")
        return "{" + ",".join(f"{fastjson.dumps(k)}:{canonical(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    return fastjson.dumps(value)


def inputs_for(plan: Plan) -> dict[str, Any]:
    """Every input the programs of ``plan`` depend on (module docstring)."""
    return {
        "rules": rules_digest(),
        "nested": bool(plan.allow_nested_userns),
        "bundle": plan.seccomp,
        **host_facts(),
    }


def encode(programs: list[bytes]) -> bytes:
    payload = b"".join(struct.pack("=I", len(p)) + p for p in programs)
    return MAGIC + sha256(payload).digest() + payload


def decode(data: bytes) -> list[bytes] | None:
    """The programs of an entry, or None when it is not a whole, intact entry."""
    if not data.startswith(MAGIC):
        return None
    digest, payload = data[len(MAGIC) : len(MAGIC) + 32], data[len(MAGIC) + 32 :]
    if len(digest) != 32 or sha256(payload).digest() != digest:
        return None
    out, i = [], 0
    while i < len(payload):
        if i + 4 > len(payload):
            return None
        (n,) = struct.unpack_from("=I", payload, i)
        prog = payload[i + 4 : i + 4 + n]
        if len(prog) != n or not n or n % 8:
            return None
        out.append(prog)
        i += 4 + n
    return out or None


def load(cache_dir: str, key: str) -> list[bytes] | None:
    """The cached programs for ``key``, or None (missing, unreadable or damaged)."""
    try:
        fd = os.open(os.path.join(cache_dir, key), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            return decode(fh.read())
    except OSError:
        return None


def store(cache_dir: str, key: str, programs: list[bytes]) -> None:
    """Write the entry for ``key`` atomically; a failure leaves no entry (the cache is optional)."""
    tmp = os.path.join(cache_dir, f".{key}.{os.getpid()}.tmp")
    try:
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(encode(programs))
        os.replace(tmp, os.path.join(cache_dir, key))
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def compile_programs(plan: Plan) -> list[bytes]:
    """BPF programs for the sandbox, in load order: the tenant filter, the numbered denials this
    libseccomp cannot name (``seccomp.numbered_program``), then the bundle's own section.

    With ``sandbox-shim.allow-nested-userns`` the tenant filter leaves out its namespace rules
    (unshare, setns, clone/clone3 with namespace flags).  Raises what ``seccomp.compile_bpf`` raises.
    """
    from .seccomp import compile_bpf, default_tenant_section, numbered_program

    tenant = default_tenant_section()
    if plan.allow_nested_userns:
        ns_calls = {"unshare", "clone", "clone3", "setns"}
        rules = []
        for rule in tenant["syscalls"]:
            names = [n for n in rule["names"] if n not in ns_calls]
            if names:
                rules.append({**rule, "names": names})
        tenant = {**tenant, "syscalls": rules}
    programs = [compile_bpf(tenant)]
    extra = numbered_program()
    if extra:
        programs.append(extra)
    if plan.seccomp is not None:
        programs.append(compile_bpf(plan.seccomp))
    return programs


def programs(plan: Plan, cache_dir: str | None) -> list[bytes]:
    """``compile_programs(plan)``, read from ``cache_dir`` when an entry for its key exists there and
    stored there otherwise; ``cache_dir`` None compiles every time."""
    if not cache_dir:
        return compile_programs(plan)
    try:
        key = cache_key(inputs_for(plan))
    except OSError:  # no libseccomp: compile raises the refusal
        return compile_programs(plan)
    cached = load(cache_dir, key)
    if cached is not None:
        return cached
    out = compile_programs(plan)
    store(cache_dir, key, out)
    return out

"""The confinement profile on macOS: a deny-default SBPL profile run by ``sandbox-exec``.

``hardening/confinement.py`` computes the path sets; this renders them (``confine_profile.build``)
and checks that ``sandbox-exec`` accepts the profile before anything runs.  macOS cannot make
``/tmp`` private: a fresh ``TMPDIR`` per confinement stands in for it.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from ...capability import Capability
    from ...hardening.confine_sets import Sets
    from ...hardening.egress import EgressProxy

#: the egress proxy listens on a loopback TCP port (SBPL admits it by port)
EGRESS_TCP = True
PROXY_PORT = 0


def helper_interpreters(egress: bool) -> list[str]:
    """Nothing runs inside before the program: no interpreter joins the read set."""
    return []


def parent_death_signal(sig: int) -> bool:
    """False: macOS has no parent-death signal (``hardening.confine_backend``)."""
    return False


def initial_environ() -> dict[str, str] | None:
    """None: macOS keeps no readable copy of the exec'd environment (the caller uses ``os.environ``)."""
    return None


def report(bwrap: str | None = None) -> list[Capability]:
    """``sandbox-exec`` present and executable, as a ``Capability`` report."""
    from ...capability import Capability
    from . import seatbelt

    ok = os.access(seatbelt.SANDBOX_EXEC, os.X_OK)
    return [
        Capability(
            "confinement.seatbelt",
            ok,
            "sandbox-exec",
            "" if ok else "sandbox-exec missing",
            f"access({seatbelt.SANDBOX_EXEC}, X_OK)",
        )
    ]


def render(
    exe: str,
    args: Sequence[str],
    sets: Sets,
    cd: str,
    *,
    permit: str,
    env: dict[str, str],
    egress: EgressProxy | None = None,
    **_: object,
) -> tuple[list[str], tuple[str, ...], list[str]]:
    """``sandbox-exec`` argv; sets ``env["TMPDIR"]``; returns ``(argv, layers, not_enforced)``.

    Raises: CannotEnforce (``seatbelt.compile_check``): sandbox-exec rejects the profile.
    """
    import tempfile

    from . import confine_profile, seatbelt

    tmp = tempfile.mkdtemp(prefix="sandbox-shim-tmp-")
    env["TMPDIR"] = tmp
    ro = [p for p in (*seatbelt.RUNTIME_READ, *sets.read_only) if os.path.exists(p)]
    profile = confine_profile.build(
        ro,
        [*sets.read_write, tmp],
        deny=[os.path.dirname(permit)],
        islands=sets.islands,
        anchors=sets.anchors,
        proxy_port=egress.port if egress else None,
    )
    seatbelt.compile_check(profile)
    return (
        seatbelt.sandbox_exec_argv(profile, exe, args),
        ("seatbelt (sandbox-exec)",),
        ["abstract unix sockets (macOS has none; unix-domain sockets follow the file rules)"],
    )

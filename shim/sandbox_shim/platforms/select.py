"""The composition point: the one place platform-neutral code reaches a platform package.

Everything here picks the implementation for this OS (``sys.platform``) and imports it on first use,
so importing this module costs nothing.  The layer contract (``[tool.importlinter]`` in pyproject.toml,
``tests/test_layers.py``) names this module as the only exception to "the core never imports a
platform"; a new platform is a new folder under ``platforms/`` (its ``__init__.py`` states its
``sys.platform`` value; its mechanism module assigns its class to ``Mechanism`` for mypy,
``tests/test_mechanism_contract.py`` fails for a platform folder's mechanism class without that line)
plus one branch in ``mechanism``.

What the core asks of a platform beyond the ``Mechanism`` protocol is host facts that exist before
any mechanism does: the probes to register, the capability cache's key, config rules that need only
the config (``bundle.load``), the seccomp architectures and libseccomp version of the features
document, and where bwrap is.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing is not imported at run time: the lifecycle verbs import this module
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from ..errors import BundleProblem
    from ..hardening.confine_backend import ConfineBackend
    from ..mechanism import Mechanism
    from .darwin import confine as darwin_confine
    from .linux import confine as linux_confine

    #: never evaluated: mypy checks both confinement renderers against ``ConfineBackend`` here, on
    #: any OS (``confine_backend``'s branches are per platform); a renderer missing a member fails
    _CONFINE_CONTRACT: tuple[ConfineBackend, ConfineBackend] = (linux_confine, darwin_confine)


def _linux() -> bool:
    return sys.platform.startswith("linux")


def mechanism(root: str | None = None, systemd_cgroup: bool = False) -> Mechanism:
    """A new mechanism for this OS, keeping its sandboxes' state under ``root`` (``state.resolve_root``).

    ``systemd_cgroup``: runc's ``--systemd-cgroup`` (Linux: ``cgroupsPath`` is ``slice:prefix:name``
    and systemd makes the scope; macOS and Windows have no cgroups and ignore it, as runc's flag
    has no meaning there).  The choice is made here, once, never set on a mechanism afterwards.

    Raises: ``LaunchFailed`` on an OS this build has no mechanism for.
    """
    from ..state import resolve_root

    mech: Mechanism
    if _linux():
        from .linux.mechanism import LinuxMechanism

        mech = LinuxMechanism(systemd_cgroup=systemd_cgroup)
    elif sys.platform == "darwin":
        from .darwin.mechanism import DarwinSeatbeltMechanism

        mech = DarwinSeatbeltMechanism()
    elif sys.platform == "win32":
        from .windows.mechanism import WindowsJobMechanism

        mech = WindowsJobMechanism()
    else:
        from ..errors import LaunchFailed

        raise LaunchFailed(f"no mechanism for platform {sys.platform} in this build")
    mech.root = resolve_root(root)
    return mech


def register_probes() -> None:
    """Import every platform's probe module (each registers its names with ``capability.register``).

    All three are imported on every OS: a name is known everywhere (``sandbox-shim.requires`` is
    checked against the registry) and reports unavailable where it does not apply."""
    from .darwin import probes as _darwin  # noqa: F401
    from .linux import kernel_probes as _kernel  # noqa: F401
    from .linux import probes as _linux_probes  # noqa: F401
    from .windows import probes as _windows  # noqa: F401


def cache_facts() -> dict[str, str]:
    """The platform's part of the capability cache key (``probes.cache.cache_key``): cheap reads only.

    Linux: ``platforms/linux/hostkey.cache_facts`` (boot_id, bwrap's identity, the cgroup layout,
    the user namespace, this process's confinement, the user-namespace sysctls); elsewhere
    ``{"bwrap": "absent"}``."""
    if not _linux():
        return {"bwrap": "absent"}
    from .linux.hostkey import cache_facts as linux_facts

    return linux_facts()


def config_problems(cfg: dict[str, Any]) -> list[BundleProblem]:
    """Rules of the config's Linux sections that need only the config (``process.user`` against what
    bwrap can do, ``linux.sysctl``, ``linux.seccomp``), so ``validate`` and ``create`` agree.  The
    ``linux`` section's rules hold on every OS; the credential rule only where bwrap runs."""
    from .linux.config_checks import problems

    return problems(cfg, credentials=_linux())


def host_platform_problems(cfg: dict[str, Any]) -> list[BundleProblem]:
    """The rules of this host's platform that need only the config and no other platform has, for
    ``validate`` (``bundle.load(launch=False)``), so it reports what ``create`` on this host refuses.
    Linux: a pid namespace is required and a non-empty ``windows`` section refused
    (``platforms/linux/config_checks.linux_only_problems``; the Linux planner applies the same rules at
    create, on any host).  macOS and Windows: none here (their planners refuse what they cannot apply;
    they have no pid namespace to require)."""
    if not _linux():
        return []
    from .linux.config_checks import linux_only_problems

    return linux_only_problems(cfg)


def seccomp_arches() -> tuple[str, ...]:
    """libseccomp architecture names (``X86_64``, ...) the Linux mechanism may add to a filter; empty
    where pyseccomp cannot be loaded."""
    try:
        from .linux.seccomp import ARCHES
    except (ImportError, OSError, RuntimeError):
        return ()
    return tuple(ARCHES)


def libseccomp_version() -> str:
    """The loaded libseccomp's version ``"major.minor.micro"`` (seccomp_version(3)).

    Raises: ImportError / OSError when pyseccomp or libseccomp.so cannot be loaded."""
    from .linux.kernel_probes import libseccomp_version as version

    return version()


def bwrap_path() -> str | None:
    """The bwrap binary create runs (``$SANDBOX_SHIM_BWRAP``, PATH, ``/usr/bin/bwrap``), or None."""
    from .linux.locate import bwrap_path as find

    return find()


def bare_control_argv(
    rootfs: str,
    storage: str,
    storage_inside: str,
    capabilities: Sequence[str],
    share_net: bool,
    command: Sequence[str],
) -> list[str] | None:
    """The conformance suite's control outside the tenant profile (``platforms/linux/bare.py``: the
    rootfs under bare bwrap, capabilities kept), or None where there is none (off Linux, no bwrap)."""
    if not _linux():
        return None
    from .linux.bare import control_argv
    from .linux.locate import bwrap_path as find

    exe = find()
    if exe is None:
        return None
    return control_argv(exe, rootfs, storage, storage_inside, capabilities, share_net, command)


def bwrap_version() -> str | None:
    """The version of that bwrap (``bwrap --version``, e.g. ``"0.8.0"``), or None when absent or it
    will not run.  Linux only (None elsewhere)."""
    if not _linux():
        return None
    from .linux.probes import bwrap_identity

    ident = bwrap_identity()
    return ident[1] if ident else None


#: the modules the Linux renderer loads (``_lazy.read_ahead`` of their bytecode, since
#: ``confine`` runs once per command and a cold page cache would read them one at a time)
LINUX_CONFINE_MODULES = (
    "platforms/linux/__init__",
    "platforms/linux/landlock",
    "platforms/linux/confine",
    "platforms/linux/confine_state",
    "platforms/linux/locate",
)


def confine_backend() -> ConfineBackend | None:
    """The control-plane confinement's renderer for this OS (Linux: bwrap + Landlock; macOS: SBPL), or
    None.  What a renderer offers is the protocol ``hardening.confine_backend.ConfineBackend``."""
    if sys.platform.startswith("linux"):
        if __package__ + ".linux.confine" not in sys.modules:  # first use: read them in at once
            from .._lazy import module_bytecode, read_ahead

            read_ahead(module_bytecode(LINUX_CONFINE_MODULES))
        from .linux import confine as linux

        return linux
    if sys.platform == "darwin":
        from .darwin import confine as darwin

        return darwin
    return None

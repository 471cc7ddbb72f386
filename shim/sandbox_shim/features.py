"""The OCI ``features`` document (runtime-spec features.md and features-linux.md), stating what is
implemented here, never more.

The spec says the document describes the runtime, "irrelevant to the actual availability of the
features in the host"; this shim is stricter on purpose: a namespace is listed only when its probe
succeeded on this host (``sandbox_shim.probes``), and cgroup v1/v2 only when the probe of the memory
controller succeeded through that version, because a caller that reads "network" here will rely on it.
Everything the shim does not implement is absent, empty or false:

* ``hooks``: ``HOOKS`` (``hooks.py`` runs all six) and ``mountOptions``: ``MOUNT_OPTIONS``
  module constants extended as the plan learns each one.
* ``linux.capabilities``: the names config.schema.json accepts in ``process.capabilities`` (``plan``
  passes the granted set to bwrap), read from the schema so the two cannot drift; the annotation
  ``sandbox-shim.capabilities.without-userns`` lists the ones granted without a user namespace
  (``hardening.capabilities``), ``sandbox-shim.devices-cgroup`` whether the devices cgroup works here.
* ``cgroup.systemd``: the ``cgroup.systemd`` probe (systemd is PID 1, its D-Bus API answers, cgroup v2):
  ``--systemd-cgroup`` is refused where it is false.
* ``apparmor``, ``selinux``, ``cgroup.systemdUser``: false.
* ``seccomp``: enabled when the ``seccomp`` probe succeeded; actions, operators and archs are the ones
  libseccomp (through pyseccomp) can express *and* ``platforms.linux.seccomp`` accepts: SCMP_ACT_NOTIFY is
  left out (no listener process), flags are SECCOMP_FILTER_FLAG_TSYNC only (bwrap loads the filter with
  prctl(PR_SET_SECCOMP), which takes no flags).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .capability import Capability
from .capability import report as capability_report

#: The OCI runtime-spec versions config.json may declare (features.md "Specification version").
#: 1.1.0 is the first version that defines the features document itself.
OCI_VERSION_MIN = "1.0.0"
OCI_VERSION_MAX = "1.1.0"
#: hooks (config.md "POSIX-platform Hooks") the runtime runs (``sandbox_shim.hooks``).
HOOKS: list[str] = ["prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"]
#: mount options (config.md "Mounts") that ``plan`` acts on when building bwrap's mounts.
MOUNT_OPTIONS: list[str] = ["bind", "rbind", "ro", "rw", "nosuid", "nodev"]  # bwrap always sets the last two
#: seccomp flags (seccomp(2) SECCOMP_FILTER_FLAG_*) accepted in ``linux.seccomp.flags``.
SECCOMP_FLAGS: list[str] = ["SECCOMP_FILTER_FLAG_TSYNC"]

#: OCI namespace type (config-linux.md "Namespaces") -> the probe that must succeed.
NAMESPACE_PROBES: dict[str, str] = {
    "cgroup": "namespace.cgroup",
    "ipc": "namespace.ipc",
    "mount": "namespace.mount",
    "network": "namespace.network",
    "pid": "namespace.pid",
    "user": "namespace.user",
    "uts": "namespace.uts",
}
#: OCI seccomp action -> pyseccomp attribute (libseccomp's SCMP_ACT_*, seccomp_rule_add(3)).
_ACTIONS = {
    "SCMP_ACT_ALLOW": "ALLOW",
    "SCMP_ACT_ERRNO": "ERRNO",
    "SCMP_ACT_KILL": "KILL",
    "SCMP_ACT_KILL_PROCESS": "KILL_PROCESS",
    "SCMP_ACT_KILL_THREAD": "KILL_THREAD",
    "SCMP_ACT_LOG": "LOG",
    "SCMP_ACT_TRACE": "TRACE",
    "SCMP_ACT_TRAP": "TRAP",
}
#: OCI operator -> pyseccomp attribute (enum scmp_compare, seccomp_rule_add(3)).
_OPERATORS = {
    "SCMP_CMP_EQ": "EQ",
    "SCMP_CMP_GE": "GE",
    "SCMP_CMP_GT": "GT",
    "SCMP_CMP_LE": "LE",
    "SCMP_CMP_LT": "LT",
    "SCMP_CMP_MASKED_EQ": "MASKED_EQ",
    "SCMP_CMP_NE": "NE",
}


def seccomp_features(enabled: bool) -> dict[str, Any]:
    """``linux.seccomp`` of the features document (features-linux.md "Seccomp").

    Returns: ``{"enabled": bool, "actions": [...], "operators": [...], "archs": [...],
    "knownFlags": [...], "supportedFlags": [...]}``; lists are empty when disabled or when pyseccomp
    cannot be loaded.  An arch is listed only if libseccomp accepts adding it to a filter
    (seccomp_arch_add(3)).  Never raises.
    """
    empty: dict[str, Any] = {
        "enabled": False,
        "actions": [],
        "operators": [],
        "archs": [],
        "knownFlags": [],
        "supportedFlags": [],
    }
    if not enabled:
        return empty
    try:
        import pyseccomp as s
    except (ImportError, OSError, RuntimeError):
        return empty
    from .platforms.select import seccomp_arches

    ARCHES = seccomp_arches()  # noqa: N806 - the Linux mechanism's list (platforms/linux/seccomp.py)
    archs = []
    for arch in ARCHES:
        value = getattr(s.Arch, arch, None)
        if value is None:
            continue
        try:
            f = s.SyscallFilter(s.ALLOW)
            if not f.exist_arch(value):
                f.add_arch(value)
        except OSError:
            continue
        archs.append(f"SCMP_ARCH_{arch}")
    return {
        "enabled": True,
        "actions": sorted(a for a, attr in _ACTIONS.items() if hasattr(s, attr)),
        "operators": sorted(o for o, attr in _OPERATORS.items() if hasattr(s, attr)),
        "archs": sorted(archs),
        "knownFlags": list(SECCOMP_FLAGS),
        "supportedFlags": list(SECCOMP_FLAGS),
    }


def features(reports: Iterable[Capability] | None = None) -> dict[str, Any]:
    """Build the features document from capability reports (default: probe this host now).

    Args:
        reports: the ``Capability`` reports to use; must include the namespace.*, cgroup.memory and
            seccomp probes, a missing one counts as unavailable.
    Returns: a dict shaped as runtime-spec features.md (validated by schemas/features.schema.json).
    """
    by_name = {c.name: c for c in (reports if reports is not None else capability_report())}

    def ok(name: str) -> bool:
        c = by_name.get(name)
        return bool(c and c.available)

    memory = by_name.get("cgroup.memory")
    cgroup_version = memory.mechanism if memory and memory.available else ""
    from .hardening.capabilities import ORCHESTRATOR_DEFAULTS
    from .platforms.select import bwrap_version, libseccomp_version

    annotations = {
        "sandbox-shim.version": _package_version(),
        # granted without a user namespace (contained); any capability inside one
        "sandbox-shim.capabilities.without-userns": ",".join(sorted(ORCHESTRATOR_DEFAULTS)),
        # the devices cgroup that contains CAP_MKNOD and applies linux.resources.devices
        "sandbox-shim.devices-cgroup": "true" if ok("cgroup.devices") else "false",
    }
    version = bwrap_version()
    if version:
        annotations["sandbox-shim.bwrap.version"] = version
    seccomp = seccomp_features(ok("seccomp"))
    if seccomp["enabled"]:
        annotations["io.github.seccomp.libseccomp.version"] = libseccomp_version()
    return {
        "ociVersionMin": OCI_VERSION_MIN,
        "ociVersionMax": OCI_VERSION_MAX,
        "hooks": list(HOOKS),
        "mountOptions": list(MOUNT_OPTIONS),
        "linux": {
            "namespaces": sorted(ns for ns, probe in NAMESPACE_PROBES.items() if ok(probe)),
            "capabilities": capability_names(),
            "cgroup": {
                "v1": cgroup_version == "cgroup v1",
                "v2": cgroup_version == "cgroup v2",
                "systemd": ok("cgroup.systemd"),
                "systemdUser": False,
                "rdma": False,
            },
            "seccomp": seccomp,
            "apparmor": {"enabled": False},
            "selinux": {"enabled": False},
            "intelRdt": {"enabled": False},
        },
        "annotations": annotations,
    }


def capability_names() -> list[str]:
    """The capabilities(7) names config.schema.json accepts (``$defs.capability``), in schema order."""
    import json
    from importlib import resources

    text = resources.files("sandbox_shim.schemas").joinpath("config.schema.json").read_text(encoding="utf-8")
    return list(json.loads(text)["$defs"]["capability"]["enum"])


def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("sandbox-shim")
    except Exception:  # not installed as a distribution (running from a source tree)
        return "unknown"

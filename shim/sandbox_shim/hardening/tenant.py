"""The tenant profile: the default for every bundle, and nothing can widen it.

Rules (README "Security"):

* Environment: built only from config.json ``process.env`` plus ``DEFAULT_ENV`` for names the
  config leaves unset; nothing is inherited from the caller.  A variable whose *name* contains any of
  ``FORBIDDEN_ENV_FRAGMENTS`` (case-insensitive) is refused at validation, by name, never by value.
  There is no option that weakens this list: credentials reach a tenant as mounted files.
* Network: a ``network`` namespace is required; omitting it (OCI: "share the host's") is refused
  unless the annotation ``sandbox-shim.network`` is ``host``.  A namespace given by ``path`` is joined.
* Processes: a ``proc`` mount needs a new (or joined) ``pid`` namespace: a proc of the host's pid
  namespace lists every host process, and ``/proc/PID/root`` of a neighbour sandbox (same uid, no
  capabilities either) opens that sandbox's files — its storage included.
"""

from __future__ import annotations

from ..errors import BundleProblem

TYPE_CHECKING = False  # no typing at run time: create loads this module
if TYPE_CHECKING:
    from typing import Any

#: Name fragments that mark a credential.  Matching is on the upper-cased name, anywhere in it.
FORBIDDEN_ENV_FRAGMENTS: tuple[str, ...] = (
    "KEY",  # API_KEY, AWS_ACCESS_KEY_ID, SSH_KEY...
    "TOKEN",
    "SECRET",
    "PASS",  # PASSWORD, PASSWD, PASSPHRASE, DB_PASS, PGPASSFILE
    "_PWD",  # MYSQL_PWD (the shell's own PWD / OLDPWD do not match)
    "CRED",  # CREDENTIALS, AWS_CREDS
    "AUTH",  # AUTHORIZATION, OAUTH_..., KUBE_AUTH
    "COOKIE",
    "SESSION",
    "PRIVATE",
    "SIGNATURE",
)

#: Set only when config.json does not set the name (HOME follows the runtime-spec's advice).
DEFAULT_ENV: dict[str, str] = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "TERM": "xterm",
}


def forbidden_fragment(name: str) -> str | None:
    """The first forbidden fragment found in the variable ``name``, or None."""
    upper = name.upper()
    return next((f for f in FORBIDDEN_ENV_FRAGMENTS if f in upper), None)


def check_env(env: list[Any] | None) -> tuple[list[BundleProblem], list[BundleProblem]]:
    """Check ``process.env`` entries.  Returns (errors, warnings); values are never quoted.

    Rules: each entry is ``NAME=VALUE`` with a non-empty name (runtime-spec config.md "process.env");
    (a NUL byte: ``config_rules``); no forbidden fragment in the name; a repeated name is a warning and
    the last wins.
    """
    errors: list[BundleProblem] = []
    warnings: list[BundleProblem] = []
    seen: dict[str, int] = {}
    if not isinstance(env, list):
        return errors, warnings  # not an array: the schema reports the type (JSON Schema "type")
    for i, entry in enumerate(env):
        ptr = f"/process/env/{i}"
        if not isinstance(entry, str):
            continue  # the schema reports the type
        name, eq, _value = entry.partition("=")
        if not eq or not name:
            errors.append(
                BundleProblem(
                    ptr, "entry has no NAME= part", "runtime-spec process.env", "write it as NAME=VALUE"
                )
            )
            continue
        if "\0" in entry:
            continue  # config_rules.string_problems refuses it, with every other string of the config
        frag = forbidden_fragment(name)
        if frag:
            errors.append(
                BundleProblem(
                    ptr,
                    f"variable {name!r} looks like a credential (name contains {frag!r})",
                    "tenant profile: forbidden environment names",
                    "pass credentials to a tenant as a mounted file, never in the environment",
                )
            )
            continue
        if name in seen:
            warnings.append(
                BundleProblem(
                    ptr,
                    f"variable {name!r} repeats /process/env/{seen[name]}; the last wins",
                    "runtime-spec process.env",
                    "keep one entry per name",
                )
            )
        seen[name] = i
    return errors, warnings


def build_env(env: list[str] | None) -> dict[str, str]:
    """The sandbox's environment: ``DEFAULT_ENV`` overlaid with config entries (last wins)."""
    out = dict(DEFAULT_ENV)
    for entry in env or []:
        name, _, value = entry.partition("=")
        out[name] = value
    return out


def check_network(config: dict[str, Any], network_setting: str) -> list[BundleProblem]:
    """Refuse a config that shares the host network without asking for it in the sandbox settings."""
    nss = (config.get("linux") or {}).get("namespaces") or []
    if any(ns.get("type") == "network" for ns in nss if isinstance(ns, dict)):
        if network_setting == "host":
            return [
                BundleProblem(
                    "/annotations/sandbox-shim.network",
                    "network is 'host' but linux.namespaces lists a network namespace",
                    "tenant profile: network",
                    "remove one of the two",
                )
            ]
        return []
    if network_setting == "host":
        return []
    return [
        BundleProblem(
            "/linux/namespaces",
            "no network namespace: in OCI terms this shares the host's network",
            "tenant profile: network denied by default",
            'add {"type": "network"} to linux.namespaces, or set annotation sandbox-shim.network to "host"',
        )
    ]


def pid_problem(unshare: list[str], join: dict[str, str], mount_kinds: list[str]) -> BundleProblem | None:
    """The refusal for a ``proc`` mount without its own pid namespace, or None.

    Args:
        unshare: namespace types made new; join: type → path of namespaces joined;
        mount_kinds: kinds of the plan's mounts (``proc`` is the one that matters).
    Rule: proc(5) shows the pid namespace of the process that mounted it; ``/proc/PID/root`` is
    opened under ptrace access rules (ptrace(2) "Ptrace access mode checking"), which a sibling
    sandbox with the same uid and no capabilities passes.  The Linux rule
    ``platforms/linux/config_checks.pid_namespace_problems`` refuses such a config already (at
    validation and in the Linux planner); bwrap.py checks the plan again before rendering (defence in
    depth).
    """
    if "proc" not in mount_kinds or "pid" in unshare or "pid" in join:
        return None
    return BundleProblem(
        "/linux/namespaces",
        "a proc mount without a pid namespace shows the host's processes, and through "
        "/proc/PID/root their files (a neighbour sandbox's storage included)",
        "tenant profile: processes isolated",
        'add {"type": "pid"} to linux.namespaces, or remove the proc mount',
    )


def check_capabilities(config: dict[str, Any]) -> list[BundleProblem]:
    """The capability policy (``hardening.capabilities``): what cannot be contained, in one problem;
    and the device rules that would undo CAP_MKNOD's containment (``devices.problems``)."""
    from ..devices import problems as device_problems
    from .capabilities import check_capabilities as check

    linux = config.get("linux") if isinstance(config.get("linux"), dict) else {}
    return check(config) + device_problems(linux or {})


# -- the kernel-file floor: always applied, whatever maskedPaths / readonlyPaths say -----------------

#: under every ``proc`` mount: hidden (an empty read-only tmpfs for a directory, /dev/null for a file).
#: Union of runc's ``runc spec`` and podman's default maskedPaths, plus /proc/kmsg.
PROC_MASKED: tuple[str, ...] = (
    "acpi",
    "asound",
    "kcore",
    "keys",
    "kmsg",
    "latency_stats",
    "timer_list",
    "timer_stats",
    "sched_debug",
    "scsi",
    "interrupts",
    "config.gz",
)
#: under every ``proc`` mount: read-only (a uid-0 tenant without capabilities can otherwise write
#: /proc/sys — host sysctls, ``kernel.core_pattern`` — and /proc/sysrq-trigger, as DAC allows root).
PROC_READONLY: tuple[str, ...] = ("bus", "fs", "irq", "sys", "sysrq-trigger")
#: under every ``sysfs`` mount (itself read-only): hidden.
SYS_MASKED: tuple[str, ...] = (
    "firmware",
    "fs/selinux",
    "dev/block",
    "devices/virtual/powercap",
    "kernel/security",
    "kernel/debug",
)


def proc_pid_entry(rel: str) -> bool:
    """Whether ``rel`` (a path relative to a proc mount) shows pid-dependent content: the proc root, a
    pid directory, ``self`` / ``thread-self``.  A read-only bind of it would be the *host's* (bwrap's
    sources are host paths), so such a masked/read-only path is refused (proc(5))."""
    first = rel.strip("/").split("/")[0]
    return first == "" or first.isdigit() or first in ("self", "thread-self")


#: proc(5) entries that are symbolic links into ``self/``: through them a path is pid-dependent too
PROC_SELF_LINKS = ("mounts", "net")


def check_readonly_proc(cfg: dict[str, Any]) -> list[BundleProblem]:
    """Refuse, at validation, a ``readonlyPaths`` entry in a ``proc`` mount of the config that is
    pid-dependent (``proc_pid_entry``, or through ``/proc/net`` / ``/proc/mounts``, links to ``self/``):
    its read-only bind would have the host's /proc as source.  The same rule holds at create."""
    procs: list[str] = [
        m["destination"]
        for m in cfg.get("mounts") or []
        if isinstance(m, dict) and m.get("type") == "proc" and isinstance(m.get("destination"), str)
    ]
    out: list[BundleProblem] = []
    for i, path in enumerate((cfg.get("linux") or {}).get("readonlyPaths") or []):
        if not isinstance(path, str):
            continue
        for dest in procs:
            top = dest.rstrip("/")
            if path != top and not path.startswith(top + "/"):
                continue
            rel = path[len(top) :]
            if proc_pid_entry(rel) or rel.strip("/").split("/")[0] in PROC_SELF_LINKS:
                out.append(
                    BundleProblem(
                        f"/linux/readonlyPaths/{i}",
                        f"{path}: a pid-dependent proc entry "
                        "cannot be made read-only (the bind's source would be the host's "
                        "/proc)",
                        "tenant profile: masked and read-only paths hold",
                        "remove it; mask it instead, or list a path below /proc/sys",
                    )
                )
                break
    return out

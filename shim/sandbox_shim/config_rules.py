"""Rules every config.json value passes through before it can reach bwrap, a path walk or the kernel.

One walk, at validation (``bundle.load``, so ``sandbox-shim validate`` says "invalid" too), in three parts:

* ``string_problems``: every string of the config, keys included, is refused when it holds a NUL byte
  (bwrap reads its options NUL-separated through ``--args FD``: a NUL would start a new option) or a
  lone UTF-16 surrogate (it cannot be encoded for the kernel).  Then what each consumer treats
  specially: path fields must be absolute with no ``..`` component, and no path-like field (bind
  sources, ``root.path``, namespace and device paths too) holds a control character; mount options
  are single tokens (no ``,``; ``mode=`` octal, ``size=`` a number with an optional k/m/g unit);
  the hostname is at most 64 bytes (sethostname(2) HOST_NAME_MAX) without ``/``, whitespace or
  control characters; sysctl
  values and ``cgroupsPath`` hold no control characters; ``cgroupsPath`` has no ``.`` / ``..``
  component (it is joined under each cgroup root).
* ``number_problems``: the ranges the schema cannot express (``rlimits`` soft <= hard; sandbox
  settings given as strings).  The schema holds the per-field ranges (uint32 ids without the
  "no change" value 2^32-1, int64 limits, ...).
* ``unapplied_problems``: ``UNAPPLIED``, the one table of fields this runtime does not apply, keyed by
  JSON pointer pattern.  A field listed there is refused with its pointer and a fix, never accepted
  and ignored.  ``mount_option_problems`` does the same for mount options.
* ``MAX_PATH_ENTRIES``: mounts + masked + read-only paths past which a config is refused (set-up cost).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator

from .errors import BundleProblem
from .path_rules import hidden_problems, length_problems

TYPE_CHECKING = False  # no typing at run time: create loads this module
if TYPE_CHECKING:
    from typing import Any

#: mounts + maskedPaths + readonlyPaths (the tenant floor included) one sandbox may have.  bwrap reads
#: /proc/self/mountinfo for every bind it makes, so its set-up grows with the square of this number
#: (measured in tests/test_breaches_setup.py); past it a config is refused rather than left hanging.
MAX_PATH_ENTRIES = 1024

#: OCI mount types a bundle may name (``bundle`` refuses others at validation, with the pointer);
#: every platform planner renders or refuses each of them (Linux: ``platforms/linux/plan.py``)
MOUNT_TYPES = ("bind", "proc", "tmpfs", "mqueue", "sysfs", "cgroup", "cgroup2", "devpts")

#: CFS bandwidth bounds (kernel Documentation/scheduler/sched-bwc.rst, tg_set_cfs_bandwidth): the period
#: is 1 ms..1 s and the quota at least 1 ms in either cgroup version; the
#: kernel answers EINVAL outside them, which create would report only after making the cgroup.
CPU_PERIOD_MIN, CPU_PERIOD_MAX, CPU_QUOTA_MIN = 1000, 1_000_000, 1000

#: bwrap(1) refuses more than 9000 arguments in all (its MAX_ARGS, the --args file included): the
#: process's arguments, three per environment entry (--setenv NAME VALUE), about four per mount,
#: masked or read-only path, and the runtime's own options (at most ``ARGV_FLOOR``, measured well
#: under it for the tenant floor with every capability added).
BWRAP_MAX_ARGS = 9000
ARGV_FLOOR = 600

HOST_NAME_MAX = 64  # sethostname(2)


def _obj(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """``parent[key]`` when it is an object, else {} (a wrong type is the schema's to report)."""
    value = parent.get(key)
    return value if isinstance(value, dict) else {}


def _list(parent: dict[str, Any], key: str) -> list[Any]:
    """``parent[key]`` when it is an array, else []."""
    value = parent.get(key)
    return value if isinstance(value, list) else []


def _ptr(parts: list[Any]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _strings(node: Any, path: list[Any]) -> Iterator[tuple[list[Any], str, bool]]:
    """(path, string, is_key) for every string in ``node``, keys included."""
    if isinstance(node, str):
        yield path, node, False
    elif isinstance(node, dict):
        for k, v in node.items():
            if isinstance(k, str):
                yield [*path, k], k, True
            yield from _strings(v, [*path, k])
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _strings(v, [*path, i])


def _bad_char(text: str) -> str | None:
    if "\0" in text:
        return "a NUL byte"
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        return "a lone UTF-16 surrogate"
    return None


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def string_problems(cfg: dict[str, Any]) -> list[BundleProblem]:
    """Every string of ``cfg`` checked for NUL / surrogates, then the field-specific forms (module doc).

    Returns: problems with the JSON pointer of the field (values never quoted).
    """
    out: list[BundleProblem] = []
    for path, text, is_key in _strings(cfg, []):
        bad = _bad_char(text)
        if bad:
            what = "key" if is_key else "value"
            out.append(
                BundleProblem(
                    _ptr(path),
                    f"{what} contains {bad}",
                    "config strings reach bwrap's NUL-separated arguments and the kernel",
                    f"remove {bad} from the {what}",
                )
            )
    if out:
        return out  # the forms below assume clean strings
    out += _path_fields(cfg)
    host = cfg.get("hostname")
    if isinstance(host, str) and host:
        if len(host.encode()) > HOST_NAME_MAX or _CONTROL.search(host) or "/" in host or " " in host:
            out.append(
                BundleProblem(
                    "/hostname",
                    f"hostname must be 1-{HOST_NAME_MAX} bytes without '/', spaces or control characters",
                    "sethostname(2); RFC 1123",
                    "use letters, digits, '-' and '.'",
                )
            )
    linux = _obj(cfg, "linux")
    for key, value in (linux.get("sysctl") or {}).items() if isinstance(linux.get("sysctl"), dict) else ():
        if isinstance(value, str) and _CONTROL.search(value.rstrip("\n")):
            out.append(
                BundleProblem(
                    _ptr(["linux", "sysctl", key]),
                    "sysctl value holds a control character (a newline starts another write)",
                    "sysctl.d(5)",
                    "give the value on one line",
                )
            )
    cg = linux.get("cgroupsPath")
    if isinstance(cg, str) and cg:
        parts = cg.split("/")
        if _CONTROL.search(cg) or any(p in (".", "..") for p in parts):
            out.append(
                BundleProblem(
                    "/linux/cgroupsPath",
                    "cgroupsPath must not hold '.' or '..' components "
                    "or control characters: it is joined under each cgroup root",
                    "runtime-spec config-linux.md cgroupsPath",
                    "give a path such as /mygroup/sandbox-1",
                )
            )
        # /sandbox-shim/<root tag>/ holds each state root's own sandboxes (found there after a state
        # loss, and killed by its `delete --force`): no bundle may place itself in another root's share
        first = parts[1] if cg.startswith("/") and len(parts) > 1 else parts[0]
        tag_like = len(first) == 10 and all(c in "0123456789abcdef" for c in first)
        if ":" not in cg and (
            (cg.startswith("/") and first == "sandbox-shim") or (not cg.startswith("/") and tag_like)
        ):
            out.append(
                BundleProblem(
                    "/linux/cgroupsPath",
                    "cgroupsPath names the runtime's own per-state-root cgroups (/sandbox-shim/<root tag>)",
                    "sandbox-shim cgroup layout (README)",
                    "leave cgroupsPath out (the runtime picks one) or give another path",
                )
            )
    return out


def _path_fields(cfg: dict[str, Any]) -> list[BundleProblem]:
    """Absolute paths without ``..``: mount destinations, masked/read-only paths, cwd, hook paths."""
    out: list[BundleProblem] = []
    fields: list[tuple[list[Any], Any]] = []
    for i, m in enumerate(cfg.get("mounts") or [] if isinstance(cfg.get("mounts"), list) else []):
        if isinstance(m, dict):
            fields.append((["mounts", i, "destination"], m.get("destination")))
    linux = _obj(cfg, "linux")
    for key in ("maskedPaths", "readonlyPaths"):
        for i, p in enumerate(linux.get(key) or [] if isinstance(linux.get(key), list) else []):
            fields.append((["linux", key, i], p))
    proc = _obj(cfg, "process")
    if "cwd" in proc:
        fields.append((["process", "cwd"], proc.get("cwd")))
    hooks = _obj(cfg, "hooks")
    for phase, entries in hooks.items():
        for i, h in enumerate(entries if isinstance(entries, list) else []):
            if isinstance(h, dict):
                fields.append((["hooks", phase, i, "path"], h.get("path")))
    loose: list[tuple[list[Any], Any]] = []  # path-like, relative allowed: control characters only
    for i, m in enumerate(cfg.get("mounts") or [] if isinstance(cfg.get("mounts"), list) else []):
        if isinstance(m, dict):
            loose.append((["mounts", i, "source"], m.get("source")))
    root = _obj(cfg, "root")
    loose.append((["root", "path"], root.get("path")))
    for key in ("namespaces", "devices"):
        for i, n in enumerate(linux.get(key) or [] if isinstance(linux.get(key), list) else []):
            if isinstance(n, dict):
                loose.append((["linux", key, i, "path"], n.get("path")))
    for path, value in fields + loose:
        if isinstance(value, str) and _CONTROL.search(value):
            out.append(
                BundleProblem(
                    _ptr(path),
                    "path holds a control character (a newline or tab would "
                    "make a file name the config does not show)",
                    "path safety",
                    "remove the control character",
                )
            )
    bad = {_ptr(path) for path, value in fields + loose if isinstance(value, str) and _CONTROL.search(value)}
    for path, value in fields:
        if not isinstance(value, str) or _ptr(path) in bad:
            continue  # the schema reports the type
        if not value.startswith("/"):
            out.append(
                BundleProblem(
                    _ptr(path), "path must be absolute", "runtime-spec config.md", "start it with '/'"
                )
            )
        elif ".." in value.split("/"):
            out.append(
                BundleProblem(
                    _ptr(path),
                    "path must not hold a '..' component",
                    "path safety",
                    "write the path it means without '..'",
                )
            )
    args = proc.get("args")
    arg0 = [(["process", "args", 0], args[0])] if isinstance(args, list) and args else []
    return out + length_problems([(p, v) for p, v in fields + loose + arg0 if _ptr(p) not in bad])


_CPU_LIST = re.compile(r"^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$")


def resource_value_problems(cfg: dict[str, Any]) -> list[BundleProblem]:
    """Values of linux.resources whose form the kernel would refuse at create: ``cpu.cpus`` and
    ``cpu.mems`` in the kernel's list format ("0-3,5", cpuset(7) "List format"; empty: inherit), and
    ``memory.swap`` (memory + swap) not below ``memory.limit`` (runtime-spec config-linux.md Memory;
    -1: unlimited)."""
    res = _obj(_obj(cfg, "linux"), "resources")
    out: list[BundleProblem] = []
    cpu = _obj(res, "cpu")
    for key in ("cpus", "mems"):
        v = cpu.get(key)
        if isinstance(v, str) and v.strip() and not _CPU_LIST.match(v.strip()):
            out.append(
                BundleProblem(
                    f"/linux/resources/cpu/{key}",
                    f"cpu.{key} {v[:40]!r} is not a list such as 0-3,5",
                    "cpuset(7) List format",
                    "give numbers and ranges separated by commas",
                )
            )
    mem = _obj(res, "memory")
    limit, swap = mem.get("limit"), mem.get("swap")
    if (
        isinstance(limit, int)
        and isinstance(swap, int)
        and not isinstance(limit, bool)
        and not isinstance(swap, bool)
        and limit > 0
        and 0 < swap < limit  # 0: not set, as runc reads it
    ):
        out.append(
            BundleProblem(
                "/linux/resources/memory/swap",
                f"memory.swap {swap} (memory + swap) is below memory.limit {limit}",
                "runtime-spec config-linux.md Memory",
                "give swap >= limit, or -1 for unlimited swap",
            )
        )
    return out


def number_problems(cfg: dict[str, Any]) -> list[BundleProblem]:
    """Ranges past the schema: rlimit soft <= hard (setrlimit(2) EINVAL); sandbox settings' numbers."""
    out: list[BundleProblem] = []
    proc = _obj(cfg, "process")
    for i, r in enumerate(proc.get("rlimits") or [] if isinstance(proc.get("rlimits"), list) else []):
        if (
            isinstance(r, dict)
            and isinstance(r.get("soft"), int)
            and isinstance(r.get("hard"), int)
            and r["soft"] > r["hard"]
        ):
            out.append(
                BundleProblem(
                    _ptr(["process", "rlimits", i, "soft"]),
                    "soft limit exceeds hard limit",
                    "setrlimit(2) EINVAL",
                    "make soft <= hard",
                )
            )
    linux = _obj(cfg, "linux")
    res = _obj(linux, "resources")
    cpu = _obj(res, "cpu")
    period, quota = cpu.get("period"), cpu.get("quota")
    if isinstance(period, int) and period and not CPU_PERIOD_MIN <= period <= CPU_PERIOD_MAX:
        out.append(
            BundleProblem(
                "/linux/resources/cpu/period",
                f"period must be from {CPU_PERIOD_MIN} to {CPU_PERIOD_MAX} µs (or 0: unset)",
                "kernel sched-bwc.rst: cpu.cfs_period_us / cpu.max period",
                "use e.g. 100000 (100 ms)",
            )
        )
    if isinstance(quota, int) and 0 < quota < CPU_QUOTA_MIN:
        out.append(
            BundleProblem(
                "/linux/resources/cpu/quota",
                f"quota must be at least {CPU_QUOTA_MIN} µs (or -1/0: unlimited)",
                "kernel sched-bwc.rst: cpu.cfs_quota_us / cpu.max quota",
                f"use a quota of {CPU_QUOTA_MIN} or more",
            )
        )
    ann = _obj(cfg, "annotations")
    ranges = {
        "sandbox-shim.port": (1, 65535),
        "sandbox-shim.cpu-time-seconds": (0, 2**62),
        "sandbox-shim.wall-clock-seconds": (0, 10**9),
        # a Job Object's ActiveProcessLimit (a DWORD; 0 would mean "no process may run")
        "sandbox-shim.windows.active-process-limit": (1, 2**32 - 1),
    }
    for key, (lo, hi) in ranges.items():
        v = ann.get(key)
        if not isinstance(v, str) or not v.strip():
            continue
        try:
            n = float(v)
        except ValueError:
            continue  # the schema's pattern reports the form
        if not lo <= n <= hi:
            out.append(
                BundleProblem(
                    _ptr(["annotations", key]),
                    f"value must be from {lo} to {hi}",
                    "sandbox-shim settings",
                    "use a value in range",
                )
            )
    return out


# -- fields not applied: one table ----------------------------------------------------------------


def _set(v: Any) -> bool:
    return v is not None and v != [] and v != {} and v != ""


def _propagation(v: Any) -> bool:
    return v not in (None, "", "slave", "rslave")


#: (JSON pointer pattern with ``*`` for any key/index, refuse-when, what, fix).  Fields another part of
#: the runtime applies are not here; a field added to the schema and not applied belongs here.
UNAPPLIED: tuple[tuple[str, Callable[[Any], bool], str, str], ...] = (
    ("/process/ioPriority", _set, "ioPriority is not applied", "remove it"),
    ("/process/scheduler", _set, "scheduler is not applied", "remove it"),
    ("/process/execCPUAffinity", _set, "execCPUAffinity is not applied", "remove it"),
    ("/mounts/*/uidMappings", _set, "id-mapped mounts are not supported", "remove uidMappings"),
    ("/mounts/*/gidMappings", _set, "id-mapped mounts are not supported", "remove gidMappings"),
    (
        "/linux/resources/memory/kernel",
        _set,
        "kernel memory limits are not applied (removed from cgroup v2 and from recent kernels)",
        "remove it",
    ),
    ("/linux/resources/network", _set, "network classID/priorities are not applied", "remove it"),
    ("/linux/resources/rdma", _set, "rdma limits are not applied", "remove it"),
    (
        "/linux/rootfsPropagation",
        _propagation,
        "bwrap makes every mount of the sandbox a slave of the "
        "host's (received, never sent back); other propagation is not applied",
        'use "rslave" or remove it',
    ),
    ("/linux/mountLabel", _set, "SELinux mount labels are not applied", "remove it"),
    ("/linux/intelRdt", _set, "Intel RDT is not applied", "remove it"),
    ("/linux/personality", _set, "personality is not applied", "remove it"),
    ("/linux/memoryPolicy", _set, "memoryPolicy is not applied", "remove it"),
    ("/linux/timeOffsets", _set, "time namespace offsets are not applied", "remove it"),
    ("/linux/netDevices", _set, "netDevices are not moved into the sandbox", "remove it"),
)


def _match(node: Any, parts: list[str], path: list[Any]) -> Iterator[tuple[list[Any], Any]]:
    if not parts:
        yield path, node
        return
    head, rest = parts[0], parts[1:]
    if head == "*":
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            yield from _match(v, rest, [*path, k])
    elif isinstance(node, dict) and head in node:
        yield from _match(node[head], rest, [*path, head])


def _uts_problems(cfg: dict[str, Any]) -> list[BundleProblem]:
    """hostname/domainname need a new UTS namespace (runtime-spec config.md "hostname"): without one
    they would not be applied (and could only be set on the host's)."""
    linux = _obj(cfg, "linux")
    nss = _list(linux, "namespaces")
    if any(isinstance(n, dict) and n.get("type") == "uts" for n in nss):
        return []  # new: bwrap --hostname; joined: written as kernel.hostname inside it (as runc does)
    return [
        BundleProblem(
            f"/{k}",
            f"{k} needs a new uts namespace to be applied",
            "runtime-spec config.md hostname",
            f'add {{"type": "uts"}} to linux.namespaces, or remove {k}',
        )
        for k in ("hostname", "domainname")
        if cfg.get(k)
    ]


def unapplied_problems(cfg: dict[str, Any]) -> list[BundleProblem]:
    """A refusal for every field of ``UNAPPLIED`` that ``cfg`` sets, for hostname/domainname without a
    uts namespace, and for unapplied mount options."""
    out: list[BundleProblem] = _uts_problems(cfg)
    for pattern, refuse, what, fix in UNAPPLIED:
        for path, value in _match(cfg, pattern.strip("/").split("/"), []):
            if refuse(value):
                out.append(BundleProblem(_ptr(path), what, "no field is accepted and left unapplied", fix))
    return out + mount_option_problems(cfg)[0]


#: mount options applied as asked (bwrap makes every bind and tmpfs nosuid and nodev; proc also noexec;
#: binds are recursive; propagation is slave of the host: ``rootfsPropagation``)
_APPLIED_OPTIONS = frozenset(
    {"ro", "rw", "bind", "rbind", "nosuid", "nodev", "slave", "rslave", "newinstance"}
)
#: options without effect on what the tenant can reach, accepted with a warning that they are not applied
_COSMETIC_OPTIONS = frozenset(
    {
        "noexec",
        "exec",
        "strictatime",
        "relatime",
        "noatime",
        "nodiratime",
        "lazytime",
        "sync",
        "async",
        "dirsync",
        "silent",
        "loud",
        "mand",
        "nomand",
        "norelatime",
        "nostrictatime",
        "iversion",
        "noiversion",
        "tmpcopyup",
        "private",
        "rprivate",
    }
)  # private: bwrap makes it slave (host -> sandbox only)
#: ``key=value`` options and the form of their value
_VALUE_OPTIONS = {
    "mode": re.compile(r"^0?[0-7]{1,4}$"),
    "size": re.compile(r"^[0-9]{1,15}[kmgKMG]?$"),
    "ptmxmode": re.compile(r"^0?[0-7]{1,4}$"),
    "gid": re.compile(r"^[0-9]{1,10}$"),
    "uid": re.compile(r"^[0-9]{1,10}$"),
    "nr_inodes": re.compile(r"^[0-9]{1,15}[kmgKMG]?$"),
}
#: value options that reach bwrap (``--perms``/``--size`` for tmpfs); the others are warnings
_APPLIED_VALUES = frozenset({"mode", "size"})


def mount_option_problems(cfg: dict[str, Any]) -> tuple[list[BundleProblem], list[BundleProblem]]:
    """(errors, warnings) for ``mounts[].options``: malformed or unknown options are errors; options
    without security effect that bwrap cannot set (``noexec``, atime, devpts ``gid=``) are warnings."""
    errors: list[BundleProblem] = []
    warnings: list[BundleProblem] = []
    mounts = _list(cfg, "mounts")
    for i, m in enumerate(mounts):
        if not isinstance(m, dict) or not isinstance(m.get("options"), list):
            continue
        kind = m.get("type")
        if kind and kind not in MOUNT_TYPES and not {"bind", "rbind"} & set(m["options"]):
            continue  # the type itself is refused (bundle._linux_problems)
        ignored: list[str] = []
        mqueue: list[str] = []
        for j, opt in enumerate(m["options"]):
            if not isinstance(opt, str):
                continue
            ptr = _ptr(["mounts", i, "options", j])
            key, eq, value = opt.partition("=")
            if "," in opt or (eq and key not in _VALUE_OPTIONS):
                errors.append(
                    BundleProblem(
                        ptr,
                        "not a mount option known here (one option per entry)",
                        "mount(8) options",
                        "split it, or remove it",
                    )
                )
            elif eq:
                if not _VALUE_OPTIONS[key].match(value):
                    errors.append(
                        BundleProblem(
                            ptr,
                            f"{key}= has a malformed value",
                            "tmpfs(5); mount(8)",
                            f"give {key}= a plain number",
                        )
                    )
                elif key == "mode" and int(value, 8) > 0o7777:
                    errors.append(BundleProblem(ptr, "mode must be at most 7777 (octal)", "chmod(2)"))
                elif not (key in _APPLIED_VALUES and kind == "tmpfs"):
                    ignored.append(key + "=")
            elif opt in _COSMETIC_OPTIONS:
                ignored.append(opt)
            elif kind == "mqueue" and opt in ("nosuid", "nodev"):
                mqueue.append(opt)
            elif opt not in _APPLIED_OPTIONS:
                errors.append(
                    BundleProblem(
                        ptr,
                        "mount option is not applied by this runtime",
                        "no field is accepted and left unapplied",
                        "remove it",
                    )
                )
        if mqueue:
            warnings.append(
                BundleProblem(
                    _ptr(["mounts", i, "options"]),
                    "not applied: bwrap's --mqueue "
                    "mounts without options (" + ", ".join(mqueue) + "); no effect: an "
                    "mqueue file system holds no device nodes (mknod(2) fails with "
                    "EPERM) and its files cannot be executed (execve(2): EACCES)",
                    "bwrap(1) --mqueue; mq_overview(7)",
                    "remove them to silence this",
                )
            )
        if ignored:
            warnings.append(
                BundleProblem(
                    _ptr(["mounts", i, "options"]),
                    "not applied (bwrap cannot set "
                    "them; no effect on what it reaches): " + ", ".join(ignored),
                    "bwrap(1)",
                    "remove them to silence this",
                )
            )
    return errors, warnings


def cwd_problems(cfg: dict[str, Any]) -> list[BundleProblem]:
    """A ``process.cwd`` below the root of a read-only tmpfs mount cannot exist (the tmpfs is empty and
    nothing can be made in it); create refuses it too, after symlinks (``bwrap._cwd``).  The mount
    that shows the cwd is the last one whose destination is a prefix of it (mounts are made in order)."""
    proc, linux, mounts = cfg.get("process"), cfg.get("linux"), cfg.get("mounts")
    cwd = proc.get("cwd") if isinstance(proc, dict) else None
    if not isinstance(mounts, list) or not isinstance(cwd, str) or not cwd.startswith("/"):
        return []
    cwd = os.path.normpath(cwd)
    last = None
    for m in mounts:
        dest = m.get("destination") if isinstance(m, dict) else None
        if isinstance(dest, str) and dest.startswith("/"):
            d = os.path.normpath(dest)
            if d == "/" or cwd == d or cwd.startswith(d + "/"):
                last = (d, m)
    if last is None or last[0] == cwd or last[1].get("type") != "tmpfs":
        return []
    opts = last[1].get("options") if isinstance(last[1].get("options"), list) else []
    ro_paths = linux.get("readonlyPaths") if isinstance(linux, dict) else None
    ro_paths = ro_paths if isinstance(ro_paths, list) else []
    if "ro" in opts or any(isinstance(p, str) and os.path.normpath(p) == last[0] for p in ro_paths):
        return [
            BundleProblem(
                "/process/cwd",
                f"cwd {cwd} lies below the root of an empty read-only tmpfs at {last[0]}: it cannot exist",
                "path safety: the cwd must be inside the sandbox's files",
                "use the mount's root, a writable tmpfs, or a directory of the rootfs or a bind",
            )
        ]
    return []


def problems(
    cfg: dict[str, Any], schema_valid: bool = True
) -> tuple[list[BundleProblem], list[BundleProblem]]:
    """(errors, warnings): strings, then (for a config the schema accepted) numbers, unapplied fields
    and the path-entry limit."""
    errors = string_problems(cfg)
    if errors or not schema_valid:
        return errors, []
    errors += number_problems(cfg) + unapplied_problems(cfg) + cwd_problems(cfg) + hidden_problems(cfg)
    errors += resource_value_problems(cfg)
    linux = _obj(cfg, "linux")
    count = sum(
        len(x)
        for x in (cfg.get("mounts"), linux.get("maskedPaths"), linux.get("readonlyPaths"))
        if isinstance(x, list)
    )
    if count > MAX_PATH_ENTRIES:
        errors.append(
            BundleProblem(
                "/mounts",
                f"{count} mounts, masked and read-only paths; at most {MAX_PATH_ENTRIES} are supported",
                "sandbox-shim set-up limit (README)",
                "merge mounts or mask parent directories",
            )
        )
    proc = _obj(cfg, "process")
    n_args = len(proc["args"]) if isinstance(proc.get("args"), list) else 0
    n_env = len(proc["env"]) if isinstance(proc.get("env"), list) else 0
    need = n_args + 3 * n_env + 4 * count + ARGV_FLOOR
    if need > BWRAP_MAX_ARGS:
        field = "/process/args" if n_args >= 3 * n_env else "/process/env"
        errors.append(
            BundleProblem(
                field,
                f"{n_args} arguments and {n_env} environment entries need about "
                f"{need} launcher arguments; bwrap takes at most {BWRAP_MAX_ARGS}",
                "bwrap(1) MAX_ARGS",
                "pass long lists in a file the program reads",
            )
        )
    return errors, mount_option_problems(cfg)[1]


def terminal_and_oom_problems(
    process: dict[str, Any], platform: str, rule: str, memory_fix: str, grants: list[str]
) -> list[BundleProblem]:
    """``process.terminal`` and ``process.oomScoreAdj`` on a platform with no console socket and no
    OOM score (``platform``: ``"macOS"``, ``"Windows"``): a terminal, or a score above 0 (asking to be
    killed first), is refused with its pointer (``rule`` names the policy; ``memory_fix`` says what
    bounds memory there); a score below 0 only protects, so it is appended to ``grants`` as not
    applied."""
    out: list[BundleProblem] = []
    if process.get("terminal"):
        out.append(
            BundleProblem(
                "/process/terminal",
                f"the workload gets no terminal on {platform} (no console socket)",
                rule,
                "set terminal to false",
            )
        )
    oom = process.get("oomScoreAdj")
    if oom and oom > 0:
        out.append(
            BundleProblem(
                "/process/oomScoreAdj",
                f"{platform} has no OOM score to raise; the workload would not be killed first",
                rule,
                f"remove it; {memory_fix}",
            )
        )
    elif oom:
        grants.append(f"/process/oomScoreAdj not applied on {platform} (it protects, never restricts)")
    return out

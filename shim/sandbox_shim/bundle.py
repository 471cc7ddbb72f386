"""Bundle loading: canonical paths, config.json parsing, schema and policy validation → ``Spec``.

A bundle is a directory holding ``config.json`` and a root filesystem (``root.path``, relative to the
bundle; runtime-spec bundle.md).  ``load()`` reports *every* problem at once as ``BundleInvalid``,
each with the JSON pointer of the field, the rule broken and the fix.  Values of ``process.env`` are
never echoed.  Keys the schema does not describe are warnings, not failures.
"""

from __future__ import annotations

import os

from . import jsonguard
from .errors import BundleInvalid, BundleProblem
from .hardening import tenant
from .paths import bind_source, canonical, contains, exposed, writable_exposures
from .values import FrozenValue, Value

TYPE_CHECKING = False  # no typing or dataclasses at run time: create loads this module
if TYPE_CHECKING:
    from typing import Any

SETTINGS_PREFIX = "sandbox-shim."


class Settings(FrozenValue):
    """sandbox-shim's own settings, read from ``annotations`` with the ``sandbox-shim.`` prefix.

    Attributes:
        profile: always ``tenant`` for bundles.
        network: ``none`` (loopback only, default) | ``isolated`` | ``host``.
        wall_clock: wall-clock limit, seconds, or None.
        cpu_time: CPU-time limit, seconds (RLIMIT_CPU), or None.
        port: TCP port ``address()`` reports, or None.
        requires: capability names the bundle requires instead of the profile's set, or None.
        allow_nested_userns: whether the sandbox may create user namespaces.
        active_process_limit: ``sandbox-shim.windows.active-process-limit``, processes (a Job Object's
            ActiveProcessLimit; refused off Windows: ``_windows_only_problems``), or None.
    """

    __match_args__ = (
        "profile",
        "network",
        "wall_clock",
        "cpu_time",
        "port",
        "requires",
        "allow_nested_userns",
        "active_process_limit",
    )
    profile: str
    network: str
    wall_clock: float | None
    cpu_time: int | None
    port: int | None
    requires: tuple[str, ...] | None
    allow_nested_userns: bool
    active_process_limit: int | None

    def __init__(
        self,
        profile: str = "tenant",
        network: str = "none",
        wall_clock: float | None = None,
        cpu_time: int | None = None,
        port: int | None = None,
        requires: tuple[str, ...] | None = None,
        allow_nested_userns: bool = False,
        active_process_limit: int | None = None,
    ) -> None:
        self._set(
            profile=profile,
            network=network,
            wall_clock=wall_clock,
            cpu_time=cpu_time,
            port=port,
            requires=requires,
            allow_nested_userns=allow_nested_userns,
            active_process_limit=active_process_limit,
        )

    @classmethod
    def from_annotations(cls, ann: dict[str, Any]) -> Settings:
        def get(k: str) -> str | None:
            v = ann.get(SETTINGS_PREFIX + k)
            return v if isinstance(v, str) and v != "" else None

        wall = get("wall-clock-seconds")
        cpu = get("cpu-time-seconds")
        port = get("port")
        req = get("requires")
        procs = get("windows.active-process-limit")
        return cls(
            profile=get("profile") or "tenant",
            network=get("network") or "none",
            wall_clock=float(wall) if wall and float(wall) > 0 else None,
            cpu_time=int(cpu) if cpu and int(cpu) > 0 else None,
            port=int(port) if port else None,
            requires=tuple(s.strip() for s in req.split(",") if s.strip()) if req else None,
            allow_nested_userns=get("allow-nested-userns") == "true",
            active_process_limit=int(procs) if procs and procs.isdigit() and int(procs) > 0 else None,
        )


class Spec(Value):
    """A validated bundle.

    Attributes:
        bundle: canonical absolute bundle directory.
        rootfs: canonical absolute root filesystem directory.
        config: the parsed config.json (dict, as written).
        settings: sandbox-shim settings from the annotations.
        warnings: non-fatal problems (unknown keys, repeated env names).
    """

    __match_args__ = ("bundle", "rootfs", "config", "settings", "warnings")
    bundle: str
    rootfs: str
    config: dict[str, Any]
    settings: Settings
    warnings: list[BundleProblem]

    def __init__(
        self,
        bundle: str,
        rootfs: str,
        config: dict[str, Any],
        settings: Settings,
        warnings: list[BundleProblem] | None = None,
    ) -> None:
        self.bundle, self.rootfs, self.config, self.settings = bundle, rootfs, config, settings
        self.warnings = [] if warnings is None else warnings

    @property
    def process(self) -> dict[str, Any]:
        return self.config.get("process") or {}

    @property
    def args(self) -> tuple[str, ...]:
        """``process.args`` as validated by ``load`` (the schema: a non-empty list of strings).  Every
        platform runs exactly these; an empty ``args[0]`` is no program, ``CouldNotRun`` at launch on
        every platform (nothing refuses it earlier on one platform only)."""
        args = self.process.get("args")
        return tuple(a for a in args if isinstance(a, str)) if isinstance(args, list) else ()

    @property
    def env(self) -> dict[str, str]:
        """``process.env`` as ``NAME -> value`` (split at the first ``=``, the last of a repeated name
        wins: ``hardening.tenant.check_env`` checked the entries).  No defaults added: a platform adds
        its own (``tenant.build_env`` on POSIX)."""
        env = self.process.get("env")
        out: dict[str, str] = {}
        for entry in env if isinstance(env, list) else ():
            if isinstance(entry, str):
                name, _, value = entry.partition("=")
                out[name] = value
        return out

    @property
    def cwd(self) -> str:
        """``process.cwd`` as validated by ``load`` (absolute, no ``..``), or ``/``."""
        cwd = self.process.get("cwd")
        return cwd if isinstance(cwd, str) and cwd else "/"

    @property
    def linux(self) -> dict[str, Any]:
        return self.config.get("linux") or {}

    @property
    def annotations(self) -> dict[str, str]:
        return dict(self.config.get("annotations") or {})


def pointer(parts: Any) -> str:
    """RFC 6901 JSON pointer from path parts (``~`` → ``~0``, ``/`` → ``~1``)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def read_config(bundle: str) -> dict[str, Any]:
    """Read and parse ``bundle/config.json``.

    Raises:
        BundleInvalid: missing bundle or file, unreadable, invalid JSON (with line and column), not an object.
    """
    if not os.path.isdir(bundle):
        raise BundleInvalid(
            [
                BundleProblem(
                    "",
                    f"bundle directory {bundle} does not exist",
                    "runtime-spec bundle.md",
                    "pass an existing directory with --bundle",
                )
            ]
        )
    path = os.path.join(bundle, "config.json")
    try:
        data = jsonguard.read_regular(path)  # a FIFO or device planted as config.json never blocks
    except FileNotFoundError:
        raise BundleInvalid(
            [
                BundleProblem(
                    "",
                    f"{path} does not exist",
                    "runtime-spec bundle.md",
                    "write one with `sandbox-shim spec --bundle DIR`",
                )
            ]
        ) from None
    except OSError as e:
        raise BundleInvalid(
            [
                BundleProblem(
                    "",
                    f"cannot read {path}: {e.strerror}",
                    "runtime-spec bundle.md",
                    "make it a readable file",
                )
            ]
        ) from e
    # parse-level limits (depth, number size, sizes, text) before anything recurses over the document
    cfg, limit_problems = jsonguard.loads(data)
    if any(p.rule != jsonguard.NUL_RULE for p in limit_problems):
        raise BundleInvalid(limit_problems)
    if not isinstance(cfg, dict):
        raise BundleInvalid(
            [
                BundleProblem(
                    "",
                    "config.json must hold a JSON object",
                    "runtime-spec config.md",
                    "wrap the settings in { }",
                )
            ]
        )
    if limit_problems:
        cfg[_TEXT_PROBLEMS] = limit_problems  # taken out again by load(), before validation
    return cfg


_TEXT_PROBLEMS = "\0text-problems"  # a key no parsed document can hold (NUL is refused in keys)


def load(bundle_dir: str, cwd: str | None = None, launch: bool = True) -> Spec:
    """Load and validate the bundle at ``bundle_dir`` (relative to ``cwd``, default the process's).

    With ``launch=False`` (``sandbox-shim validate``) facts about *this* host that a launch would
    need — bind sources and namespace files existing — are warnings, so a config generated on
    another host (podman's, with its own storage paths) still validates; and this host's platform
    rules that need only the config (``platforms.select.host_platform_problems``: on Linux a pid
    namespace, no ``windows`` section) are checked here, so ``validate`` refuses what ``create``
    would.  At launch the platform's planner applies those (``Mechanism.make_plan``): the ``Spec`` is
    the same for every OS.

    Returns:
        a ``Spec`` with canonical paths, the config and the warnings.
    Raises:
        BundleInvalid: with every problem found (JSON pointer, message, rule, fix).
    """
    bundle = canonical(bundle_dir, cwd)
    cfg = read_config(bundle)
    from .validation import schema_problems

    text_problems: list[BundleProblem] = cfg.pop(_TEXT_PROBLEMS, [])
    problems, warnings = schema_problems(cfg)
    from .config_rules import problems as rule_problems

    rule_errors, rule_warnings = rule_problems(cfg, schema_valid=not problems)
    problems += rule_errors
    warnings += rule_warnings
    env_errors, env_warnings = tenant.check_env(
        (cfg.get("process") or {}).get("env") if isinstance(cfg.get("process"), dict) else None
    )
    problems += env_errors
    warnings += env_warnings
    seen = {p.pointer for p in problems}
    problems += [p for p in text_problems if p.pointer not in seen]
    rootfs = ""
    root = cfg.get("root")
    if not text_problems and isinstance(root, dict) and isinstance(root.get("path"), str) and root["path"]:
        rootfs = canonical(root["path"], bundle)
        if not os.path.isdir(rootfs):
            problems.append(
                BundleProblem(
                    "/root/path",
                    f"root filesystem {rootfs} "
                    + ("is not a directory" if os.path.exists(rootfs) else "does not exist"),
                    "runtime-spec config.md root.path",
                    "create it (e.g. scripts/make-rootfs BUNDLE/rootfs) or fix root.path",
                )
            )
    if not problems:
        settings = Settings.from_annotations(cfg.get("annotations") or {})
        problems += tenant.check_network(cfg, settings.network)
        if not launch:  # validate: this host's platform rules (Linux: a pid namespace, no windows
            # section); at create the platform's planner applies them (``Mechanism.make_plan``), so a
            # bundle for another OS loads
            from .platforms.select import host_platform_problems

            problems += host_platform_problems(cfg)
        problems += tenant.check_capabilities(cfg)
        problems += tenant.check_readonly_proc(cfg)
        problems += _requires_problems(settings)
        problems += _windows_only_problems(cfg.get("annotations") or {})
        problems += _linux_problems(cfg, bundle, settings)
        problems += exposure_problems(cfg, bundle, rootfs)
        host = _host_problems(cfg, bundle)
        if launch:
            problems += host
        else:  # a fact of the bundle itself (its own storage/ missing) is a problem on any host
            problems += [h for h in host if _in_bundle(cfg, bundle, h.pointer)]
            warnings += [h for h in host if not _in_bundle(cfg, bundle, h.pointer)]
    if problems:
        raise _Refusal(problems, warnings)
    return Spec(bundle, rootfs, cfg, Settings.from_annotations(cfg.get("annotations") or {}), warnings)


class _Refusal(BundleInvalid):
    """``BundleInvalid`` carrying the warnings found alongside (``validate`` lists both)."""

    def __init__(self, problems: list[BundleProblem], warnings: list[BundleProblem]) -> None:
        super().__init__(problems)
        self.warnings = warnings


def _in_bundle(cfg: dict[str, Any], bundle: str, ptr: str) -> bool:
    """``ptr`` (``/mounts/N/source``) names a bind source inside the bundle directory."""
    parts = ptr.split("/")
    if len(parts) != 4 or parts[1] != "mounts" or parts[3] != "source" or not parts[2].isdigit():
        return False
    src = (cfg.get("mounts") or [])[int(parts[2])].get("source") or ""
    return isinstance(src, str) and contains(bundle, canonical(src, bundle))


class Verdict(Value):
    """What ``validate`` answers: the bundle's problems (none when it is valid) and warnings.

    Attributes:
        bundle: the bundle directory, as given (canonical when it loaded).
        error: the ``BundleInvalid`` holding every problem, or None when the bundle is valid.
        warnings: non-fatal problems (unknown keys, repeated env names, facts of another host).
    """

    __match_args__ = ("bundle", "error", "warnings")
    bundle: str
    error: BundleInvalid | None
    warnings: list[BundleProblem]

    def __init__(
        self, bundle: str, error: BundleInvalid | None, warnings: list[BundleProblem] | None = None
    ) -> None:
        self.bundle, self.error = bundle, error
        self.warnings = [] if warnings is None else warnings

    @property
    def problems(self) -> list[BundleProblem]:
        return self.error.problems if self.error is not None else []


def validate(bundle_dir: str, cwd: str | None = None) -> Verdict:
    """Check the bundle as ``load(launch=False)`` does, and return the answer instead of raising it:
    an invalid bundle is what ``sandbox-shim validate`` exists to report (every problem, then status 3).
    What ``create`` would refuse with is listed: a fact of the bundle (a bind source inside it, such
    as its ``storage/``, missing) is a problem here too; a fact of this host (an absolute bind source,
    a namespace file) is a warning, listed whether or not the bundle is valid (a config generated on
    another host still validates)."""
    try:
        s = load(bundle_dir, cwd, launch=False)
    except BundleInvalid as e:
        return Verdict(bundle_dir, e, list(getattr(e, "warnings", [])))
    return Verdict(s.bundle, None, s.warnings)


def _requires_problems(settings: Settings) -> list[BundleProblem]:
    """``sandbox-shim.requires`` names every probe it lists (``capability.PROBES``, imported only when
    the annotation is set)."""
    if not settings.requires:
        return []
    from . import capability

    capability._load_probes()
    unknown = sorted(set(settings.requires) - set(capability.PROBES))
    if not unknown:
        return []
    return [
        BundleProblem(
            "/annotations/" + SETTINGS_PREFIX + "requires",
            f"unknown capability names: {', '.join(n[:64] for n in unknown[:8])}",
            "sandbox-shim: capability probes",
            "use names listed by `sandbox-shim capabilities`",
        )
    ]


#: annotations only the Windows planner applies (``platforms/windows/plan.py``)
WINDOWS_ONLY = ("sandbox-shim.windows.active-process-limit",)


def _windows_only_problems(ann: dict[str, Any]) -> list[BundleProblem]:
    """A Windows-only setting on another OS is refused, never accepted and left unapplied."""
    import sys

    if sys.platform == "win32":
        return []
    return [
        BundleProblem(
            f"/annotations/{k}",
            "applies on Windows only (a Job Object limit)",
            "sandbox-shim annotations",
            "remove it; on this host limit processes with linux.resources.pids.limit",
        )
        for k in WINDOWS_ONLY
        if k in ann
    ]


def _host_problems(cfg: dict[str, Any], bundle: str) -> list[BundleProblem]:
    """What a launch on this host needs: bind sources and namespace files that exist."""
    out: list[BundleProblem] = []
    for i, m in enumerate(cfg.get("mounts") or []):
        if (
            m.get("type") == "bind"
            or "bind" in (m.get("options") or [])
            or "rbind" in (m.get("options") or [])
        ):
            src = m.get("source")
            if not src:
                out.append(
                    BundleProblem(
                        f"/mounts/{i}/source",
                        "a bind mount needs a source",
                        "runtime-spec config.md mounts",
                        "set source to a host path (relative paths resolve against the bundle)",
                    )
                )
            else:
                try:
                    host = bind_source(bundle, src)
                except OSError as e:
                    out.append(
                        BundleProblem(
                            f"/mounts/{i}/source",
                            f"bind source goes through the symlink {e.filename} inside "
                            "the bundle (storage/ is tenant-writable)",
                            "path safety",
                            "bind a real directory; remove the link",
                        )
                    )
                    continue
                if not os.path.exists(host):
                    out.append(
                        BundleProblem(
                            f"/mounts/{i}/source",
                            f"bind source {host} does not exist",
                            "runtime-spec config.md mounts",
                            "create it or fix the path",
                        )
                    )
    for i, ns in enumerate((cfg.get("linux") or {}).get("namespaces") or []):
        if ns.get("path") and not os.path.exists(ns["path"]):
            out.append(
                BundleProblem(
                    f"/linux/namespaces/{i}/path",
                    f"namespace file {ns['path']} does not exist",
                    "runtime-spec config-linux.md namespaces",
                    "give the path of a live namespace",
                )
            )
    return out


def _kernel_mount_problems(
    pointer: str, host: str, table: list[tuple[str, str]] | None
) -> list[BundleProblem]:
    """Refuse a recursively bound host directory that holds a host kernel mount (host_mounts)."""
    from .host_mounts import kernel_mounts_in

    try:
        found = kernel_mounts_in(host, table)
    except OSError as e:
        return [
            BundleProblem(
                pointer,
                f"{host}: {e}; its mounts cannot be checked",
                "fail closed",
                "run where /proc is mounted",
            )
        ]
    if not found:
        return []
    mp, fs = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return [
        BundleProblem(
            pointer,
            f"{host} holds the host's {fs} mount at {mp}{more}; binds are recursive, "
            "so the tenant would see it",
            "tenant profile: kernel files",
            "bind a directory without kernel mounts below it",
        )
    ]


def _linux_problems(cfg: dict[str, Any], bundle: str, settings: Settings) -> list[BundleProblem]:
    """Semantic checks past the schema: seccomp names, unsupported namespaces, security fields."""
    out: list[BundleProblem] = []
    from .config_rules import MOUNT_TYPES
    from .host_mounts import mounts

    table = mounts()
    for i, m in enumerate(cfg.get("mounts") or []):
        kind = m.get("type")
        if kind and kind not in MOUNT_TYPES and not {"bind", "rbind"} & set(m.get("options") or []):
            # a mount that cannot be made is refused, never silently left out
            out.append(
                BundleProblem(
                    f"/mounts/{i}/type",
                    f"mount type {kind!r} is not supported",
                    "sandbox-shim: mounts",
                    "use one of " + ", ".join(MOUNT_TYPES),
                )
            )
        elif kind and kind not in ("bind", "none") and {"bind", "rbind"} & set(m.get("options") or []):
            # mount(2) ignores the type of MS_BIND: a type given there would be accepted and not applied
            out.append(
                BundleProblem(
                    f"/mounts/{i}/type",
                    f"a bind mount's type {kind!r} would not be applied",
                    "mount(2) MS_BIND ignores filesystemtype",
                    'use "bind" (or "none"), or drop the bind option',
                )
            )
        if kind == "bind" or {"bind", "rbind"} & set(m.get("options") or []):
            try:
                host = bind_source(bundle, m.get("source") or "")
            except OSError:
                continue  # _host_problems names the link
            if any(
                h in ("/proc", "/sys") or h.startswith(("/proc/", "/sys/"))
                for h in (host, os.path.realpath(host))
            ):
                out.append(
                    BundleProblem(
                        f"/mounts/{i}/source",
                        f"bind source {host} is the host's proc or "
                        "sysfs (the host's processes and kernel settings)",
                        "tenant profile: kernel files",
                        'use a "proc" or "sysfs" mount',
                    )
                )
                continue
            out += _kernel_mount_problems(f"/mounts/{i}/source", host, table)
    root = cfg.get("root") or {}
    if isinstance(root.get("path"), str) and root["path"]:
        out += _kernel_mount_problems("/root/path", canonical(root["path"], bundle), table)
    linux = cfg.get("linux") or {}
    for i, ns in enumerate(linux.get("namespaces") or []):
        if ns.get("type") == "time":
            out.append(
                BundleProblem(
                    f"/linux/namespaces/{i}",
                    "time namespaces are not supported here",
                    "sandbox-shim: not implemented",
                    "remove the entry",
                )
            )
    proc = cfg.get("process") or {}
    for field_name in ("apparmorProfile", "selinuxLabel"):
        if proc.get(field_name):
            out.append(
                BundleProblem(
                    f"/process/{field_name}",
                    f"{field_name} is set but this runtime cannot enforce it",
                    "a security field that cannot be enforced is refused",
                    "remove the field",
                )
            )
    from .platforms.select import config_problems

    out += config_problems(cfg)  # the Linux sections' rules (platforms/linux/config_checks.py)
    return out


def protected_paths(cfg: dict[str, Any], bundle: str) -> list[str]:
    """Host paths the runtime reads or runs after the tenant started: the bundle (config.json), and
    every hook's executable (hooks run on the host)."""
    out = [bundle, os.path.join(bundle, "config.json")]
    hooks = cfg.get("hooks")
    for entries in hooks.values() if isinstance(hooks, dict) else ():  # wrong types: the schema's to report
        for h in entries if isinstance(entries, list) else ():
            if isinstance(h, dict) and isinstance(h.get("path"), str):
                out.append(h["path"])
    return out


def _path_words(value: str) -> list[str]:
    """The path-like parts of one hook argument or env value: the whole word, the value of a
    ``--opt=VALUE`` form, and each entry of a ``:``-separated list (``LD_PRELOAD``, ``PATH``)."""
    words = [value]
    if "=" in value:
        words.append(value.split("=", 1)[1])
    return [p for w in words for p in w.split(":") if p]


def hook_references(cfg: dict[str, Any], bundle: str) -> list[tuple[str, str]]:
    """(JSON pointer, host path) of every path a host-side hook names in ``args`` (from ``args[1]``:
    ``args[0]`` is only argv[0]) or in an ``env`` value.  Relative words are taken against the bundle
    (the hooks' working directory, runtime-spec runtime.md).  An interpreter's script, an ``LD_PRELOAD``
    or ``BASH_ENV`` file is code run on the host as root, like ``path`` itself.  ``startContainer``
    hooks run inside the sandbox and are left out."""
    out: list[tuple[str, str]] = []
    hooks = cfg.get("hooks")
    for phase, entries in hooks.items() if isinstance(hooks, dict) else ():
        if phase == "startContainer" or not isinstance(entries, list):
            continue
        for i, h in enumerate(entries):
            if not isinstance(h, dict):
                continue
            for key, start in (("args", 1), ("env", 0)):
                values = h.get(key) or []
                for j, v in enumerate(values if isinstance(values, list) else []):
                    if not isinstance(v, str) or j < start:
                        continue
                    v = v.split("=", 1)[1] if key == "env" else v
                    out += [
                        (f"/hooks/{phase}/{i}/{key}/{j}", os.path.join(bundle, w)) for w in _path_words(v)
                    ]
    return out


def exposure_problems(
    cfg: dict[str, Any], bundle: str, rootfs: str, extra_protected: tuple[str, ...] = ()
) -> list[BundleProblem]:
    """Refuse a writable rootfs or bind that contains (or aliases) the bundle, config.json, a hook's
    executable or ``extra_protected`` (the state root): the tenant would rewrite what the runtime reads
    or runs on the host next (a hook, the next ``run``'s config)."""
    binds: list[tuple[str, str, bool]] = []
    for i, m in enumerate(cfg.get("mounts") or []):
        opts = m.get("options") or []
        if (m.get("type") == "bind" or {"bind", "rbind"} & set(opts)) and m.get("source"):
            try:
                binds.append((f"/mounts/{i}/source", bind_source(bundle, m["source"]), "ro" in opts))
            except OSError:
                continue  # _host_problems reports the link
    root_ro = bool((cfg.get("root") or {}).get("readonly"))
    out = []
    for ptr, path in exposed(
        writable_exposures(rootfs, root_ro, binds), [*protected_paths(cfg, bundle), *extra_protected]
    ):
        out.append(
            BundleProblem(
                ptr,
                f"the tenant could write {path}, which the runtime reads or runs on the host later",
                "tenant profile: nothing the runtime reads is writable from inside",
                "use a rootfs / bind source outside the bundle and the "
                "hooks' directories, or make it read-only",
            )
        )
    exposures = writable_exposures(rootfs, root_ro, binds)
    for ptr, path in hook_references(cfg, bundle):
        where = next((e for e, host in exposures if contains(host, path)), None)
        if where is not None:
            out.append(
                BundleProblem(
                    ptr,
                    f"names {path}, which the tenant could write (through {where}); "
                    "the hook runs it on the host",
                    "tenant profile: nothing the runtime reads or runs is writable from inside",
                    "keep the hook's scripts and files outside storage/, the rootfs and read-write binds",
                )
            )
    return out

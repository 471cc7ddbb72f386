"""The Linux planner: Spec + tenant profile → ``Plan`` (bwrap + cgroups), what WILL be enforced and
which capabilities that needs.

Every platform plans from the same ``bundle.Spec``; this is Linux's planner (macOS:
``platforms/darwin/plan.py``, Windows: ``platforms/windows/plan.py``).  The plan is pure: it reads
the Spec and never touches the host.  Refusal happens on its ``required`` list
(``capability.require``) before the mechanism acts.  ``bwrap.build_args`` renders it to bwrap's
argv and the cgroup managers apply its ``resources``; neither re-reads config.json.
"""

from __future__ import annotations

from ...bundle import Spec, hook_references
from ...hardening import tenant
from ...values import Value

TYPE_CHECKING = False  # no typing or dataclasses at run time: create loads this module
if TYPE_CHECKING:
    from typing import Any

#: OCI namespace type → capability name probed for it
NAMESPACE_CAPS = {t: f"namespace.{t}" for t in ("pid", "network", "mount", "ipc", "uts", "user", "cgroup")}


class Mount(Value):
    """One mount, in the sandbox's terms.

    Attributes:
        kind: ``bind`` | ``proc`` | ``dev`` | ``tmpfs`` | ``mqueue`` | ``sysfs`` | ``cgroup``.
        destination: absolute path inside the sandbox (resolved inside the rootfs by the platform).
        source: host path for binds (absolute, canonical); for tmpfs the config's source name
            (``tmpfs``, ``shm``); else "".
        readonly: mounted read-only.
        options: the OCI options kept for the record (e.g. ``size=65536k``, ``mode=1777``).
    """

    __match_args__ = ("kind", "destination", "source", "readonly", "options")
    kind: str
    destination: str
    source: str
    readonly: bool
    options: list[str]

    def __init__(
        self,
        kind: str,
        destination: str,
        source: str = "",
        readonly: bool = False,
        options: list[str] | None = None,
    ) -> None:
        self.kind, self.destination, self.source, self.readonly = kind, destination, source, readonly
        self.options = [] if options is None else options


class Plan(Value):
    """Everything a platform needs to launch one sandbox.  Units: bytes, seconds, microseconds."""

    __match_args__ = (
        "id",
        "bundle",
        "rootfs",
        "root_readonly",
        "args",
        "env",
        "cwd",
        "uid",
        "gid",
        "additional_gids",
        "umask",
        "terminal",
        "hostname",
        "unshare",
        "join",
        "mounts",
        "masked_paths",
        "readonly_paths",
        "devices",
        "capabilities",
        "rlimits",
        "oom_score_adj",
        "resources",
        "cgroups_path",
        "seccomp",
        "network",
        "allow_nested_userns",
        "wall_clock",
        "cpu_time",
        "sysctl",
        "hooks",
        "annotations",
        "required",
        "protected",
        "console_size",
        "inheritable",
        "ambient",
    )
    id: str
    bundle: str
    rootfs: str
    root_readonly: bool
    args: list[str]
    env: dict[str, str]
    cwd: str
    uid: int
    gid: int
    additional_gids: list[int]
    umask: int | None
    terminal: bool
    hostname: str | None
    unshare: list[str]
    join: dict[str, str]
    mounts: list[Mount]
    masked_paths: list[str]
    readonly_paths: list[str]
    devices: list[dict[str, Any]]
    capabilities: list[str]
    rlimits: list[tuple[str, int, int]]
    oom_score_adj: int | None
    resources: dict[str, Any]
    cgroups_path: str
    seccomp: dict[str, Any] | None
    network: str
    allow_nested_userns: bool
    wall_clock: float | None
    cpu_time: int | None
    sysctl: dict[str, str]
    hooks: dict[str, list[dict[str, Any]]]
    annotations: dict[str, str]
    required: list[str]
    #: host paths the tenant must not be able to write (hook executables, the state root)
    protected: list[str]
    #: ``process.consoleSize`` as (height, width) for a terminal sandbox, or None
    console_size: tuple[int, int] | None
    #: the inheritable / ambient sets the workload keeps: the configured ones within ``capabilities``
    #: (bwrap's --cap-add puts every granted capability in both; runc keeps exactly the configured
    #: sets, CVE-2022-24769).  None: as bwrap grants them.
    inheritable: list[str] | None
    ambient: list[str] | None

    def __init__(
        self,
        id: str,
        bundle: str,
        rootfs: str,
        root_readonly: bool,
        args: list[str],
        env: dict[str, str],
        cwd: str,
        uid: int,
        gid: int,
        additional_gids: list[int],
        umask: int | None,
        terminal: bool,
        hostname: str | None,
        unshare: list[str],
        join: dict[str, str],
        mounts: list[Mount],
        masked_paths: list[str],
        readonly_paths: list[str],
        devices: list[dict[str, Any]],
        capabilities: list[str],
        rlimits: list[tuple[str, int, int]],
        oom_score_adj: int | None,
        resources: dict[str, Any],
        cgroups_path: str,
        seccomp: dict[str, Any] | None,
        network: str,
        allow_nested_userns: bool,
        wall_clock: float | None,
        cpu_time: int | None,
        sysctl: dict[str, str],
        hooks: dict[str, list[dict[str, Any]]],
        annotations: dict[str, str],
        required: list[str],
        protected: list[str] | None = None,
        console_size: tuple[int, int] | None = None,
        inheritable: list[str] | None = None,
        ambient: list[str] | None = None,
    ) -> None:
        self.id = id
        self.bundle = bundle
        self.rootfs = rootfs
        self.root_readonly = root_readonly
        self.args = args
        self.env = env
        self.cwd = cwd
        self.uid = uid
        self.gid = gid
        self.additional_gids = additional_gids
        self.umask = umask
        self.terminal = terminal
        self.hostname = hostname
        self.unshare = unshare
        self.join = join
        self.mounts = mounts
        self.masked_paths = masked_paths
        self.readonly_paths = readonly_paths
        self.devices = devices
        self.capabilities = capabilities
        self.rlimits = rlimits
        self.oom_score_adj = oom_score_adj
        self.resources = resources
        self.cgroups_path = cgroups_path
        self.seccomp = seccomp
        self.network = network
        self.allow_nested_userns = allow_nested_userns
        self.wall_clock = wall_clock
        self.cpu_time = cpu_time
        self.sysctl = sysctl
        self.hooks = hooks
        self.annotations = annotations
        self.required = required
        self.protected = [] if protected is None else protected
        self.console_size = console_size
        self.inheritable = inheritable
        self.ambient = ambient

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-serialisable data (``--print-plan``); env values are replaced by ``***``."""
        d: dict[str, Any] = _plain(self)
        d["env"] = {k: "***" for k in self.env}
        return d


def _plain(obj: Any) -> Any:
    """``obj`` as ``dataclasses.asdict`` renders it: a ``Value`` as a dict of its fields, lists, tuples
    and dicts rebuilt (copies all the way down), anything else as it is."""
    if isinstance(obj, Value):
        return {k: _plain(getattr(obj, k)) for k in obj.__match_args__}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_plain(v) for v in obj)
    if isinstance(obj, dict):
        return {_plain(k): _plain(v) for k, v in obj.items()}
    return obj


def _mount(m: dict[str, Any], bundle: str) -> Mount | None:
    """The ``Mount`` for one OCI mount entry; None for devpts (bwrap's /dev already has one)."""
    from ...paths import bind_source

    opts = list(m.get("options") or [])
    kind = m.get("type") or ("bind" if {"bind", "rbind"} & set(opts) else "")
    ro = "ro" in opts
    dest = m["destination"]
    if kind == "bind" or {"bind", "rbind"} & set(opts):
        return Mount("bind", dest, bind_source(bundle, m.get("source") or ""), ro, opts)
    if kind == "proc":
        return Mount("proc", dest, options=opts)
    if kind == "tmpfs" and dest == "/dev":
        return Mount("dev", dest, options=opts)
    if kind == "tmpfs":  # its source names the mount (/dev/shm: "shm"), no host path
        return Mount("tmpfs", dest, str(m.get("source") or "tmpfs"), ro, opts)
    if kind in ("mqueue", "sysfs", "cgroup", "cgroup2"):
        return Mount("cgroup" if kind == "cgroup2" else kind, dest, readonly=ro, options=opts)
    return None


def make_plan(
    spec: Spec, sandbox_id: str, cgroup_parent: str = "/sandbox-shim", state_root: str = ""
) -> Plan:
    """Build the tenant ``Plan`` for ``spec`` (the only profile bundles run under).

    Rules: namespaces listed are new (with ``path``: joined), absent ones shared (runtime-spec
    config-linux.md "Namespaces"); capabilities: ``hardening.capabilities.granted`` (what the process
    holds after runc's execve: the bounding set for uid 0, the ambient set for others) — bwrap gives
    one set to every set; device rules (``devices.rules``) whenever CAP_MKNOD is granted or the config
    lists devices; rlimits applied before user code; the CPU-time setting becomes
    RLIMIT_CPU; no seccomp section → the default tenant filter.

    Raises: ``BundleInvalid`` for a config without a pid namespace or with a ``windows`` section
    (``config_checks.linux_only_problems``) or one joining another mount namespace.
    """
    cfg = spec.config
    from .config_checks import linux_only_problems

    refused = linux_only_problems(cfg)  # the Linux-only rules (validate checks them on a Linux host)
    if refused:
        from ...errors import BundleInvalid

        raise BundleInvalid(refused)
    proc = spec.process
    linux = spec.linux
    user = proc.get("user") or {}

    unshare: list[str] = []
    join: dict[str, str] = {}
    for i, ns in enumerate(linux.get("namespaces") or []):
        if ns.get("path") and ns["type"] == "mount":
            # the runtime would setns(CLONE_NEWNS) and then exec its own helper (bwrap, its ld.so and
            # libraries) by path *inside* that mount namespace: files the other sandbox's tenant planted
            # there would run as the runtime, unconfined, in the host's other namespaces
            from ...errors import BundleInvalid, BundleProblem

            raise BundleInvalid(
                [
                    BundleProblem(
                        f"/linux/namespaces/{i}/path",
                        "joining another mount namespace is not supported: the "
                        "runtime would run files of that namespace before any confinement",
                        "tenant profile: the mount namespace is always the sandbox's own",
                        "drop the path (a new mount namespace), and share data through a bind mount instead",
                    )
                ]
            )
        if ns.get("path"):
            join[ns["type"]] = ns["path"]
        elif ns["type"] not in unshare:
            unshare.append(ns["type"])

    mounts = [mt for mt in (_mount(m, spec.bundle) for m in cfg.get("mounts") or []) if mt is not None]

    from ...hardening.capabilities import granted

    caps = dict(proc.get("capabilities") or {})
    if "bounding" not in caps:  # no bounding set given: never wider than the effective one
        caps["bounding"] = caps.get("effective") or []
    effective = granted(caps, int(user.get("uid", 0)))
    keep_inh = sorted(set(caps.get("inheritable") or []) & set(effective))
    keep_amb = sorted(set(caps.get("ambient") or []) & set(keep_inh))

    rlimits = [(r["type"], int(r["soft"]), int(r["hard"])) for r in proc.get("rlimits") or []]
    if spec.settings.cpu_time:
        rlimits = [r for r in rlimits if r[0] != "RLIMIT_CPU"]
        rlimits.append(("RLIMIT_CPU", spec.settings.cpu_time, spec.settings.cpu_time + 1))

    resources = dict(linux.get("resources") or {})
    if "CAP_MKNOD" in effective or resources.get("devices") or linux.get("devices"):
        # the devices cgroup makes a granted CAP_MKNOD harmless (hardening/capabilities.py)
        from ...devices import rules

        resources["devices"] = rules(linux)
    required = ["bwrap", "seccomp", "no_new_privs"]
    required += [NAMESPACE_CAPS[t] for t in unshare if t in NAMESPACE_CAPS]
    from ...resources import Limits

    required += [f"cgroup.{c}" for c in Limits.from_oci(resources).controllers()]
    if spec.settings.requires:
        required += [r for r in spec.settings.requires if r not in required]

    # without a cgroupsPath: under ``cgroup_parent`` (per state root, so two roots' ids never collide)
    cgroups_path = linux.get("cgroupsPath") or f"{cgroup_parent}/{sandbox_id}"
    if not cgroups_path.startswith("/"):
        cgroups_path = "/sandbox-shim/" + cgroups_path

    return Plan(
        id=sandbox_id,
        bundle=spec.bundle,
        rootfs=spec.rootfs,
        root_readonly=bool((cfg.get("root") or {}).get("readonly")),
        args=list(proc.get("args") or []),
        env=tenant.build_env(proc.get("env")),
        cwd=proc.get("cwd") or "/",
        uid=int(user.get("uid", 0)),
        gid=int(user.get("gid", 0)),
        additional_gids=list(user.get("additionalGids") or []),
        umask=user.get("umask"),
        terminal=bool(proc.get("terminal")),
        hostname=cfg.get("hostname") or None,
        unshare=unshare,
        join=join,
        mounts=mounts,
        masked_paths=list(linux.get("maskedPaths") or []),
        readonly_paths=list(linux.get("readonlyPaths") or []),
        devices=[dict(d) for d in linux.get("devices") or []],
        capabilities=effective,
        inheritable=keep_inh,
        ambient=keep_amb,
        rlimits=rlimits,
        oom_score_adj=proc.get("oomScoreAdj") if isinstance(proc.get("oomScoreAdj"), int) else None,
        resources=resources,
        cgroups_path=cgroups_path,
        seccomp=linux.get("seccomp"),
        network="host" if "network" not in unshare and "network" not in join else spec.settings.network,
        allow_nested_userns=spec.settings.allow_nested_userns,
        wall_clock=spec.settings.wall_clock,
        cpu_time=spec.settings.cpu_time,
        # domainname (and hostname in a joined uts namespace, which bwrap --hostname cannot set): written
        # as kernel.* sysctls inside the sandbox's uts namespace (config_rules refuses them without one);
        # an explicit sysctl of the same name wins
        sysctl={
            **({"kernel.domainname": cfg["domainname"]} if cfg.get("domainname") else {}),
            **({"kernel.hostname": cfg["hostname"]} if cfg.get("hostname") and "uts" in join else {}),
            **(linux.get("sysctl") or {}),
        },
        hooks={k: list(v) for k, v in (cfg.get("hooks") or {}).items()},
        annotations=spec.annotations,
        required=required,
        console_size=(int(proc["consoleSize"]["height"]), int(proc["consoleSize"]["width"]))
        if isinstance(proc.get("consoleSize"), dict) and proc.get("terminal")
        else None,
        protected=[h["path"] for hs in (cfg.get("hooks") or {}).values() for h in hs or [] if h.get("path")]
        + [path for _, path in hook_references(cfg, spec.bundle)]
        + ([state_root] if state_root else []),
    )

"""The OCI ``process`` object given to ``exec --process FILE``, checked against the running sandbox.

runc's ``exec -p`` takes a whole runtime-spec ``process`` object (config.md "process"); podman/conmon and
containerd's shim always send one, with ``user``, ``capabilities``, ``env``, ``cwd``, ``terminal``,
``noNewPrivileges`` and more.  What an exec'd process may ask, and what it always gets:

* ``args``, ``cwd``, ``env`` are honoured; ``env`` replaces the sandbox's environment (as runc does) and
  its names pass the tenant check (``hardening.tenant.check_env``).
* ``user`` (uid, gid, additionalGids, umask): any ids when the sandbox has no user namespace of its own
  (the ids are then the host's and the runtime is root); with a user namespace only the ids it maps,
  which are the sandbox process's own uid and gid (bwrap maps exactly those: bwrap(1) ``--uid``/``--gid``).
* ``capabilities``: never more than the sandbox was created with; asking more is refused, not trimmed.
  With a uid, the set is what that uid holds after execve(2) (``hardening.capabilities.granted``: the
  bounding set for 0, the ambient set for others); a uid other than 0 and the sandbox's own, with no
  capabilities given, holds none.
  The set used is ``effective`` ∩ ``bounding``, the rule the Linux planner applies at create
  (``platforms/linux/plan.make_plan``).
* ``noNewPrivileges`` is always on, and the sandbox's own seccomp filters are always loaded.
* ``apparmorProfile``/``selinuxLabel``: refused when non-empty (a security field this runtime cannot
  enforce, as ``bundle.load`` refuses it at create).  ``rlimits``, ``oomScoreAdj``, ``consoleSize``,
  ``scheduler``, ``ioPriority`` are not applied: the exec'd process takes the sandbox's rlimits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import BundleInvalid, BundleProblem, UsageError

TYPE_CHECKING = False  # no typing at run time: create loads this module
if TYPE_CHECKING:
    from typing import Any


@dataclass
class ExecProcess:
    """What ``exec`` runs, parsed from an OCI process object.

    Attributes:
        args: argv (non-empty); env: NAME -> value (the whole environment when ``env_given``);
        cwd: working directory inside the sandbox or None; terminal: ``process.terminal``;
        user: ``{"uid", "gid", "additional_gids", "umask"}`` as given (keys absent when not given);
        capabilities: the asked set (names) or None when ``process.capabilities`` is absent.
    """

    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    env_given: bool = False
    cwd: str | None = None
    terminal: bool = False
    user: dict[str, Any] = field(default_factory=dict)
    capabilities: list[str] | None = None


#: the capability sets of runtime-spec config.md "process" (each a list of ``CAP_*`` names)
CAP_SETS = ("effective", "bounding", "inheritable", "permitted", "ambient")


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _problem(ptr: str, msg: str, hint: str) -> BundleProblem:
    return BundleProblem("/process" + ptr, msg, "exec: an exec'd process stays within its sandbox", hint)


def parse_process(doc: Any, source: str = "process") -> ExecProcess:
    """Parse an OCI ``process`` object (runtime-spec config.md "process") for exec.

    Args:
        doc: the decoded JSON; source: the file name, for messages.
    Returns:
        ``ExecProcess``.
    Raises:
        UsageError: not an object, or no non-empty ``args`` list.
        BundleInvalid: a malformed field, an env name that looks like a credential, or a security
            field that cannot be enforced (``apparmorProfile``, ``selinuxLabel``); JSON pointers
            start at ``/process``; values of ``env`` are never echoed.
    """
    from .hardening.tenant import check_env

    if not isinstance(doc, dict) or not isinstance(doc.get("args"), list) or not doc["args"]:
        raise UsageError(f'{source}: an OCI process object with a non-empty "args" list is needed')
    problems: list[BundleProblem] = []
    for key in ("apparmorProfile", "selinuxLabel"):
        if doc.get(key):
            problems.append(
                _problem(
                    f"/{key}",
                    f"{key} is set but this runtime cannot enforce it",
                    f'remove "{key}" or leave it empty',
                )
            )
    env_list = doc.get("env")
    if env_list is not None and not isinstance(env_list, list):
        problems.append(_problem("/env", "env must be a list of NAME=VALUE strings", "fix the type"))
        env_list = None
    errors, _warnings = check_env(env_list)
    problems += errors
    user = doc.get("user") or {}
    parsed_user: dict[str, Any] = {}
    if not isinstance(user, dict):
        problems.append(_problem("/user", "user must be an object", "fix the type"))
        user = {}
    for key, name in (("uid", "uid"), ("gid", "gid"), ("umask", "umask")):
        if key in user and user[key] is not None:
            if isinstance(user[key], bool) or not isinstance(user[key], int) or user[key] < 0:
                problems.append(
                    _problem(f"/user/{key}", f"{key} must be a non-negative integer", "fix the value")
                )
            else:
                parsed_user[name] = user[key]
    if user.get("additionalGids") is not None:
        gids = user["additionalGids"]
        if not isinstance(gids, list) or any(
            isinstance(g, bool) or not isinstance(g, int) or g < 0 for g in gids
        ):
            problems.append(
                _problem("/user/additionalGids", "additionalGids must be a list of gids", "fix the value")
            )
        else:
            parsed_user["additional_gids"] = list(gids)
    if user.get("username"):
        problems.append(_problem("/user/username", "username is a Windows field", "use uid and gid"))
    caps: list[str] | None = None
    cdoc = doc.get("capabilities")
    if cdoc is not None:
        if not isinstance(cdoc, dict):
            problems.append(_problem("/capabilities", "capabilities must be an object", "fix the type"))
        else:
            bad = [k for k in CAP_SETS if cdoc.get(k) is not None and not _names(cdoc[k])]
            for k in bad:  # a string would otherwise be taken letter by letter
                problems.append(
                    _problem(
                        f"/capabilities/{k}",
                        f"capabilities.{k} must be a list of capability names",
                        'write ["CAP_KILL", ...], not "CAP_KILL"',
                    )
                )
            eff = cdoc.get("effective") or []
            bnd: list[Any] = cdoc["bounding"] if cdoc.get("bounding") is not None else eff
            if not bad and parsed_user.get("uid") is None:
                caps = sorted(set(eff) & set(bnd))
            elif not bad:  # what the process holds after execve(2), as for the sandbox's own process
                from .hardening.capabilities import granted

                caps = granted({**cdoc, "bounding": bnd}, int(parsed_user["uid"]))
    if problems:
        raise BundleInvalid(problems, what="exec process (--process)")
    env = dict(e.split("=", 1) for e in env_list or [] if isinstance(e, str) and "=" in e)
    cwd = doc.get("cwd")
    return ExecProcess(
        args=[str(a) for a in doc["args"]],
        env=env,
        env_given=env_list is not None,
        cwd=str(cwd) if cwd else None,
        terminal=bool(doc.get("terminal")),
        user=parsed_user,
        capabilities=caps,
    )


def resolve_credentials(
    sandbox_proc: dict[str, Any], user: dict[str, Any] | None, capabilities: list[str] | None
) -> dict[str, Any]:
    """The exec'd process's ids and capabilities, checked against the sandbox's own.

    Args:
        sandbox_proc: the sandbox process as recorded at create (``uid``, ``gid``, ``additional_gids``,
            ``capabilities``, ``userns``: True when its ids live in a user namespace of its own; a
            record without ``userns`` is treated as having one, the narrower rule).
        user: asked ``uid``/``gid``/``additional_gids``/``umask`` (absent keys: the sandbox's), or None.
        capabilities: asked names (``CAP_*``), or None for the sandbox's set.
    Returns:
        ``{"uid", "gid", "additional_gids", "capabilities", "umask"}`` for ``enter.py`` (umask None:
        unchanged, runtime-spec config.md "user": "If unspecified, the umask should not be changed").
    Raises:
        BundleInvalid: capabilities beyond the sandbox's (capabilities(7): never more than it was
            given), or ids its user namespace does not map (user_namespaces(7)).
    """
    user = user or {}
    base_caps = sorted(sandbox_proc.get("capabilities") or [])
    uid = int(user.get("uid", sandbox_proc.get("uid", 0)))
    gid = int(user.get("gid", sandbox_proc.get("gid", 0)))
    groups = [int(g) for g in user.get("additional_gids", sandbox_proc.get("additional_gids") or [])]
    problems: list[BundleProblem] = []
    if sandbox_proc.get("userns", True):
        own_uid, own_gid = int(sandbox_proc.get("uid", 0)), int(sandbox_proc.get("gid", 0))
        if uid != own_uid:
            problems.append(
                _problem(
                    "/user/uid",
                    f"uid {uid} is not mapped in the sandbox's user namespace (only {own_uid} is)",
                    f"use uid {own_uid}",
                )
            )
        if gid != own_gid:
            problems.append(
                _problem(
                    "/user/gid",
                    f"gid {gid} is not mapped in the sandbox's user namespace (only {own_gid} is)",
                    f"use gid {own_gid}",
                )
            )
        extra = sorted(set(groups) - set(sandbox_proc.get("additional_gids") or []) - {own_gid})
        if extra:
            problems.append(
                _problem(
                    "/user/additionalGids",
                    f"gids {extra} are not mapped in the sandbox's user namespace",
                    "remove them",
                )
            )
    caps = base_caps
    if capabilities is None and uid != 0 and uid != int(sandbox_proc.get("uid", 0)):
        # another uid keeps no capability across execve(2) without ambient ones (capabilities(7)),
        # as with runc: ``exec -u 1000`` into a root sandbox holds none
        caps = []
    if capabilities is not None:
        more = sorted(set(capabilities) - set(base_caps))
        if more:
            problems.append(
                _problem(
                    "/capabilities",
                    f"{', '.join(more)} asked but the sandbox was not "
                    "given them; an exec'd process never gets more than its sandbox",
                    f"ask at most: {', '.join(base_caps) or 'no capabilities'}",
                )
            )
        caps = sorted(set(capabilities) & set(base_caps))
    if problems:
        raise BundleInvalid(problems, what="exec process (--process)")
    return {
        "uid": uid,
        "gid": gid,
        "additional_gids": groups,
        "capabilities": caps,
        "umask": user.get("umask"),
    }

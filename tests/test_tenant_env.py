"""The tenant environment: built only from config.json ``process.env`` plus ``DEFAULT_ENV`` (PATH,
HOME, TERM); nothing inherited from the caller; a credential-named variable refused at validation by
its name, never its value, whatever else the config says.

Runtime checks read the workload's own initial environment (``/proc/$$/environ`` of the shell bwrap
exec'd).  CONTROL: a variable the config sets is there with its value; BREACH: variables in the
caller's environment (a credential among them) are not.  Through the CLI and the library.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import base_config, run_shim, wait_pid
from sandbox_runs import RUNNERS, TAG, launch, needs_sandbox
from sandbox_shim.bundle import load
from sandbox_shim.errors import BundleInvalid, ShimError
from sandbox_shim.hardening import tenant

VALUE = "s3cr3t-VALUE-never-echoed-7d41"
CREDENTIAL_NAMES = [
    "AWS_SECRET_ACCESS_KEY",
    "AWS_ACCESS_KEY_ID",
    "GITHUB_TOKEN",
    "api_key",
    "DB_PASSWORD",
    "DB_PASS",
    "PGPASSFILE",
    "MYSQL_PWD",
    "OAUTH_CLIENT",
    "HTTP_AUTHORIZATION",
    "SESSION_ID",
    "SSH_PRIVATE",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "AWS_CREDS",
    "my_Secret",
    "COOKIE_JAR",
    "SSL_PASSPHRASE",
    "REQUEST_SIGNATURE",
]
HARMLESS_NAMES = ["PATH", "HOME", "TERM", "LANG", "PWD", "OLDPWD", "TZ", "PYTHONUNBUFFERED", "HOSTNAME"]


# "; true": without it busybox sh exec's tr, and an environ file opened before exec(2) reads empty
ENVIRON = ["sh", "-c", "tr '\\0' '\\n' < /proc/$$/environ > /storage/out; true"]


def environ(out: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


# -- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CREDENTIAL_NAMES)
def test_credential_names_are_refused_by_name_never_value(name: str) -> None:
    errors, _ = tenant.check_env(["PATH=/bin", f"{name}={VALUE}"])
    assert len(errors) == 1 and errors[0].pointer == "/process/env/1"
    assert name in errors[0].message and VALUE not in str(errors[0])


def test_harmless_names_pass() -> None:
    assert tenant.check_env([f"{n}=x" for n in HARMLESS_NAMES]) == ([], [])


def test_refused_at_validation_whatever_the_annotations_say(make_bundle, tmp_path: Path) -> None:
    cfg = base_config()
    cfg["process"]["env"].append(f"GITHUB_TOKEN={VALUE}")
    cfg["annotations"] = {
        "sandbox-shim.profile": "confinement",
        "sandbox-shim.network": "none",
        "sandbox-shim.allow-nested-userns": "true",
        "sandbox-shim.env": "passthrough",
        "sandbox-shim.allow-credentials": "true",
    }
    b = make_bundle(cfg)
    with pytest.raises(BundleInvalid) as ei:
        load(str(b))
    text = str(ei.value) + json.dumps([p.__dict__ for p in ei.value.problems], default=str)
    assert "GITHUB_TOKEN" in text and VALUE not in text


@needs_sandbox
@pytest.mark.parametrize("how", RUNNERS)
def test_credential_in_config_refused_before_anything_runs(make_bundle, state_root: Path, how: str) -> None:
    cfg = base_config(ENVIRON)
    cfg["process"]["env"].append("VISIBLE=ok")
    b = make_bundle(cfg, name="ctl")
    r = launch(how, state_root, b, "ctl")  # control: the same config without the credential runs
    assert r.code == 0 and environ(r.out).get("VISIBLE") == "ok", r
    cfg["process"]["env"].append(f"AWS_SECRET_ACCESS_KEY={VALUE}")
    b = make_bundle(cfg, name="evil")
    r = launch(how, state_root, b, "evil")
    assert r.code is None and "AWS_SECRET_ACCESS_KEY" in r.refused and "/process/env/" in r.refused, r
    assert VALUE not in r.refused + r.err and not (b / "storage" / "out").exists()
    assert not any(p.name == "evil" for p in state_root.iterdir())


def test_cli_json_log_never_echoes_the_value(make_bundle, state_root: Path) -> None:
    cfg = base_config()
    cfg["process"]["env"].append(f"DB_PASSWORD={VALUE}")
    b = make_bundle(cfg)
    sid = f"j-{TAG}"
    for args in (
        ("create", "--bundle", str(b), sid),
        ("validate", "--bundle", str(b)),
        ("--log-format", "json", "create", "--bundle", str(b), sid),
    ):
        r = run_shim(state_root, *args)
        assert r.returncode != 0 and "DB_PASSWORD" in r.stdout + r.stderr, (args, r)
        assert VALUE not in r.stdout + r.stderr, args


# -- runtime -------------------------------------------------------------------------------------


@needs_sandbox
@pytest.mark.parametrize("how", RUNNERS)
def test_nothing_inherited_from_the_caller(make_bundle, state_root: Path, how: str) -> None:
    cfg = base_config(ENVIRON)
    cfg["process"]["env"] = ["CONFIG_MARKER=from-config", "PATH=/bin:/usr/bin"]
    caller = {"LEAK_PROBE": "from-caller", "AWS_SECRET_ACCESS_KEY": VALUE, "SANDBOX_SHIM_PROBE": "x"}
    r = launch(how, state_root, make_bundle(cfg), "env", caller)
    env = environ(r.out)
    assert r.code == 0 and env.get("CONFIG_MARKER") == "from-config", r  # control: config's variables pass
    assert "LEAK_PROBE" not in env and "SANDBOX_SHIM_PROBE" not in env and VALUE not in r.out
    # exactly the config's variables over the documented defaults (the config's PATH wins), and the
    # PWD bwrap sets after --chdir (bwrap(1) --chdir)
    assert env == {**tenant.DEFAULT_ENV, "CONFIG_MARKER": "from-config", "PATH": "/bin:/usr/bin", "PWD": "/"}


@needs_sandbox
@pytest.mark.parametrize("how", RUNNERS)
def test_defaults_without_process_env(make_bundle, state_root: Path, how: str) -> None:
    cfg = base_config(ENVIRON)
    del cfg["process"]["env"]
    r = launch(how, state_root, make_bundle(cfg), "def", {"TERM": "caller-term", "HOME": "/caller"})
    assert r.code == 0 and environ(r.out) == {**tenant.DEFAULT_ENV, "PWD": "/"}, r
    assert set(tenant.DEFAULT_ENV) == {"PATH", "HOME", "TERM"}


@needs_sandbox
def test_exec_env_option_cannot_add_a_credential(make_bundle, state_root: Path, tmp_path: Path) -> None:
    import sandbox_shim
    from sandbox_shim.execution import execute

    b = make_bundle(base_config(["sh", "-c", "sleep 30"]))
    sid = f"ex-{TAG}"
    mech = sandbox_shim.default_mechanism(str(state_root))
    st = sandbox_shim.provision(mech, sandbox_shim.Sandbox(sid, str(b)))
    try:
        sandbox_shim.start(mech, sid)
        done = execute(mech, sid, ("sh", ["-c", "echo $HARMLESS"]), env={"HARMLESS": "EXEC-OK"})
        assert b"EXEC-OK" in done.stdout  # control: exec's env option works for an ordinary name
        with pytest.raises(ShimError) as ei:
            execute(mech, sid, ("sh", ["-c", "env"]), env={"AWS_SECRET_ACCESS_KEY": VALUE})
        assert "AWS_SECRET_ACCESS_KEY" in str(ei.value) and VALUE not in str(ei.value)
    finally:
        sandbox_shim.destroy(mech, sid, force=True)
        wait_pid(st.pid)

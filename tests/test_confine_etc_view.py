"""The /etc view of confine (``platforms/linux/confine.etc_view``): the read-only entries directly in
/etc come from one bind of a per-user copy instead of one bind each, with nothing more readable.

Control first: the host's content is what the confined program reads, through the view.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sandbox_shim.hardening.confinement import confine
from sandbox_shim.platforms.linux import confine_state

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not os.access("/usr/bin/bwrap", os.X_OK),
    reason="needs Linux with bwrap at /usr/bin/bwrap",
)


def fake_etc(tmp_path: Path) -> tuple[Path, list[str]]:
    """An /etc stand-in: two files, a link, a small directory tree (copied into the view) and a big
    one (bound on its own); returns it and its entries."""
    etc = tmp_path / "etc"
    (etc / "ssl" / "certs").mkdir(parents=True)
    for i in range(confine_state.ETC_VIEW_MAX_TREE + 1):
        (etc / "ssl" / "certs" / f"c{i}.pem").write_text(f"cert {i}\n")
    (etc / "python3" / "sub").mkdir(parents=True)
    (etc / "python3" / "sitecustomize.py").write_text("# site\n")
    (etc / "python3" / "sub" / "link").symlink_to("../sitecustomize.py")
    os.chmod(etc / "python3" / "sub", 0o555)
    (etc / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (etc / "hosts").write_text("127.0.0.1 localhost\n")
    os.chmod(etc / "hosts", 0o4755)  # setuid dropped in the copy
    (etc / "localtime").symlink_to("/usr/share/zoneinfo/UTC")
    return etc, sorted(str(etc / n) for n in ("ssl", "python3", "passwd", "hosts", "localtime"))


def state_env(tmp_path: Path) -> dict[str, str]:
    return {"XDG_STATE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path / "home")}


def test_view_holds_copies_links_and_mount_points_only(tmp_path: Path) -> None:
    etc, entries = fake_etc(tmp_path)
    (etc / "shadow").write_text("secret\n")  # on the host, not in the read set
    got = confine_state.etc_view(entries, [str(tmp_path / "rw")], state_env(tmp_path), etc=str(etc))
    assert got is not None
    view, folded = got
    # ssl (more than ETC_VIEW_MAX_TREE entries) stays bound: only its mount point is in the view
    assert folded == {str(etc / n) for n in ("passwd", "hosts", "localtime", "python3")}
    assert sorted(os.listdir(view)) == ["hosts", "localtime", "passwd", "python3", "ssl"]
    assert Path(view, "passwd").read_text() == "root:x:0:0::/root:/bin/sh\n"
    assert os.stat(Path(view, "hosts")).st_mode & 0o7777 == 0o755
    assert os.readlink(Path(view, "localtime")) == "/usr/share/zoneinfo/UTC"
    assert Path(view, "ssl").is_dir() and os.listdir(Path(view, "ssl")) == []
    assert Path(view, "python3", "sitecustomize.py").read_text() == "# site\n"
    assert os.readlink(Path(view, "python3", "sub", "link")) == "../sitecustomize.py"
    assert os.stat(Path(view, "python3", "sub")).st_mode & 0o777 == 0o555
    for rel in ("passwd", "python3", "python3/sitecustomize.py", "python3/sub"):  # times kept
        assert os.stat(Path(view, rel)).st_mtime_ns == os.stat(etc / rel).st_mtime_ns
    assert str(tmp_path / "state") in view  # the user's state directory
    # the same entries unchanged: the same view, not a new copy
    again = confine_state.etc_view(entries, [str(tmp_path / "rw")], state_env(tmp_path), etc=str(etc))
    assert again == got


def test_a_changed_entry_gives_a_new_view_and_stale_ones_go(tmp_path: Path) -> None:
    etc, entries = fake_etc(tmp_path)
    env, rw = state_env(tmp_path), [str(tmp_path / "rw")]
    first = confine_state.etc_view(entries, rw, env, etc=str(etc))
    assert first is not None
    (etc / "hosts").write_text("10.0.0.1 changed\n")  # written in place
    second = confine_state.etc_view(entries, rw, env, etc=str(etc))
    assert second is not None and second[0] != first[0]
    assert Path(second[0], "hosts").read_text() == "10.0.0.1 changed\n"
    assert os.path.isdir(first[0])  # used a moment ago: another confinement may be binding it
    (etc / "python3" / "sitecustomize.py").write_text("# changed\n")  # in a copied tree
    changed = confine_state.etc_view(entries, rw, env, etc=str(etc))
    assert changed is not None and changed[0] != second[0]
    assert Path(changed[0], "python3", "sitecustomize.py").read_text() == "# changed\n"
    (etc / "ssl" / "certs" / "new.pem").write_text("new\n")  # in a bound tree: still the same view
    assert confine_state.etc_view(entries, rw, env, etc=str(etc)) == changed
    tmp = etc / "hosts.new"
    tmp.write_text("10.0.0.2 replaced\n")
    os.rename(tmp, etc / "hosts")  # replaced by rename (a new inode)
    old = time.time() - confine_state.ETC_VIEW_STALE_S - 5
    os.utime(first[0], (old, old))
    third = confine_state.etc_view(entries, rw, env, etc=str(etc))
    assert third is not None and Path(third[0], "hosts").read_text() == "10.0.0.2 replaced\n"
    assert not os.path.exists(first[0])  # unused past ETC_VIEW_STALE_S: removed
    assert os.path.isdir(second[0])


def test_no_view_when_it_cannot_hold_the_entries(tmp_path: Path) -> None:
    etc, entries = fake_etc(tmp_path)
    env = state_env(tmp_path)
    assert confine_state.etc_view(entries, [str(tmp_path / "rw")], env, etc=str(etc)) is not None
    deeper = [*entries, str(etc / "ssl" / "certs")]  # its mount point would be needed in the view
    assert confine_state.etc_view(deeper, [str(tmp_path / "rw")], env, etc=str(etc)) is None
    # the state directory inside a read-write path: the confined program could write the view
    assert confine_state.etc_view(entries, [str(tmp_path / "state")], env, etc=str(etc)) is None
    assert confine_state.etc_view(entries, [str(tmp_path)], env, etc=str(etc)) is None
    os.mkfifo(etc / "fifo")
    assert confine_state.etc_view([*entries, str(etc / "fifo")], [], env, etc=str(etc)) is None
    os.mkfifo(etc / "python3" / "fifo")  # in a small tree: that tree is bound instead of copied
    got = confine_state.etc_view(entries, [], env, etc=str(etc))
    assert got is not None and str(etc / "python3") not in got[1] and str(etc / "passwd") in got[1]
    assert os.listdir(Path(got[0], "python3")) == []
    assert confine_state.etc_view([], [], env, etc=str(etc)) is None


def test_confined_program_reads_the_host_etc_through_one_bind(tmp_path: Path) -> None:
    permit = tmp_path / "p"
    permit.mkdir()
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    script = "cat /etc/passwd; ls /etc/ssl >/dev/null && echo SSL; echo x > /etc/hosts || echo RO"
    spec = confine(("/bin/sh", ["-c", script]), permit_path=str(permit), env=env, trial=False)
    try:
        r = subprocess.run(
            [spec["cmd"], *spec["args"]],
            env=spec["env"],
            cwd=spec["cd"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        spec.release()
    # control: the host's own /etc/passwd, and /etc/ssl (a directory: still bound) is listed
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(Path("/etc/passwd").read_text()), r.stdout
    assert "SSL" in r.stdout and r.stdout.rstrip().endswith("RO")
    argv = [spec["cmd"], *spec["args"]]
    binds = [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a in ("--ro-bind", "--bind")]
    views = [s for s, d in binds if d == "/etc"]
    assert len(views) == 1 and views[0].startswith(str(tmp_path / "state"))
    assert not any(d in ("/etc/passwd", "/etc/hosts") for _, d in binds)
    if any(layer.startswith("landlock ABI") for layer in spec.layers):  # still one rule per path
        inside = argv[argv.index("--") + 1 :]
        assert ["--rule", "13", "/etc/passwd"] == inside[
            inside.index("/etc/passwd") - 2 : inside.index("/etc/passwd") + 1
        ]

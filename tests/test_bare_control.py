"""The conformance suite's bare-bwrap control argv (``platforms/linux/bare.py``): a pure function."""

from __future__ import annotations


def test_the_suites_bare_control_argv_is_a_pure_function_of_its_inputs() -> None:
    """The conformance suite's control outside the tenant profile (``platforms/linux/bare.py``): the
    rootfs read-only, storage read-write, each capability kept, a network namespace of its own unless
    shared; the same inputs give the same argv, and nothing on the host is touched."""
    from sandbox_shim.platforms.linux.bare import control_argv

    argv = control_argv("/b", "/r", "/s", "/storage", ["CAP_NET_RAW"], False, ["sh", "-c", "true"])
    assert argv == [
        "/b", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
        "--unshare-net", "--ro-bind", "/r", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
        "--bind", "/s", "/storage", "--chdir", "/", "--cap-add", "CAP_NET_RAW", "--", "sh", "-c", "true",
    ]  # fmt: skip
    shared = control_argv("/b", "/r", "/s", "/storage", [], True, ["id"])
    assert "--unshare-net" not in shared and "--cap-add" not in shared and shared[-2:] == ["--", "id"]
    assert control_argv("/b", "/r", "/s", "/storage", [], True, ["id"]) == shared

"""Build step beyond pyproject.toml: the Linux confinement's exec helper, a small C program.

``sandbox_shim/platforms/linux/confine_exec.c`` is compiled to ``sandbox-shim-confine-exec`` beside it
(statically linked where the C library allows, so it needs nothing inside the sandbox).  It is
optional: without a C compiler the install still succeeds and ``sandbox-shim confine`` applies
Landlock with the slower Python helper (``platforms/linux/landlock.py``) instead.

And the ``sandbox-shim`` command: on Linux the launcher ``bin/sandbox-shim`` (a file both /bin/sh and
Python read: it starts the interpreter without ``site``), elsewhere pip's console script.
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HELPER = "sandbox_shim.platforms.linux.sandbox-shim-confine-exec"


class BuildHelper(build_ext):
    """Links the helper as an executable (not an extension module); a failure is reported, not fatal."""

    def get_ext_filename(self, fullname: str) -> str:
        if fullname == HELPER:
            return os.path.join(*fullname.split("."))
        if fullname == HELPER.rsplit(".", 1)[1]:  # distutils asks with the last component only
            return fullname
        return super().get_ext_filename(fullname)

    def build_extension(self, ext: Extension) -> None:
        if ext.name != HELPER:
            super().build_extension(ext)
            return
        out = self.get_ext_fullpath(ext.name)
        where = os.path.dirname(out)
        os.makedirs(where, exist_ok=True)
        try:
            objs = self.compiler.compile(
                ext.sources, output_dir=self.build_temp, extra_postargs=["-O2", "-Wall"]
            )
            for extra in (["-static"], []):  # static where libc.a exists, else dynamic
                try:
                    self.compiler.link_executable(
                        objs, os.path.basename(out), output_dir=where, extra_postargs=[*extra, "-s"]
                    )
                    break
                except Exception:
                    if not extra:
                        raise
        except Exception as e:  # optional: the Python helper stands in
            print(f"warning: {HELPER} not built ({e}); confine will use the Python helper", file=sys.stderr)


SOURCE = "shim/sandbox_shim/platforms/linux/confine_exec.c"
PLUGIN = {"pytest11": ["sandbox_shim_conformance = sandbox_shim.conformance.plugin"]}
if sys.platform == "linux":  # the wheel is platform-tagged here (the helper): the launcher stays on Linux
    # ``bin/sandbox-shim``: /bin/sh starts the venv's interpreter with -I -S, then the file's Python
    # part puts the package's site-packages on sys.path itself (README "Set up")
    where = {
        "ext_modules": [Extension(HELPER, [SOURCE])],
        "scripts": ["bin/sandbox-shim"],
        "entry_points": PLUGIN,
    }
else:
    where = {"entry_points": {**PLUGIN, "console_scripts": ["sandbox-shim = sandbox_shim.cli:main"]}}
setup(cmdclass={"build_ext": BuildHelper}, **where)

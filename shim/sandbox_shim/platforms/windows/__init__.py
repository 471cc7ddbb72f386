"""Windows: a Job Object per sandbox (ARCHITECTURE.md section 6).

``job_object`` (ctypes structures and Win32 calls), ``plan`` (OCI config -> ``JobPlan``, requirements),
``capabilities`` (probes by trying), ``mechanism`` (``WindowsJobMechanism``).  Nothing is imported here,
so importing the package costs nothing on other hosts.
"""

#: the ``sys.platform`` value this package serves: the one place it is stated for the tooling
#: (``scripts/mypy-platform`` checks each folder as mypy sees it on that OS; the tests take the
#: platforms from the folders)
SYS_PLATFORM = "win32"

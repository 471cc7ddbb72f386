"""Windows: a Job Object per sandbox (ARCHITECTURE.md section 6).

``job_object`` (ctypes structures and Win32 calls), ``plan`` (OCI config -> ``JobPlan``, requirements),
``capabilities`` (probes by trying), ``mechanism`` (``WindowsJobMechanism``).  Nothing is imported here,
so importing the package costs nothing on other hosts.
"""

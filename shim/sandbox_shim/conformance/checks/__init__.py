"""The conformance checks, one module per group (or part of one).  Every module here is imported by
``helpers.all_checks`` and registers its checks with ``helpers.check``: adding a check group is
adding a module to this folder (``sandbox-shim conformance --group NAME`` then accepts it)."""

#: the order the report shows the groups in; a group not named here runs after these (by name)
ORDER = ("Lifecycle", "Isolation", "ResourceLimits", "Execution")

"""The conformance checks, one module per group (or part of one).  Every module here is imported by
``helpers.all_checks`` and registers its checks with ``helpers.check``: adding a check group is
adding a module to this folder."""

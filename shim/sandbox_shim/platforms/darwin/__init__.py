"""macOS: sandbox-exec with an SBPL profile (ARCHITECTURE.md section 6).  Nothing is imported here."""

#: the ``sys.platform`` value this package serves: the one place it is stated for the tooling
#: (``scripts/mypy-platform`` checks each folder as mypy sees it on that OS; the tests take the
#: platforms from the folders)
SYS_PLATFORM = "darwin"

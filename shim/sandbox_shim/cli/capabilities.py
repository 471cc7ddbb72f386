"""``sandbox-shim capabilities`` and ``sandbox-shim features``: parse, call the library, render.

``capabilities`` probes this host now (no cache: a person asking wants the truth of this moment) and
prints a table, or JSON valid against schemas/capabilities.schema.json.  ``features`` prints the OCI
features document (runtime-spec features.md) as JSON, as ``runc features`` does.  Both exit 0.
"""

from __future__ import annotations

from typing import Any

import click

from .output import emit_json


def render_table(doc: dict[str, Any]) -> str:
    """The report as aligned text columns: NAME, AVAILABLE, MECHANISM, DETAIL (or what was measured)."""
    rows = [("NAME", "AVAILABLE", "MECHANISM", "DETAIL / MEASURED BY")]
    for c in doc["capabilities"]:
        rows.append(
            (
                c["name"],
                "yes" if c["available"] else "no",
                c["mechanism"] or "-",
                c["detail"] or c["measured_by"],
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3] for r in rows]
    host = doc["host"]
    lines.append(
        f"\n{host['platform']} {host['arch']}, kernel {host['kernel']}; probed in {doc['elapsed_ms']:.0f} ms"
    )
    return "\n".join(lines)


@click.command("capabilities")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people, json for programs (schemas/capabilities.schema.json).",
)
def capabilities_cmd(fmt: str) -> None:
    """Probe what this host can enforce, by trying each thing."""
    from ..capability import document

    doc = document()
    if fmt == "json":
        emit_json(doc)
    else:
        click.echo(render_table(doc))


@click.command("features")
def features_cmd() -> None:
    """Print the OCI features document (runtime-spec features.md) for this runtime on this host."""
    from ..features import features

    emit_json(features())

"""MkDocs hook: draws docs/diagrams/*.dot with Graphviz's `dot` into the SVGs beside them, before each build.

The pictures are text in the repository: change the .dot and the build redraws its SVG. The SVGs
are committed too, so that the README (read outside the site) shows the architecture; a test fails
when one differs from what its .dot draws. A file is written only when its drawing changed, so
`mkdocs serve` does not rebuild forever. A missing `dot` fails the build with what to install.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError


def draw(source: Path) -> bytes:
    """The SVG that Graphviz draws from one .dot file."""
    dot = shutil.which("dot")
    if dot is None:
        raise PluginError("the diagrams need Graphviz's `dot`: apt-get install graphviz")
    drawn = subprocess.run([dot, "-Tsvg", str(source)], capture_output=True, check=False)
    if drawn.returncode != 0:
        raise PluginError(f"{source.name}: {drawn.stderr.decode(errors='replace').strip()}")
    return drawn.stdout


def on_pre_build(config: Any) -> None:  # noqa: ANN401 - MkDocs' config object
    """MkDocs' hook before a build: every diagram whose drawing changed is written again."""
    for source in sorted((Path(config["docs_dir"]) / "diagrams").glob("*.dot")):
        target, svg = source.with_suffix(".svg"), draw(source)
        if not target.exists() or target.read_bytes() != svg:
            target.write_bytes(svg)

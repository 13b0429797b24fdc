"""A chart's static forms: SVG (the book's fallback for each interactive figure) and PNG (for papers).

Apart from ``companion.report.figures`` so that the stage runner, which renders every executed notebook's
charts, imports neither Altair nor the models: a chart arrives as its Vega-Lite spec, or as any object with
``to_dict()`` (an Altair chart).
"""

from __future__ import annotations

import json
from pathlib import Path


def static_spec(chart, width_px: int = 640) -> dict:
    """The chart's spec with a fixed width in place of the column's (for SVG/PNG exports)."""
    spec = chart if isinstance(chart, dict) else chart.to_dict()
    spec = json.loads(json.dumps(spec))

    def fix(node):
        if isinstance(node, dict):
            if node.get("width") == "container":
                node["width"] = width_px
            for v in node.values():
                fix(v)
        elif isinstance(node, list):
            for v in node:
                fix(v)

    fix(spec)
    return spec


def to_svg(chart) -> str:
    import vl_convert as vlc

    return vlc.vegalite_to_svg(static_spec(chart))


def export(chart, folder: Path, name: str) -> list[Path]:
    """Write ``name.svg`` and ``name.png`` (for papers) and return their paths."""
    import vl_convert as vlc

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    spec = static_spec(chart)
    svg, png = folder / f"{name}.svg", folder / f"{name}.png"
    svg.write_text(vlc.vegalite_to_svg(spec))
    png.write_bytes(vlc.vegalite_to_png(spec, scale=2))
    return [svg, png]

#!/usr/bin/env python3
"""Writes a PNG beside every SVG under the given folders (default: docs), so the plots and the
architecture picture show where SVG does not (some viewers, chat tools, PDF exports). Run it after
regenerating plots (`switchyard sim --suite --out docs/suite ...`); a test checks every SVG under
docs/ has its PNG. Needs `pip install cairosvg`.

    scripts/svg_to_png.py [FOLDER...]
"""

import pathlib
import sys

import cairosvg

WIDTH = 1200


def main():
    folders = [pathlib.Path(f) for f in sys.argv[1:]] or [pathlib.Path("docs")]
    for folder in folders:
        for svg in sorted(folder.rglob("*.svg")):
            png = svg.with_suffix(".png")
            cairosvg.svg2png(url=str(svg), write_to=str(png), output_width=WIDTH)
            print(f"{png} ({png.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()

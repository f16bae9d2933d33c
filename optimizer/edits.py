"""Editable regions and strict edits.

Editable regions sit between a line containing ``# EVOLVE-BLOCK-START`` and a line
containing ``# EVOLVE-BLOCK-END``; outside them nothing may change. A file without any
marker is editable as a whole.
"""

from __future__ import annotations

START = "EVOLVE-BLOCK-START"
END = "EVOLVE-BLOCK-END"


def evolve_regions(source: str) -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of the editable regions of ``source``.

    A region starts after the end of the START marker's line and ends at the beginning of
    the END marker's line. A file without markers is one region covering everything.
    Unbalanced markers raise ValueError.
    """
    regions: list[tuple[int, int]] = []
    pos = 0
    open_at: int | None = None
    for line in source.splitlines(keepends=True):
        if START in line:
            if open_at is not None:
                raise ValueError("nested EVOLVE-BLOCK-START")
            open_at = pos + len(line)
        elif END in line:
            if open_at is None:
                raise ValueError("EVOLVE-BLOCK-END without START")
            regions.append((open_at, pos))
            open_at = None
        pos += len(line)
    if open_at is not None:
        raise ValueError("EVOLVE-BLOCK-START without END")
    if not regions and START not in source:
        return [(0, len(source))]
    return regions

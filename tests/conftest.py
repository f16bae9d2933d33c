"""Suite-wide settings: property-based tests draw the same examples on every run, so a CI
result never depends on the luck of the draw (run with HYPOTHESIS_PROFILE=explore to
search afresh)."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

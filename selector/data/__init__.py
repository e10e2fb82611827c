"""Data the selector ships: the coverage map (see COVERAGE-MAP.md for how it was made)."""

"""Data shipped with crcr: PyTorch's published CI statistics (see pytorch-stats/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent
PYTORCH_STATS = DATA_DIR / "pytorch-stats"
TEST_TIMES = PYTORCH_STATS / "test-times.json"
DISABLED_TESTS = PYTORCH_STATS / "disabled-tests-condensed.json"
SLOW_TESTS = PYTORCH_STATS / "slow-tests.json"
FLAKY_RULES = PYTORCH_STATS / "flaky-rules.json"
KEYWORD_WEIGHTS = DATA_DIR / "keyword-weights.json"  # learned by crcr select evaluate --write-keyword-weights

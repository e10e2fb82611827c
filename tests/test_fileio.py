"""Atomic writes: whole file or nothing, readable like any other file the user writes."""

from __future__ import annotations

import os
import stat

import pytest

from crcr.fileio import atomic_write_text


def test_atomic_write_replaces_whole_and_uses_normal_permissions(tmp_path):
    target = tmp_path / "sub" / "results.json"
    atomic_write_text(target, "first")
    atomic_write_text(target, "second")
    assert target.read_text() == "second"
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask
    assert [p.name for p in target.parent.iterdir()] == ["results.json"]  # no temp files left


def test_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "plan.yaml"
    atomic_write_text(target, "old")
    with pytest.raises(UnicodeEncodeError):
        atomic_write_text(target, "\udcff")  # lone surrogate cannot be encoded
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["plan.yaml"]

"""The compiled kernels' disk cache is keyed by content: the same sources share entries wherever they are
installed, and a change to any kernel source retires every entry that may have inlined it."""

from __future__ import annotations

from pathlib import Path

from packrt_kernels_cpu import kernel_cache


def _package(root: Path) -> Path:
    (root / "conv").mkdir(parents=True)
    (root / "kernels.py").write_text("def act(v): return v\n")
    (root / "plan.py").write_text("from .kernels import act\n")
    (root / "conv" / "_numba.py").write_text("X = 1\n")
    return root


def test_a_kernel_entry_is_retired_when_a_sibling_source_it_may_inline_changes(tmp_path: Path) -> None:
    package = _package(tmp_path / "pkg")
    before = kernel_cache.source_hash(package / "plan.py", package)
    (package / "kernels.py").write_text("def act(v): return 2 * v\n")
    assert kernel_cache.source_hash(package / "plan.py", package) != before, (
        "plan.py's cache key ignored a change to kernels.py, whose code its compiled kernels inline"
    )
    (package / "conv" / "_numba.py").write_text("X = 2\n")  # a source in a sub-package counts too
    changed = kernel_cache.source_hash(package / "plan.py", package)
    assert changed not in (before, kernel_cache.source_hash(package / "kernels.py", package))


def test_the_same_sources_give_the_same_key_wherever_they_are_installed(tmp_path: Path) -> None:
    one, two = _package(tmp_path / "venv-a" / "pkg"), _package(tmp_path / "venv-b" / "pkg")
    assert kernel_cache.source_hash(one / "plan.py", one) == kernel_cache.source_hash(two / "plan.py", two)


def test_a_file_outside_the_package_is_keyed_by_its_own_content(tmp_path: Path) -> None:
    package = _package(tmp_path / "pkg")
    outside = tmp_path / "user_kernels.py"
    outside.write_text("Y = 1\n")
    before = kernel_cache.source_hash(outside, package)
    (package / "kernels.py").write_text("def act(v): return -v\n")
    assert kernel_cache.source_hash(outside, package) == before
    outside.write_text("Y = 2\n")
    assert kernel_cache.source_hash(outside, package) != before

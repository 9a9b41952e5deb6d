"""Shared fixtures for the suite's own tests."""

from __future__ import annotations

pytest_plugins = ["pytester"]

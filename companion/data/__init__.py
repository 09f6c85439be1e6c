"""Seeded data sets of the course."""

from . import digits

__all__ = ["digits"]

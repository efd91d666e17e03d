"""The package version (a module of its own, so that core can read it without the package API)."""

__version__ = "0.1.0"

"""A shim: the package's metadata is in pyproject.toml (PEP 621); kept for tools that still call setup.py."""

from setuptools import setup

setup()

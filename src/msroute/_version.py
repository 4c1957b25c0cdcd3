"""The msroute version: the one place it is written (``pyproject.toml`` reads it from here).

This module imports nothing, so anything may import it without loading the package's
numerical stack.
"""

__version__ = "0.1.0"

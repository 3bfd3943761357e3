"""pywave's version (a ground module: the package face and the stages read it from here)."""

__version__ = "0.2.0"

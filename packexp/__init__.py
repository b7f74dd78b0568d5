"""packexp: packed neural-network training for hyper-parameter search."""

__version__ = "0.1.0"

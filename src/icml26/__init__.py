"""icml26: reusable implementations of nineteen ICML 2026 methods, each with a claim."""

__version__ = "0.1.0"

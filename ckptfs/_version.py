"""The package version, in a module of its own so every layer can name its writer."""

__version__ = "0.3.0"

"""The ckptfs conformance suite: language-neutral vectors, a runner and adapters (README.md)."""

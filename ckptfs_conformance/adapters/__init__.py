"""Adapters that drive an implementation through the conformance protocol (README)."""

"""The format core: pure functions and frozen values, no I/O.

Everything here works on bytes and Python values so every rule of ``spec/format.md`` can be
tested without a store.
"""

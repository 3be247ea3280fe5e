"""ckptfs benchmarks (W1 growing conversation, W2 bulk, W3 object store, W4 many runs).

They import only ckptfs's public API so they keep working as its internals change.
"""

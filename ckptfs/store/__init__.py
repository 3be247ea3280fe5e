"""The commit protocol and lookups over a Storage: chunks, manifests, run records, heads."""

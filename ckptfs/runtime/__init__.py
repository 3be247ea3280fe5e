"""The runtime: runs, checkpoints at named boundaries, resume, references."""

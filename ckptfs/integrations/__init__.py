"""Adapters that let agent frameworks keep their checkpoints in a ckptfs store.

Each adapter is an optional extra (``pip install 'ckptfs[langgraph]'``) and is imported by its
own module path, so importing ckptfs never imports a framework.
"""

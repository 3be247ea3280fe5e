"""Operations on whole stores: verify, copy, retention and GC, erase, usage, checks."""

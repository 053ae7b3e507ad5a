"""Code generator for the ibverbs C extension."""

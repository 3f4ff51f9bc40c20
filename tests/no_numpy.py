"""A snippet that makes every import of numpy fail, as in an install without the `router`
extra: prepended to a subprocess's script, or written as its ``sitecustomize.py``."""

BLOCK_NUMPY = """
import sys

class NoNumpy:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" or name.startswith("numpy."):
            raise ImportError(f"No module named {name!r} (blocked: a worker-only install)")
        return None

sys.meta_path.insert(0, NoNumpy())
"""

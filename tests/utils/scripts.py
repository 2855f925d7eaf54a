"""A file of tools/ or bench/ (not packages) loaded as a module, for the CPU tests of its pure functions."""

import contextlib
import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def script_module(name: str, folder: str):
    """<folder>/<name>.py as the module `name`, in sys.modules while in use (dataclasses look their module up
    there)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(name, None)

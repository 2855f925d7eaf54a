"""A file of tools/ or bench/ (not packages) loaded as a module, for the CPU tests of its pure functions."""

import contextlib
import importlib.util
import os
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


def device_script_sandbox(tmp_path: pathlib.Path, scripts, stub: str):
    """A repository copy holding tools/device/<scripts> with device_env.sh and scripts/host_compiler.sh, for running
    a device script without a GPU: `stub` is installed as python3 first on PATH (it may exec $REAL_PYTHON for
    what it does not stand in for) and logs to $STUB_LOG. Returns (repo, env, log, out); env sets OUT to out."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "tools" / "device").mkdir(parents=True)
    for f in (*scripts, "device_env.sh"):
        (repo / "tools" / "device" / f).write_bytes((ROOT / "tools" / "device" / f).read_bytes())
    (repo / "scripts" / "host_compiler.sh").write_bytes((ROOT / "scripts" / "host_compiler.sh").read_bytes())
    stub_dir = tmp_path / "bin"
    stub_dir.mkdir()
    (stub_dir / "python3").write_text(stub)
    (stub_dir / "python3").chmod(0o755)
    log, out = tmp_path / "log", tmp_path / "out"
    log.mkdir()
    out.mkdir()
    env = dict(os.environ, PATH=f"{stub_dir}{os.pathsep}{os.environ['PATH']}", REAL_PYTHON=sys.executable,
               STUB_LOG=str(log), OUT=str(out))
    return repo, env, log, out

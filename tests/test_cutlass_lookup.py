"""setup.py's CUTLASS lookup (find_cutlass): SNAPMLA_CUTLASS_DIR first, then the third_party/cutlass submodule
when checked out, then the nvidia-cutlass package; a directory without CuTe's headers stops the build naming it."""

import os
import pathlib
import runpy

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture()
def setup_module():
    return runpy.run_path(str(ROOT / "setup.py"), run_name="snapmla_flags")


def _fake_cutlass(root: pathlib.Path) -> pathlib.Path:
    (root / "include" / "cute").mkdir(parents=True)
    (root / "include" / "cute" / "tensor.hpp").write_text("// fake\n")
    return root


def test_explicit_dir_wins(setup_module, monkeypatch, tmp_path):
    fake = _fake_cutlass(tmp_path / "cutlass")
    monkeypatch.setenv("SNAPMLA_CUTLASS_DIR", str(fake))
    dirs, origin = setup_module["find_cutlass"]()
    assert dirs[0] == os.path.join(str(fake), "include") and "SNAPMLA_CUTLASS_DIR" in origin


def test_explicit_dir_without_headers_stops_the_build(setup_module, monkeypatch, tmp_path):
    monkeypatch.setenv("SNAPMLA_CUTLASS_DIR", str(tmp_path))
    with pytest.raises(SystemExit, match="CUTLASS/CuTe headers not found under .*SNAPMLA_CUTLASS_DIR"):
        setup_module["find_cutlass"]()


def test_submodule_then_package(setup_module, monkeypatch, tmp_path):
    monkeypatch.delenv("SNAPMLA_CUTLASS_DIR", raising=False)
    find = setup_module["find_cutlass"]
    monkeypatch.setitem(find.__globals__, "CUTLASS_SUBMODULE", str(_fake_cutlass(tmp_path / "sub")))
    assert find()[1] == "the third_party/cutlass submodule"
    monkeypatch.setitem(find.__globals__, "CUTLASS_SUBMODULE", str(tmp_path / "not_checked_out"))
    pytest.importorskip("cutlass_library")
    dirs, origin = find()
    assert origin.startswith("the nvidia-cutlass package") and os.path.isfile(os.path.join(dirs[0], "cute", "tensor.hpp"))

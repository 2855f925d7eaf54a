"""tools/profile/sass_opcodes.py (CPU, no extension needed): opcodes classified by class, predicated and
modified opcodes counted, NOP padding left out, anonymous-namespace hashes removed from names, and --diff
reporting only the classes that moved past the tolerance."""

import pytest

from utils.scripts import script_module

SASS = """
        /*0000*/                   QGMMA.64x64x32.F32.E4M3.E4M3 R24, gdesc[UR8], RZ, !UPT ; /* 0x00000000 */
        /*0010*/              @!P0 SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R3+URZ+0x36220], R2 ; /* 0x0 */
        /*0020*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR12], R24 ;       /* 0x0 */
        /*0030*/               @P1 FFMA R4, R5, R6, R7 ;                                  /* 0x0 */
        /*0040*/                   UBLKCP.S.G [UR4], [UR6], UR8 ;                         /* 0x0 */
        /*0050*/                   NOP ;                                                  /* 0x0 */
        /*0060*/                   LDL.64 R2, [R1+0x8] ;                                  /* 0x0 */
        /*0070*/                   PRMT R2, R3, 0x5410, R4 ;                              /* 0x0 */
"""


@pytest.fixture(scope="module")
def ops():
    with script_module("sass_opcodes", "tools/profile") as mod:
        yield mod


def test_counts_by_class(ops):
    c = ops.counts(SASS)
    assert c == {"QGMMA": 1, "SYNCS": 1, "HGMMA": 1, "FP32": 1, "TMA": 1, "LOCAL": 1, "OTHER": 1, "TOTAL": 7}


def test_classify_needs_the_whole_opcode_name(ops):
    assert ops.classify("BAR") == "BAR" and ops.classify("BRA") == "BRA"
    assert ops.classify("BMOV") == "OTHER"  # a prefix of no class name
    assert ops.classify("STSM") == "LDSM/STSM" and ops.classify("STS") == "LDS/STS"


def test_normal_name_drops_the_anonymous_namespace_hash(ops):
    a = "_ZN7snapmla7combine43_GLOBAL__N__3f2a1b0c_7_combine_cu_9d8e7f6a22snapmla_combine_kernelILi1EEEvv"
    assert "_GLOBAL__N_combine_cu" in ops.normal_name(a) and "3f2a1b0c" not in ops.normal_name(a)


def test_diff_reports_only_classes_past_the_tolerance(ops):
    before = {"k": {"QGMMA": 100, "OTHER": 1000, "TOTAL": 1100}, "gone": {"TOTAL": 1}}
    after = {"k": {"QGMMA": 100, "OTHER": 1020, "SYNCS": 4, "TOTAL": 1124}}
    lines = ops.diff(before, after, tolerance_pct=3.0)
    assert any(l.startswith("gone: only in before") for l in lines)
    (k,) = [l for l in lines if l.startswith("k:")]
    assert "SYNCS 0->4" in k and "OTHER" not in k and "QGMMA" not in k
    assert "same within" in ops.diff({"k": {"X": 100}}, {"k": {"X": 102}})[0]

"""tools/profile/sass_sizes.py's parsing of a cuobjdump listing (CPU, no extension needed): instruction offsets of an
opcode with and without a predicate, the span from first to last, the instruction count and the loops."""

import pytest

from utils.scripts import script_module

# The shape of `cuobjdump -sass` output: offset comment, optional predicate, opcode, then the encoding line.
SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;                 /* 0x00000a0000017a02 */
                                                                          /* 0x000fe40000000f00 */
        /*0010*/                   STG.E desc[UR4][R2.64], R5 ;           /* 0x0000000502007986 */
                                                                          /* 0x000fe2000c101904 */
        /*0020*/               @P1 STG.E.64 desc[UR4][R12.64+0x100], R4 ; /* 0x0001000c0c001986 */
                                                                          /* 0x000fe2000c101b04 */
        /*0030*/              @!P2 STG.E desc[UR4][R12.64+0x80], R23 ;    /* 0x0000801c0c00a986 */
                                                                          /* 0x000fe2000c101904 */
        /*0040*/                   EXIT ;                                 /* 0x000000000000794d */
"""


@pytest.fixture(scope="module")
def sizes():
    with script_module("sass_sizes", "tools/profile") as mod:
        yield mod


def test_offsets_span_and_count(sizes):
    assert sizes.offsets(SASS, "STG") == [0x10, 0x20, 0x30]
    assert sizes.code_span(SASS, "STG") == (0x30 - 0x10 + 16, 3)
    assert sizes.code_span(SASS, "UTMALDG") == (0, 0)
    assert sizes.instruction_count(SASS) == 5


def test_summary_names_each_decode_kernel(sizes):
    functions = {"_ZN7snapmla4sm9010decode_fp825snapmla_decode_fp8_kernelI13__nv_fp8_e4m3EEvNS1_12KernelParamsE": SASS}
    lines = sizes.summary(functions)
    assert len(lines) == 1 and lines[0].startswith("snapmla_decode_fp8_kernel ")
    assert "5 instructions" in lines[0] and "3 STG over" in lines[0]


# Two loops (0x10-0x30 and 0x40-0x60) and a barrier wait's retry path at the end (0x80) that branches back to the
# wait inside the second loop: a span that starts inside a loop and ends past it, which is not a loop.
LOOPS_SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;                 /* 0x00000a0000017a02 */
        /*0010*/                   MUFU.EX2 R2, R2 ;                      /* 0x0000000200027308 */
        /*0020*/                   FSEL R3, R3, -INF , P0 ;               /* 0x ... */
        /*0030*/              @!P0 BRA 0x10 ;                             /* 0x ... */
        /*0040*/                   MOV R4, R5 ;                           /* 0x ... */
        /*0050*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR4], R6 ;  /* 0x ... */
        /*0060*/              @!P0 BRA 0x40 ;                             /* 0x ... */
        /*0070*/                   EXIT ;                                 /* 0x ... */
        /*0080*/                   BRA 0x50 ;                             /* 0x ... */
"""


def test_loops_are_backward_branches_that_nest(sizes):
    loops = sizes.loops(LOOPS_SASS)
    assert [dict(lp) for lp in loops] == [{"MUFU": 1, "FSEL": 1, "BRA": 1}, {"MOV": 1, "SYNCS": 1, "BRA": 1}]
    assert sizes.loops(SASS) == []


def _hi(stall: int) -> str:
    """A high encoding word whose stall count (bits 41-44) is `stall`, with other control bits set around it."""
    return f"0x{(stall << 41) | (0x3F << 52) | (1 << 45) | 0x1F0:016x}"


# A loop of three instructions (0x10-0x30) between two that are not in it, with stall counts 1, 4, 2 and 5.
STALL_SASS = f"""
        /*0000*/                   MOV R1, c[0x0][0x28] ;                 /* 0x00000a0000017a02 */
                                                                          /* {_hi(3)} */
        /*0010*/                   FMUL R2, R2, R3 ;                      /* 0x0000000302027220 */
                                                                          /* {_hi(1)} */
        /*0020*/                   UIADD3 UR4, UR4, 0x2, URZ ;            /* 0x0000000204047890 */
                                                                          /* {_hi(4)} */
        /*0030*/              @!P0 BRA 0x10 ;                             /* 0x000000000000894c */
                                                                          /* {_hi(2)} */
        /*0040*/                   EXIT ;                                 /* 0x000000000000794d */
                                                                          /* {_hi(5)} */
"""


def test_stall_counts_are_bits_41_to_44_of_the_high_word(sizes):
    assert sizes.stall_counts(STALL_SASS) == {0x0: 3, 0x10: 1, 0x20: 4, 0x30: 2, 0x40: 5}
    [(span, n, per_op)] = sizes.loop_stalls(STALL_SASS)
    assert span == (0x10, 0x30) and n == 3
    assert dict(per_op) == {"FMUL": 1, "UIADD3": 4, "BRA": 2}
    [line] = sizes.stall_report({"_Z12my_ws_kernelv": STALL_SASS}, "ws_kernel")
    assert "3 instructions, 7 stall cycles (UIADD3 4, BRA 2, FMUL 1)" in line
    assert sizes.stall_report({"_Z5otherv": STALL_SASS}, "ws_kernel") == []

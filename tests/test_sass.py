"""The compiled decode kernel must show the design in SASS: FP8 WGMMA (QGMMA) for QK content and PV,
BF16 WGMMA (HGMMA) for the RoPE k-group, bulk copies of the pages (UBLKCP) and TMA tile loads of the query tile
(UTMALDG), setmaxnreg, and no local-memory traffic.

Reads the built extension with cuobjdump (pip: nvidia-cuda-cuobjdump + nvidia-cuda-nvdisasm, installed by
requirements.txt), so CI checks the SASS of every build without a GPU. Skips when either is missing.
"""

import re

import pytest

from utils.scripts import script_module


@pytest.fixture(scope="module")
def sizes():
    with script_module("sass_sizes", "tools/profile") as mod:
        yield mod


@pytest.fixture(scope="module")
def sass_by_function(sizes):
    """{kernel: SASS} of the built extension (tools/profile/sass_sizes.py finds the tools and splits the listing)."""
    built = sizes.built_extension()
    if not built:
        pytest.skip("the compiled extension (snapmla_ext/_C*.so) is not built")
    if not sizes.find_tool("cuobjdump") or not sizes.find_tool("nvdisasm"):
        pytest.skip("cuobjdump/nvdisasm not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    functions = sizes.sass_by_function(built)
    assert functions, "cuobjdump printed no SASS functions"
    return functions


def _decode_kernel(functions):
    names = [n for n in functions if "snapmla_decode_fp8_kernel" in n]
    assert len(names) == 1, f"expected one decode kernel instantiation, found {names}"
    return functions[names[0]]


def test_decode_kernel_uses_fp8_and_bf16_wgmma_and_tma(sass_by_function):
    sass = _decode_kernel(sass_by_function)
    qk = re.findall(r"QGMMA\.64x64x32\.F32\.E4M3\.E4M3 R\d+, gdesc", sass)  # both operands from shared memory
    pv = re.findall(r"QGMMA\.64x64x32\.F32\.E4M3\.E4M3 R\d+, R\d+, gdesc", sass)  # A = V^T from registers
    hgmma = re.findall(r"HGMMA\.64x64x16\.F32\.BF16", sass)
    # QK: 512 content dims = 16 k32 steps of n64 (N = the 64 tokens of a block); PV (swap AB): O^T = V^T . P^T,
    # per warpgroup 4 m-tiles of its 256 dims x 2 k32 steps, V^T built in registers by ldmatrix.trans.
    assert len(qk) >= 16 and len(qk) % 16 == 0, f"QK content: {len(qk)} SS QGMMA.64x64x32 (16 per block expected)"
    assert len(pv) >= 8 and len(pv) % 8 == 0, f"PV: {len(pv)} RS QGMMA.64x64x32 (8 per block expected)"
    assert len(hgmma) >= 4 and len(hgmma) % 4 == 0, "RoPE k-group (64 dims = 4 BF16 k16 steps) must be HGMMA"
    assert "LDSM.16.MT88.4" in sass and "STSM" not in sass, "V^T must go straight from ldmatrix.trans to the WGMMA"
    # The pages arrive by 1-D bulk copies (content, RoPE, scales: the cache stores the stage's Swizzle-128B image,
    # kv_layout.h), the query tile by TMA tile loads.
    assert len(re.findall(r"UBLKCP\.S\.G", sass)) == 3, "a page must arrive by 3 bulk copies (UBLKCP)"
    assert "UTMALDG" in sass, "the query tile must arrive by TMA"
    assert "USETMAXREG" in sass, "producer/math register split (setmaxnreg) missing"
    # One WARPGROUP.ARRIVE per commit group (the QK, and one per PV m-tile): more would mean ptxas injected fences.
    arrives = len(re.findall(r"WARPGROUP\.ARRIVE", sass))
    assert arrives == len(qk) // 16 + len(pv) // 2, f"{arrives} WARPGROUP.ARRIVE"


def test_no_local_memory_in_any_kernel(sass_by_function):
    for name, sass in sass_by_function.items():
        spills = re.findall(r"\b(LDL|STL)\b", sass)
        assert not spills, f"{name}: local-memory traffic ({len(spills)} LDL/STL): register spills"


def test_narrow_decode_kernel_shows_its_design(sass_by_function):
    """q_rows <= 16 (narrow/kernel.cuh): S^T = K . Q^T and O^T = V^T . P^T with the query rows as N = 16, V^T as
    register A operand built by LDSM.trans, no V^T store to shared memory (no STSM), WGMMAs not serialised."""
    names = [n for n in sass_by_function if "snapmla_decode_fp8_narrow_kernel" in n]
    assert len(names) == 1, f"expected one narrow decode kernel instantiation, found {names}"
    sass = sass_by_function[names[0]]
    qgmma = re.findall(r"QGMMA\.64x16x32\.F32\.E4M3\.E4M3", sass)
    pv_rs = re.findall(r"QGMMA\.64x16x32\.F32\.E4M3\.E4M3 R\d+, R\d+, gdesc", sass)  # A from registers
    hgmma = re.findall(r"HGMMA\.64x16x16\.F32\.BF16", sass)
    # Per block: 16 SS QGMMAs (QK content) + 4 HGMMAs (RoPE) + 16 RS QGMMAs (PV); the block body exists in
    # three variants (no masking, masked softmax, masked softmax and V tail).
    assert len(qgmma) >= 32 and len(qgmma) % 32 == 0, f"{len(qgmma)} QGMMA.64x16x32 (32 per block body expected)"
    assert len(pv_rs) == len(qgmma) // 2, f"PV must take V^T from registers: {len(pv_rs)} of {len(qgmma)} RS"
    assert len(hgmma) >= 4 and len(hgmma) % 4 == 0, "RoPE k-group must be 4 HGMMA.64x16x16 per block body"
    assert "LDSM.16.MT88.4" in sass, "V^T fragments must come from ldmatrix.trans"
    assert "STSM" not in sass, "the narrow kernel must not write V^T back to shared memory"
    assert "UTMALDG" in sass and "USETMAXREG" in sass
    assert len(re.findall(r"UBLKCP\.S\.G", sass)) == 3, "a page must arrive by 3 bulk copies (UBLKCP)"
    # One WARPGROUP.ARRIVE per commit group: 1 QK + 4 PV waves per block body. More means ptxas injected
    # fences (C7519) or serialised the WGMMAs.
    bodies = len(qgmma) // 32
    arrives = len(re.findall(r"WARPGROUP\.ARRIVE", sass))
    assert arrives == 5 * bodies, f"{arrives} WARPGROUP.ARRIVE for {bodies} block bodies (5 each expected)"
    # The piece merge is ordered by two mbarriers over both math warpgroups (narrow/config.h merge_bar), not by
    # named barriers over their 256 threads: compute-sanitizer racecheck reported hazards across those
    # (docs/design.md, narrow kernel). Named barriers stay per warpgroup (128 threads) or CTA-wide (id 0).
    wide_bars = re.findall(r"BAR\.SYNC\S* (\S+), 0x(?!80\b)[0-9a-f]+", sass)
    assert not wide_bars, f"named barriers over more than one warpgroup in the narrow kernel: {wide_bars}"
    assert len(re.findall(r"SYNCS\.ARRIVE\.TRANS64\.A1T0", sass)) >= 4, "mbarrier arrivals of the piece merge missing"


def test_ws_decode_kernel_shows_its_design(sass_by_function):
    """SNAPMLA_DECODE_KERNEL=ws (ws/kernel.cuh): the softmax warpgroup's QK as chain A (8 SS QGMMA) and chain B
    (8 SS QGMMA + 4 HGMMA), the PV warpgroups' 8 RS QGMMA per block (V^T from ldmatrix.trans), the pages by 3
    bulk copies, three register budgets, and no WGMMA serialised (one WARPGROUP.ARRIVE per commit group)."""
    names = [n for n in sass_by_function if "snapmla_decode_fp8_ws_kernel" in n]
    assert len(names) == 1, f"expected one ws decode kernel instantiation, found {names}"
    sass = sass_by_function[names[0]]
    ss = re.findall(r"QGMMA\.64x64x32\.F32\.E4M3\.E4M3 R\d+, gdesc", sass)
    rs = re.findall(r"QGMMA\.64x64x32\.F32\.E4M3\.E4M3 R\d+, R\d+, gdesc", sass)
    hgmma = re.findall(r"HGMMA\.64x64x16\.F32\.BF16", sass)
    # Every chain B (4 HGMMA) comes with 8 SS QGMMA of its own and one chain A (the loop's, or the piece's first).
    assert len(hgmma) >= 4 and len(hgmma) % 4 == 0, f"{len(hgmma)} HGMMA.64x64x16"
    assert len(ss) == 16 * (len(hgmma) // 4), f"{len(ss)} SS QGMMA for {len(hgmma) // 4} chains B"
    assert len(rs) >= 8 and len(rs) % 8 == 0, f"PV: {len(rs)} RS QGMMA.64x64x32 (8 per block body expected)"
    arrives = len(re.findall(r"WARPGROUP\.ARRIVE", sass))
    assert arrives == len(ss) // 8 + len(rs) // 2, f"{arrives} WARPGROUP.ARRIVE (one per chain and PV m-tile)"
    assert "LDSM.16.MT88.4" in sass and "STSM" not in sass
    assert len(re.findall(r"UBLKCP\.S\.G", sass)) == 3, "a page must arrive by 3 bulk copies (UBLKCP)"
    assert "UTMALDG" in sass
    assert len(re.findall(r"USETMAXREG", sass)) == 3, "the PV, softmax and producer register budgets"


def test_ws_softmax_has_an_unmasked_block_loop(sass_by_function, sizes):
    """The ws softmax warpgroup runs the blocks every row sees whole in a loop without the mask's selects and the
    others in a masked one (ws/softmax_wg.cuh): two loops that issue the next block's 16 content QGMMA and take 32
    exponentials per thread, one with the mask's ISETP / FSEL per column, one without."""
    names = [n for n in sass_by_function if "snapmla_decode_fp8_ws_kernel" in n]
    assert len(names) == 1, names
    # Innermost softmax loops only: the piece loop around them holds both.
    softmax = [lp for lp in sizes.loops(sass_by_function[names[0]]) if lp["QGMMA"] == 16 and lp["MUFU"] >= 32]
    assert len(softmax) == 2, f"softmax block loops: {softmax}"
    masked = sorted(softmax, key=lambda lp: lp["FSEL"])
    assert masked[0]["ISETP"] < 8 and masked[0]["FSEL"] < 16, f"the whole-block loop has mask selects: {masked[0]}"
    assert masked[1]["FSEL"] >= 64, f"the masked loop lost its selects: {masked[1]}"


def _kernels(functions, *parts):
    return {n: s for n, s in functions.items() if any(p in n for p in parts)}


def test_decode_kernels_access_shared_memory_as_shared(sass_by_function):
    """kernel_prologue.cuh aligned_storage keeps the address space: every C++ access to the shared storage (k
    scales, hand-off state, merge and epilogue rows) must be LDS / STS, not a generic LD / ST with a 64-bit
    address (34 of them in the wide kernel and 62 in the narrow one when the pointer went through uintptr_t)."""
    kernels = _kernels(sass_by_function, "snapmla_decode_fp8_kernel", "snapmla_decode_fp8_narrow_kernel",
                       "snapmla_decode_fp8_ws_kernel")
    assert len(kernels) == 3
    for name, sass in kernels.items():
        generic = re.findall(r"\b(LD|ST)\.E\b", sass)
        assert not generic, f"{name}: {len(generic)} generic LD/ST (shared memory through a generic pointer)"
        assert re.search(r"\bLDS(\.|\s)", sass), f"{name}: no LDS at all"


def test_pdl_wait_precedes_every_global_access(sass_by_function):
    """Programmatic dependent launch (common/pdl.h): each kernel of a decode call waits for the previous grid
    (griddepcontrol.wait = ACQBULK) before its first global load, store or TMA load; Fused-Q-Quant and both
    decode kernels let the next kernel launch early (griddepcontrol.launch_dependents = PREEXIT). The one
    exception is the decode kernels' guess of their first pages (shared/pdl_point.cuh): relaxed gpu-scope loads
    (LDG.E.STRONG.GPU, no L1 line left behind) and L2 prefetches (UBLKPF), each followed by a wait before any
    other global access."""
    kernels = _kernels(sass_by_function, "q_quant_kernel", "snapmla_decode_fp8_kernel",
                       "snapmla_decode_fp8_narrow_kernel", "snapmla_decode_fp8_ws_kernel", "snapmla_combine_kernel")
    # Q-quant, three decode kernels, the combine's layouts (combine/layout.h): many rows; fan-out with 1, 2 or 4
    # warps per set and 1 .. 512 / (32 x warps per set) sets (3 + 4 + 5); one CTA per row with 1, 2 or 4 sets.
    assert len(kernels) == 1 + 3 + 1 + 12 + 3, sorted(kernels)
    guess = re.compile(r"\bLDG\.E\.STRONG\.GPU\b|\bUBLKPF\b")
    access = re.compile(r"\b(LDG|STG|UTMALDG|UBLKCP|LD|ST)\.|\bUBLKPF\b")
    for name, sass in kernels.items():
        wait = sass.find("ACQBULK")
        assert wait >= 0, f"{name}: no griddepcontrol.wait"
        decode = "decode_fp8" in name
        accesses = [(m.start(), bool(guess.match(sass, m.start()))) for m in access.finditer(sass)]
        first_global = min((at for at, is_guess in accesses if not (decode and is_guess)), default=len(sass))
        assert wait < first_global, f"{name}: a global access comes before griddepcontrol.wait"
        if decode:
            # Every guess load or prefetch lies before a wait, with no other access between it and that wait.
            guesses = [at for at, is_guess in accesses if is_guess]
            assert guesses, f"{name}: no guessed first pages before the wait (pdl_point.cuh)"
            assert any("UBLKPF" in sass[at:at + 12] for at in guesses), f"{name}: no L2 prefetch"
            for at in guesses:
                nxt = sass.find("ACQBULK", at)
                assert nxt > at, f"{name}: a guess load with no wait after it"
                between = [a for a, is_guess in accesses if at < a < nxt and not is_guess]
                assert not between, f"{name}: a global access between the guess and its wait"
        if "combine" not in name:
            assert "PREEXIT" in sass, f"{name}: no griddepcontrol.launch_dependents"


def test_debug_tracers_are_compiled_out(sass_by_function):
    """The phase trace (-DSNAPMLA_TRACE_PHASES, clock()), the CTA timeline (-DSNAPMLA_TRACE_CTA, %globaltimer
    and printf) and the block trace (-DSNAPMLA_TRACE_BLOCKS, the same) exist only in debug builds: the default
    build's decode kernels read no clock (a -DSNAPMLA_TRACE_PHASES build reads SR_CLOCKLO in the wide kernel, the
    two others SR_GLOBALTIMERLO in both)."""
    kernels = _kernels(sass_by_function, "snapmla_decode_fp8_kernel", "snapmla_decode_fp8_narrow_kernel",
                       "snapmla_decode_fp8_ws_kernel")
    assert len(kernels) == 3
    for name, sass in kernels.items():
        clocks = re.findall(r"SR_(?:CLOCK|GLOBALTIMER)\w*", sass)
        assert not clocks, f"{name}: reads {sorted(set(clocks))}: a tracer is compiled in"


# Most bytes of SASS from a decode kernel's first global store to its last: the piece epilogue, where every o
# store of both kernels is (piece_out.cuh). A CTA runs an epilogue once per piece, so each SM fetches these
# instructions cold in the middle of the launch while the other SMs keep L2 and DRAM busy. With a 64-bit address
# per store the wide epilogue was 38 KB (1.05-1.21x slower calls on the H200, with 13-33 us
# epilogues in the traces); with the slab pointer it is 12.3 KB. The narrow one had one copy of its merge and
# stores per warpgroup (34 KB, then 19 KB); with the warpgroup chosen at run time it is 6.2 KB.
EPILOGUE_CODE_BUDGET = {"snapmla_decode_fp8_kernel": 16 * 1024, "snapmla_decode_fp8_narrow_kernel": 10 * 1024,
                        "snapmla_decode_fp8_ws_kernel": 16 * 1024}
# The same rule for the whole kernel (2026-12-01: 5136 and 2496 instructions after the rolled
# producer loop, the narrow kernel's one block body and one merge copy; 8000 and 7128). Unrolled code that runs once per block, piece or request end is fetched cold by every SM. The ws
# kernel: 3952 at its first build (2026-12-03); 4600 since its softmax has a loop without the mask's selects
# beside the masked one (2026-12-04: the masked copy, ~690 instructions, runs for a request's last block or two).
KERNEL_INSTRUCTION_BUDGET = {"snapmla_decode_fp8_kernel": 6000, "snapmla_decode_fp8_narrow_kernel": 3200,
                             "snapmla_decode_fp8_ws_kernel": 5000}


@pytest.mark.parametrize("kernel", sorted(KERNEL_INSTRUCTION_BUDGET))
def test_decode_kernels_stay_small(sass_by_function, sizes, kernel):
    kernels = _kernels(sass_by_function, kernel)
    assert len(kernels) == 1, sorted(kernels)
    n = sizes.instruction_count(next(iter(kernels.values())))
    budget = KERNEL_INSTRUCTION_BUDGET[kernel]
    assert n <= budget, f"{kernel}: {n} SASS instructions (budget {budget})"


@pytest.mark.parametrize("kernel", sorted(EPILOGUE_CODE_BUDGET))
def test_piece_epilogues_are_compact(sass_by_function, sizes, kernel):
    kernels = _kernels(sass_by_function, kernel)
    assert len(kernels) == 1, sorted(kernels)
    span, stores = sizes.code_span(next(iter(kernels.values())), "STG")
    budget = EPILOGUE_CODE_BUDGET[kernel]
    assert span <= budget, f"{kernel}: {stores} global stores over {span} B of SASS (budget {budget} B)"

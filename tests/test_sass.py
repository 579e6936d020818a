"""The SASS classifier on hand-written SASS (exact expectations) and on the real controls."""

import pytest

from flashcore.studies import sass

SYNTHETIC = """
        /*0000*/   S2R R0, SR_TID.X ;
        /*0010*/   LDC R2, c[0x0][0x210] ;
        /*0020*/   ISETP.GE.AND P0, PT, R0, R2, PT ;
        /*0030*/   @P0 EXIT ;
        /*0040*/   LDG.E R4, desc[UR4][R6.64] ;
        /*0050*/   FSETP.GT.AND P1, PT, R4, RZ, PT ;
        /*0060*/   @P1 BRA `(.L_x_1) ;
        /*0070*/   MOV R4, R0 ;
.L_x_1:
        /*0080*/   ISETP.NE.AND P2, PT, R4, RZ, PT ;
        /*0090*/   @P2 STG.E desc[UR4][R8.64], R4 ;
        /*00a0*/   EXIT ;
"""


def test_synthetic_classification():
    r = sass.analyze_sass(SYNTHETIC)
    # @P0 EXIT: thread id vs a parameter (public); @P1 BRA: a loaded value (data).
    assert r["branches"] == {"public": 1, "metadata": 0, "sync": 0, "data": 1}
    # R4 is data on the path that skips the MOV, so the join makes P2 data.
    assert r["guarded_memory"]["data"] == 1
    assert r["blocks"] == 4


def test_plain_write_kills_data():
    text = SYNTHETIC.replace("@P1 BRA `(.L_x_1) ;", "NOP ;")
    r = sass.analyze_sass(text)  # MOV R4, R0 now always overwrites the loaded value
    assert r["guarded_memory"] == {"public": 1, "metadata": 0, "sync": 0, "data": 0}


def test_public_pointer_loads_are_metadata():
    text = SYNTHETIC.replace("LDG.E R4, desc[UR4][R6.64]", "LDG.E R4, desc[UR4][R2.64]").replace(
        "LDC R2, c[0x0][0x210]", "LDC.64 R2, c[0x0][0x228]"
    )
    r = sass.analyze_sass(text, public_params={0x228})
    assert r["branches"]["data"] == 0 and r["branches"]["metadata"] == 1


@pytest.mark.slow
def test_compiled_controls_are_flagged():
    pytest.importorskip("triton.backends.compiler")
    report = sass.analyze_variants()
    controls = [r for r in report["kernels"].values() if r["role"] == "leaky control"]
    assert controls and all(r["branches"]["data"] > 0 for r in controls)
    # Whole kernels: every one reaches its end (a disassembly cut at 4096 instructions
    # would lose the tail, EXIT included).
    assert all(r["opcode_histogram"].get("EXIT", 0) > 0 for r in report["kernels"].values())
    # The verdict counts every shipped forward kernel's flagged branches, the Gluon kernels'
    # included, and a compiled data branch entering it (a control relabelled shipped) fails it.
    ok, why = sass.forward_branch_verdict(report)
    flagged = [
        n
        for n, r in report["kernels"].items()
        if r["role"] in sass.DISPATCHED_ROLES and "forward" in n and r["branches"]["data"]
    ]
    assert ok == (not flagged) and all(n in why for n in flagged)
    nan = dict(report["kernels"]["control: early exit on NaN"], role="shipped")
    ok, why = sass.forward_branch_verdict({"kernels": {"forward with NaN exit": nan}})
    assert not ok and why.startswith("2 in forward with NaN exit")
    assert sass.GLUON_DISPATCH_REASON not in why


# A register that held a loaded value is reused as a mask of packed predicates (ptxas does
# this for the row masks of an epilogue): bit 0 is cleared, then set from a public P0.
PACKED = """
        /*0000*/   S2R R0, SR_TID.X ;
        /*0010*/   LDC R2, c[0x0][0x210] ;
        /*0020*/   LDG.E R5, desc[UR4][R6.64] ;
        /*0030*/   ISETP.GE.AND P0, PT, R0, R2, PT ;
        /*0040*/   LOP3.LUT R5, R5.reuse, 0xfffffffe, RZ, 0xc0, !PT ;
        /*0050*/   @P0 LOP3.LUT R5, R5, 0x1, RZ, 0xfc, !PT ;
        /*0060*/   LOP3.LUT P1, RZ, R5, 0x1, RZ, 0xc0, !PT ;
        /*0070*/   @P1 STG.E desc[UR4][R8.64], R0 ;
        /*0080*/   LOP3.LUT P2, RZ, R5, 0x2, RZ, 0xc0, !PT ;
        /*0090*/   @P2 EXIT ;
        /*00a0*/   EXIT ;
"""


def test_packed_predicate_bits_are_tracked_per_bit():
    r = sass.analyze_sass(PACKED)
    # Bit 0 comes from P0 only: the store it guards is public. Bit 1 still holds the loaded
    # value: the branch on it is data.
    assert r["guarded_memory"] == {"public": 1, "metadata": 0, "sync": 0, "data": 0}
    assert r["branches"]["data"] == 1 and r["data_branches"][0]["text"] == "EXIT"
    # A data predicate packed into bit 0 keeps its taint through the mask.
    data_p0 = PACKED.replace("ISETP.GE.AND P0, PT, R0, R2, PT", "FSETP.GT.AND P0, PT, R5, RZ, PT")
    r = sass.analyze_sass(data_p0)
    assert r["guarded_memory"]["data"] == 1 and r["branches"]["data"] == 1


# A data predicate saved with P2R and restored by a compare on the saved register.
SAVED = """
        /*0000*/   LDG.E R4, desc[UR4][R6.64] ;
        /*0010*/   FSETP.GT.AND P0, PT, R4, RZ, PT ;
        /*0020*/   P2R R9, PR, RZ, 0x1 ;
        /*0030*/   ISETP.GE.AND P0, PT, R0, R2, PT ;
        /*0040*/   ISETP.NE.AND P3, PT, R9, RZ, PT ;
        /*0050*/   @P3 BRA `(.L_x_1) ;
        /*0060*/   NOP ;
.L_x_1:
        /*0070*/   EXIT ;
"""


def test_predicates_saved_with_p2r_keep_their_taint():
    assert sass.analyze_sass(SAVED)["branches"]["data"] == 1
    public = SAVED.replace("P2R R9, PR, RZ, 0x1", "P2R R9, PR, RZ, 0x2")  # saves P1 instead
    assert sass.analyze_sass(public)["branches"]["data"] == 0
    restored = SAVED.replace("ISETP.NE.AND P3, PT, R9, RZ, PT", "R2P PR, R9, 0x1").replace(
        "@P3 BRA", "@P0 BRA"
    )
    assert sass.analyze_sass(restored)["branches"]["data"] == 1


# An indirect branch through a jump table (nvdisasm lists its targets): the targets are
# successors, so what the table dispatches on reaches them. Addresses past 0xffff parse.
JUMP = """
        /*ffe0*/   LDS.U8 R2, [R3+0x100] ;
        /*fff0*/   LDC R4, c[0x2][R2] ;
        /*10000*/  BRX R4 -0x10010    (*"BRANCH_TARGETS .L_x_1,.L_x_2"*) ;
.L_x_1:
        /*10010*/  EXIT ;
.L_x_2:
        /*10020*/  ISETP.NE.AND P0, PT, R2, RZ, PT ;
        /*10030*/  @P0 EXIT ;
        /*10040*/  EXIT ;
"""


def test_jump_table_targets_are_successors():
    instrs, labels = sass.parse_sass(JUMP)
    assert len(instrs) == 7 and instrs[2].targets == [".L_x_1", ".L_x_2"]
    assert instrs[2].text == "BRX R4 -0x10010"
    r = sass.analyze_sass(JUMP)
    assert r["branches"]["data"] == 2  # the BRX on a loaded byte, and @P0 EXIT behind it


def _kernel(role, data_branches):
    return {"role": role, "branches": {"data": len(data_branches)}, "data_branches": data_branches}


GLUON_ENTRY = [
    {"index": 22, "text": "@P0 BRA `(.L_x_1)"},
    {"index": 26, "text": "BRX R2 -0x1b0"},
]


def test_forward_verdict_covers_gluon_and_can_fail():
    clean = {"forward D64 (TMA)": _kernel("shipped", []), "decode": _kernel("shipped", [])}
    ok, why = sass.forward_branch_verdict({"kernels": clean})
    assert ok and why == ""
    # The Gluon kernel counts: its entry dispatch makes the verdict False, with the reason.
    gluon = {**clean, "forward D128 (Gluon)": _kernel("shipped (Gluon)", GLUON_ENTRY)}
    ok, why = sass.forward_branch_verdict({"kernels": gluon})
    assert not ok
    assert why == f"2 in forward D128 (Gluon): {sass.GLUON_DISPATCH_REASON}"
    # A data branch deep in a Gluon kernel's body is not labelled as the dispatch.
    body = GLUON_ENTRY + [{"index": 900, "text": "@P3 BRA `(.L_x_9)"}]
    ok, why = sass.forward_branch_verdict(
        {"kernels": {"forward D128 (Gluon)": _kernel("shipped (Gluon)", body)}}
    )
    assert not ok and why == "3 in forward D128 (Gluon)"
    # A Triton kernel's data branch fails the verdict; controls and decode do not enter it.
    leaky = {
        **clean,
        "forward D128 causal (TMA)": _kernel("shipped", [{"index": 7, "text": "BRX R1 0x0"}]),
        "control": _kernel("leaky control", GLUON_ENTRY),
    }
    ok, why = sass.forward_branch_verdict({"kernels": leaky})
    assert not ok and why == "1 in forward D128 causal (TMA)"
    ok, why = sass.forward_branch_verdict({"kernels": {"control": _kernel("leaky control", [])}})
    assert not ok and why == "no shipped forward kernel in the report"


_LOOPS_SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_0:
        /*0010*/                   IADD3 R5, R5, 0x1, RZ ;
.L_x_1:
        /*0020*/                   MUFU.EX2 R2, R3 ;
        /*0030*/                   FMUL R4, R2, R2 ;
        /*0040*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24 ;
        /*0050*/               @P0 BRA `(.L_x_1) ;
        /*0060*/                   FADD R6, R6, R4 ;
        /*0070*/               @P1 BRA `(.L_x_0) ;
.L_x_2:
        /*0080*/                   FMUL R7, R7, R7 ;
        /*0090*/               @P2 BRA `(.L_x_2) ;
        /*00a0*/                   EXIT ;
.L_x_3:
        /*00b0*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P3, [UR8], R9 ;
        /*00c0*/                   BRA `(.L_x_1) ;
"""


def test_softmax_loops_finds_the_innermost_exp_loop_only():
    from flashcore.studies import sass_budget

    loops = sass_budget.softmax_loops(_LOOPS_SASS)
    # The outer loop holds the inner one; the FMUL-only loop has no exponential; the wait's
    # retry block after EXIT branches back but is no loop.
    assert [(r["start"], r["end"]) for r in loops] == [(2, 5)]
    (loop,) = loops
    assert loop["instructions"] == 4
    assert (loop["MUFU"], loop["FMUL"], loop["GMMA"], loop["other"]) == (1, 1, 1, 1)
    assert loop["gmma_flops"] == 2 * 64 * 128 * 16  # the one wgmma's M x N x K


def test_budget_counts_every_warpgroup_and_the_matmul_flops_the_loop_issues():
    from flashcore.studies import sass_budget

    # A forward key tile (two matmuls, D 128, 128 keys) as the loop's wgmma would issue it.
    flops = sass_budget.tile_flops(head_dim=128, block_n=128)
    assert flops == 2 * 64 * 128 * 256
    loop = {"instructions": 500, "MUFU": 64, "gmma_flops": flops}
    b = sass_budget.budget(loop, warpgroups=2, dtype="bf16")
    assert b["tensor_cycles"] == 2 * flops / 4096
    assert b["issue_cycles"] == 1000 and b["mufu_cycles"] == 2 * 64 * 8
    fp8 = sass_budget.budget(loop, warpgroups=2, dtype="fp8")
    assert fp8["issue_over_tensor"] == 2 * b["issue_over_tensor"]  # twice the rate, same loop
    # The backward's five matmuls of 32 x 128 x 128, three warpgroups.
    loop = {"instructions": 600, "MUFU": 32, "gmma_flops": 5 * 2 * 32 * 128 * 128}
    b = sass_budget.budget(loop, warpgroups=3, dtype="bf16")
    assert b["tensor_cycles"] == 3 * 5 * 2 * 32 * 128 * 128 / 4096
    assert b["issue_cycles"] == 1800 and b["mufu_cycles"] == 3 * 32 * 8


@pytest.mark.slow
def test_gluon_forward_turn_barriers_clear_of_tritons_own():
    """The ping-pong turn's inline named barriers (forward_hopper.TURN_BARRIER_0 and up) sit
    above every named barrier triton numbers itself in each shipped Gluon forward build, and
    appear in exactly the builds that pass the turn on them (PINGPONG 2)."""
    pytest.importorskip("triton.backends.compiler")
    from flashcore.kernels import forward_hopper as fh
    from flashcore.studies import sass_budget

    if not fh.GLUON_AVAILABLE:
        pytest.skip("triton without Gluon's Hopper API")
    rows = sass_budget.barrier_report()
    for row in rows:
        assert row["triton_ids"] and max(row["triton_ids"]) < fh.TURN_BARRIER_0.value, row
        assert (row["register_id_barriers"] > 0) == (row["pingpong"] == 2), row
    assert any(row["pingpong"] == 2 for row in rows)


@pytest.mark.slow
def test_gluon_forward_softmax_loops_convert_p_without_half_swaps():
    """The shipped bf16 Gluon forward builds, compiled offline: no PRMT in their softmax loops.
    P converted one value at a time and packed (before 1e7d429) left one PRMT per two scores,
    32 per key tile, 7% of D64's steady-state loop."""
    pytest.importorskip("triton.backends.compiler")
    from flashcore.kernels import forward_hopper as fh
    from flashcore.studies import sass_budget

    if not fh.GLUON_AVAILABLE:
        pytest.skip("triton without Gluon's Hopper API")
    rows = sass_budget.p_conversion_report()
    assert len(rows) == 6 and all(row["loops"] >= 2 for row in rows), rows
    assert all(row["prmt"] == 0 for row in rows), rows


def test_dependency_depth_tells_a_chain_from_a_tree():
    """Eight values folded one after another are a chain of 7; folded in halves, 3; the
    tensor-core and barrier instructions and the uniform scalars are not followed, and a
    store ends a chain of its own (depth counted, nothing written)."""
    from flashcore.studies.sass_budget import dependency_depth

    chain = [f"FMNMX R20, R{i}, R20, !PT" for i in range(1, 8)]
    chain[0] = "FMNMX R20, R0, R1, !PT"
    tree = [f"FMNMX R{10 + i}, R{2 * i}, R{2 * i + 1}, !PT" for i in range(4)]
    tree += ["FMNMX R14, R10, R11, !PT", "FMNMX R15, R12, R13, !PT", "FMNMX R16, R14, R15, !PT"]
    noise = ["HGMMA.64x128x16.F32.BF16 R20, gdesc[UR4], R20", "BAR.SYNC.DEFER_BLOCKING 0x1",
             "UIADD3 UR4, UR4, 0x1, URZ"]  # fmt: skip
    assert dependency_depth(chain) == 7 and dependency_depth(tree) == 3
    assert dependency_depth(noise + chain) == 7
    assert dependency_depth(tree + ["STS [R1], R16"]) == 4

"""Notebook 07's structure figure (studies/backward_structure.py) draws what the kernels do:
the matmuls per tile pair each structure runs, and the order its loads and dQ sums take."""

from flashcore.studies import backward_structure as bs


def _matmuls(bars):
    return [b for b in bars if b[4] in ("mma", "recompute")]


def test_each_structure_draws_its_matmuls_per_tile_pair():
    steps = 3
    # Triton, deterministic: dK/dV kernel S, dP, dV, dK; dQ kernel repeats S, dP, then dQ.
    triton = bs.triton_deterministic(steps)
    assert len(_matmuls(triton)) == 7 * steps
    assert sum(b[4] == "recompute" for b in triton) == 2 * steps
    # The Gluon backward and FA3's structure: five matmuls a pair, none repeated.
    for build in (bs.gluon_first_version, bs.warp_specialized, bs.fa3_structure):
        bars = build(steps)
        assert len(_matmuls(bars)) == 5 * steps
        assert not any(b[4] == "recompute" for b in bars)


def test_no_lane_runs_two_things_at_once_and_fa3_loads_land_before_use():
    for _, build in bs.STRUCTURES:
        bars = build(3)
        for lane in {b[0] for b in bars}:
            spans = sorted((b[1], b[1] + b[2]) for b in bars if b[0] == lane)
            assert all(a[1] <= b[0] + 1e-9 for a, b in zip(spans, spans[1:])), lane
    fa3 = bs.fa3_structure(3)
    loads = [b for b in fa3 if b[4] == "load"]
    firsts = [b for b in fa3 if b[4] == "mma" and b[3].startswith("S")]
    assert len(loads) == len(firsts) == 3
    assert all(ld[1] + ld[2] <= s[1] for ld, s in zip(loads, firsts))
    # dQ leaves the consumers in FA3's structure; the first Gluon version adds it on them.
    assert {b[0] for b in fa3 if b[4] == "dq"} == {"dQ-writer warp (TMA reduce-add)"}
    gluon = bs.gluon_first_version(3)
    assert {b[0] for b in gluon if b[4] == "dq"} == {"warpgroups 0+1 (CUDA cores)"}


def test_warp_specialized_panel_adds_dq_on_its_writer_in_turn():
    # The shipped warp-specialized kernel: loads land before each step's S, dQ is added by the
    # writer warp, after a turn wait in the deterministic mode only; a barrier tops each step.
    for deterministic in (True, False):
        bars = bs.warp_specialized(3, deterministic=deterministic)
        loads = [b for b in bars if b[4] == "load"]
        firsts = [b for b in bars if b[4] == "mma" and b[3].startswith("S")]
        assert all(ld[1] + ld[2] <= s[1] for ld, s in zip(loads, firsts))
        assert {b[0] for b in bars if b[4] == "dq"} == {"dQ-writer warp (TMA reduce-add)"}
        turns = [b for b in bars if b[4] == "turn"]
        assert len(turns) == (3 if deterministic else 0)
        barriers = [b for b in bars if b[0].startswith("consumer") and b[4] == "sync"]
        assert len(barriers) == 2 * 3  # the top-of-step barrier and the P/dS hand-off


def test_warp_specialized_panel_runs_dv_before_the_ds_hand_off():
    # The swapped step: P^T is dV's register operand, so dV is issued before the shared-memory
    # hand-off (dS^T only), which dQ waits for; dK follows dQ.
    bars = bs.warp_specialized(3, deterministic=False)
    for j in range(3):
        start = {b[3]: b[1] for b in bars if b[4] == "mma" and b[3].endswith(str(j))}
        p_end = next(b[1] + b[2] for b in bars if b[3] == f"P{j}")
        hand_off = next(b[1] for b in bars if b[4] == "sync" and b[1] > p_end)
        assert start[f"dV{j}"] < hand_off <= start[f"dQ{j}"] < start[f"dK{j}"]

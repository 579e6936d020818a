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

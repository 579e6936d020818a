"""SASS text to verdicts, for ``sass`` (whose docstring states the method): parse the
disassembly into instructions, build the basic-block graph, run the forward taint analysis
to a fixpoint, and classify every branch and guarded memory access by the bits its predicate
carries (``analyze_sass``). Pure text processing: no compiler, no GPU."""

from __future__ import annotations

import dataclasses
import re

DATA, SYNC, PUBLIC_PTR, METADATA = 1, 2, 4, 8
PARAM_BASE = 0x210  # sm_90: kernel parameters start at c[0x0][0x210]
_CONST = re.compile(r"c\[0x0\]\[(0x[0-9a-fA-F]+)\]")

# Opcode roots whose register results are data regardless of their operands.
DATA_SOURCES = {
    "LDG",
    "LD",
    "LDS",
    "LDSM",
    "ATOM",
    "ATOMG",
    "ATOMS",
    "HGMMA",
    "QGMMA",
    "IGMMA",
    "HMMA",
    "IMMA",
    "DMMA",
    "WGMMA",
    "LDGDEPBAR",
}
SYNC_SOURCES = {"SYNCS"}
BRANCHES = {"BRA", "BRX", "JMP", "JMX", "EXIT", "RET", "CALL", "BREAK", "KILL"}
MEMORY = {
    "LDG",
    "STG",
    "LD",
    "ST",
    "LDS",
    "STS",
    "LDSM",
    "STSM",
    "LDL",
    "STL",
    "ATOM",
    "ATOMG",
    "ATOMS",
    "RED",
    "REDG",
    "LDGSTS",
    "UTMALDG",
    "UTMASTG",
    "UBLKCP",
    "UTMAPF",
    "LDC",
}
NO_DEST = {
    "STG",
    "ST",
    "STS",
    "STSM",
    "STL",
    "RED",
    "REDG",
    "BAR",
    "MEMBAR",
    "NOP",
    "BSSY",
    "BSYNC",
    "WARPSYNC",
    "DEPBAR",
    "ERRBAR",
    "CCTL",
    "UTMALDG",
    "UTMASTG",
    "UBLKCP",
    "UTMAPF",
    "LDGSTS",
    "FENCE",
    "ARRIVES",
    "WARPGROUP",
    "USETMAXREG",
    "YIELD",
    "ELECT",
    "PREEXIT",
    "ACQBULK",
    "UTMACCTL",
    "UTMACMDFLUSH",
} | BRANCHES
SETP_LIKE = {
    "ISETP",
    "FSETP",
    "DSETP",
    "HSETP2",
    "PLOP3",
    "UISETP",
    "UPLOP3",
    "LEA",
    "ULEA",
    "LOP3",
    "ULOP3",
    "FCHK",
    "VOTE",
    "VOTEU",
    "R2UR",
    "PSETP",
}

_REG = re.compile(r"(?<![\w.])[!\-|~]?(U?R(?:\d+|Z)|U?P(?:\d+|T))\b")
_LABEL = re.compile(r"^\s*([.\w$]+):\s*$")
_ADDRESS = re.compile(r"/\*[0-9a-fA-F]{4,}\*/")
_ENCODING = re.compile(r"/\*\s*0x[0-9a-fA-F]+\s*\*/")
_CONTROL = re.compile(r"^[\w-]{2}:[\w-]:[\w-]:[\w-]:[\w-]\s+")
_JUMP_TABLE = re.compile(r'BRANCH_TARGETS\s+([^"]*)"')


@dataclasses.dataclass
class Instr:
    index: int
    text: str  # instruction as printed (guard, opcode, operands)
    guard: str | None  # "P0", "UP1" (negation dropped), or None
    opcode: str  # full opcode with modifiers, e.g. "ISETP.GE.AND"
    root: str  # opcode root, e.g. "ISETP"
    operands: list[str]
    target: str | None = None  # branch target label
    targets: list[str] = dataclasses.field(default_factory=list)  # BRX/JMX jump table

    def regs(self, operand: str) -> list[str]:
        return [m.group(1) for m in _REG.finditer(operand)]


def _split_operands(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def parse_sass(sass: str) -> tuple[list[Instr], dict[str, int]]:
    """Instructions (in order) and label -> index of the instruction that follows it.
    Accepts nvdisasm's / cuobjdump's ``/*0040*/ OP ... ; /* 0x... */`` lines with ``.L_x_N:``
    labels (an indirect ``BRX`` lists its jump table as ``BRANCH_TARGETS``) and the
    ``ctrl<TAB>OP ...;`` form with ``LBBn:`` labels."""
    instrs: list[Instr] = []
    labels: dict[str, int] = {}
    for raw in sass.splitlines():
        line = _ENCODING.sub("", _ADDRESS.sub("", raw)).strip()
        jump_table = _JUMP_TABLE.search(line)
        line = re.sub(r"\s*\(\*.*?\*\)", "", line)  # nvdisasm's (*"..."*) annotations
        m = _LABEL.match(line)
        if m:
            labels[m.group(1)] = len(instrs)
            continue
        if ";" not in line:
            continue
        line = _CONTROL.sub("", line).split(";")[0].strip()
        if not line or line.startswith(("Function", ".", "//")):
            continue
        guard = None
        gm = re.match(r"@!?(U?P\d+|U?PT)\s+", line)
        if gm:
            guard = gm.group(1)
            line = line[gm.end() :]
        parts = line.split(None, 1)
        opcode = parts[0]
        operands = _split_operands(parts[1]) if len(parts) > 1 else []
        root = opcode.split(".")[0]
        target = None
        if root in ("BRA", "CALL", "BSSY", "BREAK", "JMP") and operands:
            t = operands[-1].strip("`() ")
            target = t
        targets = [t.strip() for t in jump_table.group(1).split(",")] if jump_table else []
        instrs.append(Instr(len(instrs), line, guard, opcode, root, operands, target, targets))
    return instrs, labels


# ----------------------------------------------------------------------------- CFG


@dataclasses.dataclass
class Block:
    start: int
    end: int  # exclusive
    succs: list[int]
    preds: list[int]


def build_cfg(instrs: list[Instr], labels: dict[str, int]) -> list[Block]:
    leaders = {0}
    for label_index in labels.values():
        if label_index < len(instrs):
            leaders.add(label_index)
    for ins in instrs:
        if ins.root in BRANCHES and ins.index + 1 < len(instrs):
            leaders.add(ins.index + 1)
    starts = sorted(leaders)
    block_of = {}
    blocks = []
    for b, s in enumerate(starts):
        e = starts[b + 1] if b + 1 < len(starts) else len(instrs)
        blocks.append(Block(s, e, [], []))
        for i in range(s, e):
            block_of[i] = b
    for b, blk in enumerate(blocks):
        last = instrs[blk.end - 1]
        unconditional = last.guard is None or last.guard in ("PT", "UPT")
        falls_through = not (
            last.root in ("BRA", "EXIT", "RET", "BRX", "JMX", "JMP", "KILL") and unconditional
        )
        if (
            last.root in ("BRA", "JMP")
            and last.target in labels
            and labels[last.target] < len(instrs)
        ):
            blk.succs.append(block_of[labels[last.target]])
        for t in last.targets:  # an indirect branch goes to every entry of its jump table
            if t in labels and labels[t] < len(instrs) and block_of[labels[t]] not in blk.succs:
                blk.succs.append(block_of[labels[t]])
        if falls_through and blk.end < len(instrs):
            blk.succs.append(b + 1)
    for b, blk in enumerate(blocks):
        for s in blk.succs:
            blocks[s].preds.append(b)
    return blocks


# ----------------------------------------------------------------------------- taint


def _width(ins: Instr, is_dest: bool) -> int:
    op = ins.opcode
    if ins.root in ("HGMMA", "QGMMA", "IGMMA", "WGMMA") and is_dest:
        # A 64xNxK warpgroup MMA leaves 64*N/128 accumulators per thread (fp32), half as
        # many registers for packed f16 accumulators.
        m = re.search(r"\.64x(\d+)x\d+\.(F32|F16|S32)", op)
        n = int(m.group(1)) if m else 256
        return max(1, n // 2 if (not m or m.group(2) != "F16") else n // 4)
    if ins.root in ("HMMA", "IMMA") and is_dest:
        return 4 if ".F32" in op or ".S32" in op else 2
    if ".128" in op or ".M88.4" in op:
        return 4
    if ".64" in op or ".WIDE" in op or ".M88.2" in op or ins.root.startswith("D"):
        return 2
    return 1


def _expand(reg: str, width: int) -> list[str]:
    m = re.match(r"(U?R)(\d+)$", reg)
    if not m or width == 1:
        return [reg]
    return [f"{m.group(1)}{int(m.group(2)) + i}" for i in range(width)]


def _dests_and_sources(ins: Instr) -> tuple[list[str], list[str]]:
    if ins.root in NO_DEST or not ins.operands:
        dests, src_ops = [], ins.operands
    else:
        # The first operand is the destination; a SETP-like instruction (or a carry-out)
        # may write one or two predicates right after it.
        dests = ins.regs(ins.operands[0])
        extra = 0
        limit = 1 if ins.root in SETP_LIKE else 2
        for op in ins.operands[1:]:
            if (
                extra < limit
                and re.fullmatch(r"U?P(\d+|T)", op.strip())
                and not ins.root.endswith("SEL")
            ):
                dests += ins.regs(op)
                extra += 1
            else:
                break
        src_ops = ins.operands[1 + extra :]
    sources = []
    reg_ops = [op for op in src_ops if ins.regs(op)]
    for k, op in enumerate(reg_ops):
        if ".64" in op:  # [R2.64]: a 64-bit address register pair
            w = 2
        elif ".WIDE" in ins.opcode:  # 32 x 32 + 64: only the addend is a pair
            w = 2 if k == len(reg_ops) - 1 else 1
        elif ins.root in MEMORY:  # other operands of a memory op: addresses
            w = 1
        else:
            w = _width(ins, False)
        for r in ins.regs(op):
            sources += _expand(r, w)
    dests_expanded = []
    for i, r in enumerate(dests):
        dests_expanded += _expand(r, _width(ins, True) if i == 0 else 1)
    constant = {"RZ", "PT", "URZ", "UPT"}
    return [d for d in dests_expanded if d not in constant], [
        s for s in sources if s not in constant
    ]


_STACK_SLOT = re.compile(r"\[R1(?:\+(0x[0-9a-fA-F]+|\d+))?\]")


def _stack_slots(ins: Instr, operand: str) -> list[str] | None:
    """Register spills: local-memory slots [R1 + offset] carry the bits of what was stored."""
    m = _STACK_SLOT.search(operand)
    if not m:
        return None
    base = int(m.group(1), 0) if m.group(1) else 0
    return [f"L:{base + 4 * i}" for i in range(_width(ins, False))]


_BITS = ":bits"  # state key suffix: per-bit taint of a register used as a packed predicate mask
_LUT_BITWISE = {0xC0: "and", 0xFC: "or", 0x3C: "xor"}  # LOP3 truth tables of a OP b (c = RZ)


def _reg_bits(state: dict, reg: str) -> tuple:
    """Per-bit taint of a register: exact where tracked, else its summary on every bit."""
    per_bit = state.get(reg + _BITS)
    return per_bit if per_bit is not None else (state.get(reg, 0),) * 32


def _packed_mask(ins: Instr, state: dict) -> bool:
    """Bit-precise transfer of ``LOP3.LUT`` with one register, one immediate mask and ``RZ``.

    ptxas keeps many predicates (row masks of an epilogue, say) packed in one register:
    ``LOP3.LUT R, R, ~bit, RZ, 0xc0`` clears a bit, ``@P LOP3.LUT R, R, bit, RZ, 0xfc`` sets it
    from P, ``LOP3.LUT P, RZ, R, bit, RZ, 0xc0`` reads it back. Whatever the register held
    before (a dead value reused by the allocator, possibly loaded data) survives only in the
    bits no mask touched, so taint is tracked per bit for these instructions: a test of one
    bit depends on that bit's writers, not on the register's previous contents."""
    if ins.root in ("P2R", "R2P"):
        return _predicate_register(ins, state)
    if ins.root != "LOP3" or len(ins.operands) < 5:
        return False
    ops = [o.strip().removesuffix(".reuse") for o in ins.operands]
    pred_out = re.fullmatch(r"U?P\d+", ops[0]) and ops[1] in ("RZ", "URZ")
    first = 2 if pred_out else 1
    if len(ops) < first + 4:
        return False
    a, imm, c, lut = ops[first : first + 4]
    if not re.fullmatch(r"U?R\d+", a) or c not in ("RZ", "URZ"):
        return False
    try:
        mask, op = int(imm, 16) & 0xFFFFFFFF, _LUT_BITWISE.get(int(lut, 16))
    except ValueError:
        return False
    if op is None or not imm.startswith("0x"):
        return False
    a_bits = _reg_bits(state, a)
    guard = ins.guard if ins.guard not in (None, "PT", "UPT") else None
    guard_bits = state.get(guard, 0) if guard else 0
    if pred_out:  # P = (a OP mask) != 0
        if op == "and":
            bits = 0
            for i in range(32):
                if mask >> i & 1:
                    bits |= a_bits[i]
        else:
            bits = state.get(a, 0)
        dest = ops[0]
        state[dest] = (state.get(dest, 0) | bits | guard_bits) if guard else bits
        return True
    dest = ops[0]
    if not re.fullmatch(r"U?R\d+", dest):
        return False
    # A bit the mask forces (0 for and, 1 for or) is a constant; the others copy a's bit.
    forced = (~mask & 0xFFFFFFFF) if op == "and" else (mask if op == "or" else 0)
    new = tuple(0 if forced >> i & 1 else a_bits[i] for i in range(32))
    if guard:
        old = _reg_bits(state, dest)
        if dest == a:  # only the bits the instruction can change depend on the guard
            changed = mask if op in ("or", "xor") else ~mask & 0xFFFFFFFF
            new = tuple(old[i] | guard_bits if changed >> i & 1 else old[i] for i in range(32))
        else:
            new = tuple(old[i] | new[i] | guard_bits for i in range(32))
    summary = 0
    for b in new:
        summary |= b
    state[dest] = summary
    state[dest + _BITS] = new
    return True


def _predicate_register(ins: Instr, state: dict) -> bool:
    """``P2R Rd, PR, Ra, mask`` copies predicates P0..P6 (the mask's bits) into bits of Rd
    (byte k with ``.Bk``), the other bits from Ra; ``R2P PR, Ra, mask`` sets predicates from
    bits of Ra. The operand ``PR`` names no single register, so the generic transfer would
    lose the predicates' taint: track it per bit instead."""
    ops = [o.strip().removesuffix(".reuse") for o in ins.operands]
    m = re.search(r"\.B(\d)", ins.opcode)
    shift = 8 * int(m.group(1)) if m else 0
    guard = ins.guard if ins.guard not in (None, "PT", "UPT") else None
    guard_bits = state.get(guard, 0) if guard else 0
    try:
        mask = int(ops[-1], 16) & 0x7F
    except (ValueError, IndexError):
        return False
    if ins.root == "P2R" and len(ops) == 4 and ops[1] == "PR":
        dest, a = ops[0], ops[2]
        if not re.fullmatch(r"R\d+", dest):
            return False
        a_bits = _reg_bits(state, a) if re.fullmatch(r"R\d+", a) else (0,) * 32
        new = list(a_bits)
        for i in range(7):
            if mask >> i & 1:
                new[shift + i] = state.get(f"P{i}", 0)
        if guard:
            old = _reg_bits(state, dest)
            new = [old[i] | new[i] | guard_bits for i in range(32)]
        summary = 0
        for b in new:
            summary |= b
        state[dest], state[dest + _BITS] = summary, tuple(new)
        return True
    if ins.root == "R2P" and len(ops) == 3 and ops[0] == "PR":
        a_bits = _reg_bits(state, ops[1]) if re.fullmatch(r"R\d+", ops[1]) else (0,) * 32
        for i in range(7):
            if mask >> i & 1:
                p = f"P{i}"
                bits = a_bits[shift + i]
                state[p] = (state.get(p, 0) | bits | guard_bits) if guard else bits
        return True
    return False


def _join(states: list[dict]) -> dict:
    """Union of predecessor states, per bit for packed predicate registers."""
    out: dict = {}
    for st in states:
        for k, v in st.items():
            if not k.endswith(_BITS):
                out[k] = out.get(k, 0) | v
    packed = {k[: -len(_BITS)] for st in states for k in st if k.endswith(_BITS)}
    for reg in packed:
        per_bit = [0] * 32
        for st in states:
            per_bit = [x | y for x, y in zip(per_bit, _reg_bits(st, reg))]
        out[reg + _BITS] = tuple(per_bit)
    return out


def _transfer(ins: Instr, state: dict, public_params: frozenset = frozenset()) -> int:
    """Apply one instruction to ``state``; return the bits of its inputs (operands).

    ``public_params``: constant-bank offsets of pointer parameters whose pointees are public
    metadata (the decode kernel's sequence lengths): loads through them give METADATA, not
    DATA."""
    if ins.root in ("STL", "LDL") and len(ins.operands) >= 2:
        mem_op, reg_op = (
            (ins.operands[0], ins.operands[1])
            if ins.root == "STL"
            else (ins.operands[1], ins.operands[0])
        )
        slots = _stack_slots(ins, mem_op)
        if slots is not None:
            regs = _expand(ins.regs(reg_op)[0], _width(ins, False)) if ins.regs(reg_op) else []
            for slot, reg in zip(slots, regs):
                if ins.root == "STL":
                    state[slot] = state.get(reg, 0)
                else:
                    state[reg] = state.get(slot, DATA)  # an unknown slot: assume data
                    state.pop(reg + _BITS, None)
            return 0
    if _packed_mask(ins, state):
        return 0
    dests, sources = _dests_and_sources(ins)
    bits = 0
    for s in sources:
        bits |= state.get(s, 0)
    if any(
        int(m.group(1), 16) in public_params for op in ins.operands for m in _CONST.finditer(op)
    ):
        bits |= PUBLIC_PTR
    if ins.root in DATA_SOURCES:
        addr = 0
        for r in _address_regs(ins):
            addr |= state.get(r, 0)
        bits = (
            (METADATA | (addr & DATA)) if addr & PUBLIC_PTR and ins.root != "HGMMA" else bits | DATA
        )
    if ins.root in SYNC_SOURCES and dests:
        bits |= SYNC
    guard_bits = state.get(ins.guard, 0) if ins.guard else 0
    for d in dests:
        state.pop(d + _BITS, None)  # the summary below bounds every bit
        state[d] = (
            (state.get(d, 0) | bits | guard_bits)
            if ins.guard and ins.guard not in ("PT", "UPT")
            else bits
        )
    return bits


def taint_analysis(
    instrs: list[Instr], blocks: list[Block], public_params=frozenset()
) -> list[dict]:
    """Fixpoint of the forward analysis; returns the state before each instruction."""
    entry = [dict() for _ in blocks]
    exit_ = [None] * len(blocks)
    work = list(range(len(blocks)))
    while work:
        b = work.pop(0)
        state = _join([exit_[p] for p in blocks[b].preds if exit_[p] is not None])
        entry[b] = dict(state)
        for i in range(blocks[b].start, blocks[b].end):
            _transfer(instrs[i], state, public_params)
        if state != exit_[b]:
            exit_[b] = state
            for s in blocks[b].succs:
                if s not in work:
                    work.append(s)
    before = [None] * len(instrs)
    for b, blk in enumerate(blocks):
        state = dict(entry[b])
        for i in range(blk.start, blk.end):
            before[i] = dict(state)
            _transfer(instrs[i], state, public_params)
    return before


CLASSES = ("public", "metadata", "sync", "data")


def _classify(bits: int) -> str:
    if bits & DATA:
        return "data"
    if bits & METADATA:
        return "metadata"
    return "sync" if bits & SYNC else "public"


def _address_regs(ins: Instr) -> list[str]:
    regs = []
    for op in ins.operands:
        if "[" in op and not op.startswith(("c[", "gdesc")):
            for r in ins.regs(op[op.index("[") :]):
                regs += _expand(r, 2 if ".64" in op else 1)
    return [r for r in regs if r not in ("RZ", "URZ")]


def analyze_sass(sass: str, public_params=frozenset()) -> dict:
    """Classify branches and guarded memory accesses of one kernel's SASS."""
    instrs, labels = parse_sass(sass)
    blocks = build_cfg(instrs, labels)
    before = taint_analysis(instrs, blocks, frozenset(public_params))
    branches, guarded, data_addresses = [], [], []
    for ins in instrs:
        state = before[ins.index] or {}
        guarded_by = ins.guard if ins.guard not in (None, "PT", "UPT") else None
        if ins.root in BRANCHES:
            if ins.root in ("BRX", "JMX"):
                bits = 0
                for r in ins.regs(ins.operands[0]) if ins.operands else []:
                    bits |= state.get(r, 0)
                branches.append(
                    {
                        "index": ins.index,
                        "text": ins.text,
                        "class": _classify(bits),
                        "conditional": True,
                    }
                )
            elif guarded_by:
                branches.append(
                    {
                        "index": ins.index,
                        "text": ins.text,
                        "class": _classify(state.get(guarded_by, 0)),
                        "conditional": True,
                    }
                )
            else:
                branches.append(
                    {"index": ins.index, "text": ins.text, "class": "public", "conditional": False}
                )
        if ins.root in MEMORY and ins.root != "LDC":
            if guarded_by:
                guarded.append(
                    {
                        "index": ins.index,
                        "text": ins.text,
                        "class": _classify(state.get(guarded_by, 0)),
                    }
                )
            addr_bits = 0
            for r in _address_regs(ins):
                addr_bits |= state.get(r, 0)
            if addr_bits & DATA:
                data_addresses.append({"index": ins.index, "text": ins.text})

    def counts(items):
        return {c: sum(1 for x in items if x["class"] == c) for c in CLASSES}

    cond = [b for b in branches if b["conditional"]]
    return {
        "instructions": len(instrs),
        "blocks": len(blocks),
        "edges": sum(len(b.succs) for b in blocks),
        "branches": counts(cond),
        "unconditional_branches": len(branches) - len(cond),
        "guarded_memory": counts(guarded),
        "data_dependent_addresses": len(data_addresses),
        "data_branches": [b for b in cond if b["class"] == "data"],
        "data_guarded_memory": [g for g in guarded if g["class"] == "data"],
        "data_address_examples": data_addresses[:10],
        "opcode_histogram": _histogram(instrs),
    }


def _histogram(instrs):
    hist = {}
    for ins in instrs:
        hist[ins.root] = hist.get(ins.root, 0) + 1
    return dict(
        sorted(hist.items(), key=lambda kv: -kv[1])
    )  # every opcode: rare ones (GMMA) matter


def cfg_edges(sass: str, public_params=frozenset()):
    """(block ranges, edges, class of each block's terminating branch) for plotting."""
    instrs, labels = parse_sass(sass)
    blocks = build_cfg(instrs, labels)
    before = taint_analysis(instrs, blocks, frozenset(public_params))
    kinds = []
    for blk in blocks:
        last = instrs[blk.end - 1]
        g = last.guard if last.guard not in (None, "PT", "UPT") else None
        if last.root in BRANCHES and g:
            kinds.append(_classify((before[last.index] or {}).get(g, 0)))
        else:
            kinds.append("none")
    ranges = [(b.start, b.end) for b in blocks]
    edges = [(i, s) for i, b in enumerate(blocks) for s in b.succs]
    return ranges, edges, kinds

//! Just enough x86-64 decoding: `ret`, SSE/AVX instructions (whose 16-byte accesses
//! QEMU splits in two) and the operation of a locked read-modify-write.

use memlens_format::RmwOp;

/// Flag: adjacent 8-byte accesses of this instruction are one access of 16 bytes
/// (32 when the operation bits are [`WIDE32`]): QEMU 7.2 splits vector accesses.
pub const MERGE: u8 = 0x80;
/// With [`MERGE`], in the operation bits: the access is 32 bytes (a VEX.256 operand).
pub const WIDE32: u8 = 0x0f;
/// Flag: a near call (its store is the pushed return address).
pub const CALL: u8 = 0x40;
/// Flag: a near return (its load pops the return address).
pub const RET: u8 = 0x20;
/// Flag: an atomic instruction (LOCK prefix, or `xchg` with a memory operand).
pub const ATOMIC: u8 = 0x10;
/// The bits holding the [`RmwOp`].
pub const OP_MASK: u8 = 0x0f;

/// What the plugin needs to know about one instruction.
pub struct Decoded {
    /// A near return.
    pub ret: bool,
    /// [`MERGE`] | [`CALL`] | [`RET`] | the [`RmwOp`] an atomic RMW would be.
    pub flags: u8,
    /// The instruction may access memory (false only when it certainly does not).
    pub mem: bool,
    /// QEMU 7.2 may do its accesses in a helper (atomics, x87 and xsave state,
    /// cmpxchg8b/16b, AVX gathers and masked moves), which reports them through
    /// the callbacks last armed for the vCPU.
    pub helper: bool,
}

/// Whether an instruction may access memory: false only for register-only ModRM
/// forms and a list of opcodes that never do; anything unknown may.
fn may_access(b: &[u8], i: usize) -> bool {
    let at = |k: usize| b.get(k).copied();
    let register_only = |modrm: Option<u8>| modrm.is_some_and(|m| m >> 6 == 3);
    let Some(op) = at(i) else { return true };
    match op {
        // ALU with a ModRM operand, mov, test, xchg, imul, movsxd, shifts, group 3
        0x00..=0x03
        | 0x08..=0x0b
        | 0x10..=0x13
        | 0x18..=0x1b
        | 0x20..=0x23
        | 0x28..=0x2b
        | 0x30..=0x33
        | 0x38..=0x3b
        | 0x63
        | 0x69
        | 0x6b
        | 0x80..=0x8b
        | 0xc0
        | 0xc1
        | 0xc6
        | 0xc7
        | 0xd0..=0xd3
        | 0xf6
        | 0xf7
        | 0xfe => !register_only(at(i + 1)),
        // call/jmp/push through ff: call and push store even with a register operand
        0xff => {
            let m = at(i + 1).unwrap_or(0);
            matches!((m >> 3) & 7, 2 | 3 | 6) || m >> 6 != 3
        }
        0x8d => false, // lea
        0x04 | 0x05 | 0x0c | 0x0d | 0x14 | 0x15 | 0x1c | 0x1d | 0x24 | 0x25 | 0x2c | 0x2d
        | 0x34 | 0x35 | 0x3c | 0x3d => false,
        0x70..=0x7f | 0x90..=0x99 | 0xa8 | 0xa9 | 0xb0..=0xbf | 0xe3 | 0xe9 | 0xeb => false,
        0xf5 | 0xf8..=0xfd => false,
        0x0f => match at(i + 1) {
            Some(0x05 | 0x0b | 0x1f | 0x31 | 0xa2 | 0x80..=0x8f | 0xc8..=0xcf) => false,
            Some(0x38 | 0x3a) => !register_only(at(i + 3)),
            Some(_) => !register_only(at(i + 2)),
            None => true,
        },
        // VEX: opcode then ModRM after the 2- or 3-byte prefix; EVEX after 4 bytes
        0xc5 => !register_only(at(i + 3)),
        0xc4 => !register_only(at(i + 4)),
        0x62 => !register_only(at(i + 5)),
        _ => true,
    }
}

/// Decodes the prefixes and opcode of `b`.
pub fn decode(b: &[u8]) -> Decoded {
    let mut i = 0;
    let mut lock = false;
    // mandatory prefix of SSE instructions: 0 none, 1 66, 2 F3, 3 F2 (as VEX.pp)
    let mut pp = 0u8;
    while i < b.len() {
        match b[i] {
            0xf0 => lock = true,
            0x66 if pp == 0 => pp = 1,
            0xf3 => pp = 2,
            0xf2 => pp = 3,
            _ => {}
        }
        match b[i] {
            0x66 | 0x67 | 0xf2 | 0xf3 | 0xf0 | 0x2e | 0x36 | 0x3e | 0x26 | 0x64 | 0x65 => i += 1,
            0x40..=0x4f => i += 1,
            _ => break,
        }
    }
    let op = b.get(i).copied().unwrap_or(0);
    let op2 = b.get(i + 1).copied().unwrap_or(0);
    let reg = |m: u8| (m >> 3) & 7;
    let ret = matches!(op, 0xc3 | 0xc2);
    let vex = matches!(op, 0xc4 | 0xc5) && b.len() > i + 2;
    let rmw = match op {
        0x0f => match op2 {
            0xc0 | 0xc1 => RmwOp::FetchAdd,
            0xb0 | 0xb1 | 0xc7 => RmwOp::Cas,
            0xab => RmwOp::FetchOr,
            0xb3 => RmwOp::FetchAnd,
            0xbb => RmwOp::FetchXor,
            0xba => match reg(b.get(i + 2).copied().unwrap_or(0)) {
                5 => RmwOp::FetchOr,
                6 => RmwOp::FetchAnd,
                _ => RmwOp::FetchXor,
            },
            _ => RmwOp::FetchAdd,
        },
        0x86 | 0x87 => RmwOp::Exchange,
        0x00..=0x03 => RmwOp::FetchAdd,
        0x08..=0x0b => RmwOp::FetchOr,
        0x20..=0x23 => RmwOp::FetchAnd,
        0x28..=0x2b => RmwOp::FetchSub,
        0x30..=0x33 => RmwOp::FetchXor,
        0x80 | 0x81 | 0x83 => match reg(op2) {
            1 => RmwOp::FetchOr,
            4 => RmwOp::FetchAnd,
            5 => RmwOp::FetchSub,
            6 => RmwOp::FetchXor,
            _ => RmwOp::FetchAdd,
        },
        0xfe | 0xff if reg(op2) == 1 => RmwOp::FetchSub,
        0xf6 | 0xf7 if reg(op2) == 3 => RmwOp::FetchSub,
        0xf6 | 0xf7 if reg(op2) == 2 => RmwOp::FetchXor,
        _ => RmwOp::FetchAdd,
    };
    let width = if vex {
        vex_width(&b[i..])
    } else if op == 0x0f {
        sse_width(&b[i..], pp)
    } else {
        0
    };
    // call rel32, or call r/m64 (ff /2)
    let call = op == 0xe8 || (op == 0xff && reg(op2) == 2);
    let mut flags = rmw as u8;
    if width >= 16 {
        flags = MERGE | if width == 32 { WIDE32 } else { 0 };
    }
    if call {
        flags |= CALL;
    }
    if ret {
        flags |= RET;
    }
    let mem = may_access(b, i);
    if mem && (lock || matches!(op, 0x86 | 0x87)) {
        flags |= ATOMIC;
    }
    let helper = mem
        && (flags & ATOMIC != 0
            || (op == 0x0f && matches!(op2, 0xae | 0xc7))
            || (0xd8..=0xdf).contains(&op)
            || vex);
    Decoded { ret, flags, mem, helper }
}

/// Bytes of the memory operand of a legacy-encoded `0F` instruction when QEMU may
/// split it (16: an SSE vector), else 0 (scalar, MMX, or not a vector operation).
fn sse_width(b: &[u8], pp: u8) -> u8 {
    let at = |k: usize| b.get(k).copied().unwrap_or(0);
    match at(1) {
        0x38 => map2_width(at(2), pp, false),
        0x3a => map3_width(at(2), pp, false),
        op => map1_width(op, pp, false),
    }
}

/// The same for a VEX-encoded instruction: 32 for a 256-bit operand.
fn vex_width(b: &[u8]) -> u8 {
    let at = |k: usize| b.get(k).copied().unwrap_or(0);
    let (map, p, op) = if b[0] == 0xc5 { (1, at(1), at(2)) } else { (at(1) & 0x1f, at(2), at(3)) };
    let (pp, l) = (p & 3, p & 4 != 0);
    match map {
        1 => map1_width(op, pp, l),
        2 => map2_width(op, pp, l),
        3 => map3_width(op, pp, l),
        _ => 0,
    }
}

/// Map 1 (`0F xx`): `pp` as VEX.pp, `l` VEX.L (256-bit).
fn map1_width(op: u8, pp: u8, l: bool) -> u8 {
    let full = if l { 32 } else { 16 };
    let packed = pp <= 1; // none or 66: packed; F3/F2: scalar
    match op {
        0x10
        | 0x11
        | 0x14
        | 0x15
        | 0x28
        | 0x29
        | 0x2b
        | 0x51..=0x59
        | 0x5c..=0x5f
        | 0xc2
        | 0xc6
            if packed =>
        {
            full
        }
        0x12 | 0x16 if pp == 2 => full, // movsldup, movshdup
        0x5a if pp == 1 => full,        // cvtpd2ps
        0x5a if pp == 0 && l => 16,     // vcvtps2pd ymm, m128
        0x5b => full,
        0x60..=0x6d | 0x6f | 0x70..=0x76 | 0x7c | 0x7d | 0x7f if pp == 1 => full,
        0x6f | 0x7f | 0x70 if pp == 2 => full, // movdqu, pshufhw
        0x70 | 0x7c | 0x7d | 0xd0 if pp == 3 => full, // pshuflw, haddps, hsubps, addsubps
        0xe6 if pp == 2 && l => 16,            // vcvtdq2pd ymm, m128 (xmm: m64)
        0xe6 if pp == 3 => full,               // cvtpd2dq
        0xf0 if pp == 3 => full,               // lddqu
        0xd0..=0xff if pp == 1 && !matches!(op, 0xd6 | 0xf7) => full,
        _ => 0,
    }
}

/// Map 2 (`0F 38 xx`).
fn map2_width(op: u8, pp: u8, l: bool) -> u8 {
    if pp != 1 {
        return 0; // MMX, BMI, crc32, movbe
    }
    match op {
        // pmovsx/pmovzx: half, quarter or eighth of the destination
        0x20 | 0x23 | 0x25 | 0x30 | 0x33 | 0x35 | 0x13 | 0x1a | 0x5a if l => 16,
        0x20..=0x25
        | 0x30..=0x35
        | 0x13
        | 0x18
        | 0x19
        | 0x1a
        | 0x58
        | 0x59
        | 0x5a
        | 0x78
        | 0x79 => 0,
        // gathers access lane by lane: never merged
        0x90..=0x93 => 0,
        0xf0..=0xff => 0,
        _ if l => 32,
        _ => 16,
    }
}

/// Map 3 (`0F 3A xx`).
fn map3_width(op: u8, pp: u8, l: bool) -> u8 {
    if pp != 1 {
        return 0;
    }
    match op {
        0x18 | 0x19 | 0x38 | 0x39 | 0x1d => 16, // 128-bit insert / extract, vcvtps2ph
        0x0a | 0x0b | 0x14..=0x17 | 0x20..=0x22 => 0, // scalar round, pextr, pinsr, insertps
        _ if l => 32,
        _ => 16,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes() {
        assert!(decode(&[0xc3]).ret);
        assert!(decode(&[0xf3, 0xc3]).ret);
        assert!(!decode(&[0x48, 0x89, 0x07]).ret);
        assert_eq!(decode(&[0xf0, 0x48, 0x0f, 0xc1, 0x07]).flags & OP_MASK, RmwOp::FetchAdd as u8);
        assert_eq!(decode(&[0xf0, 0x0f, 0xb1, 0x0f]).flags & OP_MASK, RmwOp::Cas as u8);
        assert_ne!(decode(&[0x0f, 0x11, 0x07]).flags & MERGE, 0); // movups
        assert_eq!(decode(&[0xf2, 0x0f, 0x58, 0x07]).flags & MERGE, 0); // addsd xmm0, [rdi]
        assert_eq!(decode(&[0x0f, 0xfe, 0x07]).flags & MERGE, 0); // paddd mm0, [rdi]
        assert_eq!(decode(&[0x66, 0x0f, 0xfe, 0x07]).flags, MERGE); // paddd xmm0, [rdi]
        assert_eq!(decode(&[0xc5, 0xfe, 0x6f, 0x07]).flags, MERGE | WIDE32); // vmovdqu ymm0, [rdi]
        assert_eq!(decode(&[0xc5, 0xfa, 0x6f, 0x07]).flags, MERGE); // vmovdqu xmm0, [rdi]
                                                                    // vinserti128 ymm2, ymm2, [rdi], 1: a 16-byte operand
        assert_eq!(decode(&[0xc4, 0xe3, 0x6d, 0x38, 0x17, 0x01]).flags, MERGE);
        // vpgatherdd ymm7, [rax+ymm5*4], ymm6: lane by lane
        assert_eq!(decode(&[0xc4, 0xe2, 0x4d, 0x90, 0x3c, 0xa8]).flags & MERGE, 0);
        assert_eq!(decode(&[0xf0, 0x48, 0x0f, 0xc1, 0x07]).flags & MERGE, 0); // lock xadd
        assert_eq!(decode(&[0xf3, 0x48, 0xab]).flags & MERGE, 0); // rep stosq
        assert_ne!(decode(&[0xe8, 0, 0, 0, 0]).flags & CALL, 0);
        assert_ne!(decode(&[0x41, 0xff, 0xd0]).flags & CALL, 0); // call r8
        assert_ne!(decode(&[0xff, 0x15, 0, 0, 0, 0]).flags & CALL, 0); // call [rip+x]
        assert_eq!(decode(&[0xff, 0xe0]).flags & CALL, 0); // jmp rax
        assert_ne!(decode(&[0xc3]).flags & RET, 0);
        assert_ne!(decode(&[0xf0, 0x48, 0x0f, 0xc1, 0x07]).flags & ATOMIC, 0); // lock xadd
        assert_ne!(decode(&[0x48, 0x87, 0x07]).flags & ATOMIC, 0); // xchg [rdi], rax
        assert_eq!(decode(&[0x48, 0x87, 0xc7]).flags & ATOMIC, 0); // xchg rdi, rax
        assert_eq!(decode(&[0x48, 0x01, 0x18]).flags & ATOMIC, 0); // add [rax], rbx
        assert!(decode(&[0xf0, 0x0f, 0xb1, 0x0f]).helper); // lock cmpxchg
        assert!(decode(&[0x0f, 0xae, 0x27]).helper); // xsave [rdi]
        assert!(!decode(&[0x48, 0x8b, 0x07]).helper); // mov rax, [rdi]
        assert!(!decode(&[0x48, 0x01, 0xd8]).mem); // add rax, rbx
        assert!(decode(&[0x48, 0x01, 0x18]).mem); // add [rax], rbx
        assert!(!decode(&[0x48, 0x8d, 0x04, 0x24]).mem); // lea rax, [rsp]
        assert!(decode(&[0x50]).mem); // push rax
        assert!(decode(&[0xff, 0xd0]).mem); // call rax
        assert!(!decode(&[0xff, 0xe0]).mem); // jmp rax
        assert!(decode(&[0xf0, 0x48, 0x0f, 0xc1, 0x07]).mem); // lock xadd
        assert!(!decode(&[0x0f, 0x1f, 0x44, 0, 0]).mem); // nopl
        assert!(decode(&[0xc5, 0xf9, 0x7f, 0x07]).mem); // vmovdqa [rdi], xmm0
        assert!(!decode(&[0xc5, 0xf9, 0x6f, 0xc1]).mem); // vmovdqa xmm0, xmm1
    }
}

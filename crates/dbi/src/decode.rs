//! Just enough x86-64 decoding: `ret`, SSE/AVX instructions (whose 16-byte accesses
//! QEMU splits in two) and the operation of a locked read-modify-write.

use memlens_format::RmwOp;

/// Flag: two adjacent 8-byte accesses of this instruction are one 16-byte access.
pub const MERGE: u8 = 0x80;

/// What the plugin needs to know about one instruction.
pub struct Decoded {
    /// A near return.
    pub ret: bool,
    /// [`MERGE`] | the [`RmwOp`] an atomic RMW would be.
    pub flags: u8,
}

/// Decodes the prefixes and opcode of `b`.
pub fn decode(b: &[u8]) -> Decoded {
    let mut i = 0;
    while i < b.len() {
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
    let merge = (op == 0x0f && !matches!(op2, 0xc7 | 0xae)) || vex;
    Decoded { ret, flags: (rmw as u8) | if merge { MERGE } else { 0 } }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes() {
        assert!(decode(&[0xc3]).ret);
        assert!(decode(&[0xf3, 0xc3]).ret);
        assert!(!decode(&[0x48, 0x89, 0x07]).ret);
        assert_eq!(decode(&[0xf0, 0x48, 0x0f, 0xc1, 0x07]).flags & 0x7f, RmwOp::FetchAdd as u8);
        assert_eq!(decode(&[0xf0, 0x0f, 0xb1, 0x0f]).flags & 0x7f, RmwOp::Cas as u8);
        assert_ne!(decode(&[0x0f, 0x11, 0x07]).flags & MERGE, 0); // movups
        assert_eq!(decode(&[0xf3, 0x48, 0xab]).flags & MERGE, 0); // rep stosq
    }
}

//! LEB128 varints and zigzag, the primitive of every encoded field.
//!
//! The writers take raw pointers because the runtime encodes straight into a
//! pre-reserved buffer on the traced thread's hot path; callers guarantee room
//! for [`MAX_VARINT`] bytes per varint.

/// Longest encoding of a `u64`.
pub const MAX_VARINT: usize = 10;

/// Maps signed to unsigned so small magnitudes stay short.
#[inline(always)]
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
#[inline(always)]
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Writes `v` at `p` and returns the position after it.
///
/// # Safety
/// `p` must be valid for [`MAX_VARINT`] bytes of writes.
#[inline(always)]
pub unsafe fn put(mut p: *mut u8, mut v: u64) -> *mut u8 {
    while v >= 0x80 {
        p.write(v as u8 | 0x80);
        p = p.add(1);
        v >>= 7;
    }
    p.write(v as u8);
    p.add(1)
}

/// Appends `v` to a vector (the slow-path and test writer).
pub fn push(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint from `buf` at `*pos`, advancing it. `None` when the input ends
/// early or the varint is longer than ten bytes.
#[inline]
pub fn get(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    let mut shift = 0u32;
    loop {
        let b = *buf.get(*pos)?;
        *pos += 1;
        if shift == 63 && b > 1 {
            return None;
        }
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(v);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_edges() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX - 1, u64::MAX] {
            let mut out = Vec::new();
            push(&mut out, v);
            let mut raw = [0u8; MAX_VARINT];
            let end = unsafe { put(raw.as_mut_ptr(), v) };
            let n = end as usize - raw.as_ptr() as usize;
            assert_eq!(&raw[..n], &out[..]);
            let mut pos = 0;
            assert_eq!(get(&out, &mut pos), Some(v));
            assert_eq!(pos, out.len());
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!(zigzag(-1), 1);
    }

    #[test]
    fn put_matches_push_at_every_length() {
        let mut vals = vec![0u64, 1, 0x7f, 0x80, 0x3fff, 0x4000, u64::MAX];
        for b in 1..64 {
            let x = 1u64 << b;
            vals.extend([x - 1, x, x + 1, x | 0x5555_5555_5555_5555 >> (63 - b)]);
        }
        for v in vals {
            let mut out = Vec::new();
            push(&mut out, v);
            let mut raw = [0xeeu8; MAX_VARINT + 8];
            let end = unsafe { put(raw.as_mut_ptr(), v) };
            let n = end as usize - raw.as_ptr() as usize;
            assert_eq!(&raw[..n], &out[..], "{v:#x}");
        }
    }

    #[test]
    fn rejects_overlong() {
        let bad = [0xffu8; 11];
        assert_eq!(get(&bad, &mut 0), None);
        assert_eq!(get(&[0x80], &mut 0), None);
    }
}

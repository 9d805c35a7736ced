//! Chunk payloads and metadata records: decoding must never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for _ in memlens_format::codec::Decoder::new(data) {}
    let _ = memlens_format::MetaRecord::decode_all(data);
});

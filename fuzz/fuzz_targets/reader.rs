//! Whole trace files: the reader must never panic, whatever the bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("memlens-fuzz-{}.trace", std::process::id()));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    if let Ok(r) = memlens_format::TraceReader::open(&path) {
        let _ = r.totals();
        for s in r.streams() {
            for ev in r.events(s.thread) {
                if ev.is_err() {
                    break;
                }
            }
        }
    }
});

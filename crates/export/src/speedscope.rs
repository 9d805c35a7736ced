//! speedscope's file format (<https://www.speedscope.app/file-format-schema.json>):
//! one `evented` profile per thread, `O`pen / `C`lose events at a position counted
//! in that thread's memory operations (loads + stores), frames shared.
//!
//! Streams thread by thread: each profile is written as its thread is read; the
//! frame table, known only at the end, follows the profiles (JSON objects are
//! unordered).

use crate::frames::{thread_label, Frames, Open};
use crate::{DynNamer, Error, Summary};
use memlens_format::{CallStack, Event, TraceReader};
use std::io::{BufWriter, Write};

/// Writes one evented speedscope profile per thread, weighted by memory operations.
pub fn speedscope(r: &TraceReader, namer: DynNamer<'_>, out: impl Write) -> Result<Summary, Error> {
    let mut out = BufWriter::with_capacity(1 << 16, out);
    let mut frames = Frames::new(namer);
    let mut sum = Summary::default();
    out.write_all(
        b"{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",\"profiles\":[\n",
    )?;
    for (i, s) in r.streams().iter().enumerate() {
        if i > 0 {
            out.write_all(b",\n")?;
        }
        sum.threads += 1;
        out.write_all(b"{\"type\":\"evented\",\"unit\":\"none\",\"startValue\":0,\"events\":[")?;
        let mut label = thread_label(s.thread.0, "");
        let mut stack = CallStack::new();
        let mut closed = Vec::new();
        let mut now = 0u64;
        let mut first = true;
        let mut ev_out = |out: &mut BufWriter<_>, kind: char, f: u32, at: u64| {
            let sep = if first { "" } else { "," };
            first = false;
            write!(out, "{sep}\n{{\"type\":\"{kind}\",\"frame\":{f},\"at\":{at}}}")
        };
        for ev in r.events(s.thread) {
            match ev? {
                Event::ThreadStart { name, .. } | Event::ThreadName(name) => {
                    label = thread_label(s.thread.0, &name)
                }
                Event::FuncEnter { pc, frame, .. } => {
                    let f = frames.open(pc, frame.0);
                    // frames left by a longjmp close first
                    stack.enter(f, |o: Open, _| closed.push(o.frame));
                    for c in closed.drain(..) {
                        ev_out(&mut out, 'C', c, now)?;
                    }
                    sum.calls += 1;
                    ev_out(&mut out, 'O', f.frame, now)?;
                }
                Event::FuncExit { pc } => {
                    // An exit without a recorded entry (tracing began inside it) is dropped.
                    stack.exit(frames.start(pc), |o: Open, _| closed.push(o.frame));
                    for c in closed.drain(..) {
                        ev_out(&mut out, 'C', c, now)?;
                    }
                }
                e => now += crate::frames::operations(&e),
            }
        }
        stack.close_all(|o: Open, _| closed.push(o.frame));
        for c in closed.drain(..) {
            ev_out(&mut out, 'C', c, now)?;
        }
        sum.operations += now;
        write!(out, "\n],\"endValue\":{now},\"name\":{}}}", crate::json_str(&label))?;
    }
    out.write_all(b"\n],\"shared\":{\"frames\":[\n")?;
    for (i, f) in frames.list.iter().enumerate() {
        if i > 0 {
            out.write_all(b",\n")?;
        }
        write!(out, "{{\"name\":{}", f.json_name)?;
        if !f.file.is_empty() {
            write!(out, ",\"file\":{}", crate::json_str(&f.file))?;
            if f.line != 0 {
                write!(out, ",\"line\":{}", f.line)?;
            }
        }
        out.write_all(b"}")?;
    }
    write!(
        out,
        "\n]}},\"name\":{},\"activeProfileIndex\":0,\"exporter\":\"memlens {}\"}}\n",
        crate::json_str(&crate::command(r)),
        env!("CARGO_PKG_VERSION")
    )?;
    out.flush()?;
    sum.frames = frames.list.len() as u64;
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use memlens_analysis::NoNames;
    use serde_json::Value;

    #[test]
    fn one_evented_profile_per_thread() {
        let r = trace(&[
            (0, vec![start(100, "main"), enter(0x10), wr(1, 0x1000), enter(0x20), rd(2, 0x1000)]),
            (1, vec![start(101, "w"), enter(0x20), exit(), exit(), wr(3, 0x2000)]),
        ]);
        let mut out = Vec::new();
        let s = speedscope(&r, &NoNames, &mut out).unwrap();
        assert_eq!((s.threads, s.calls, s.operations, s.frames), (2, 3, 3, 2));
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["$schema"], "https://www.speedscope.app/file-format-schema.json");
        let frames: Vec<&str> = v["shared"]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        assert_eq!(frames, ["0x10", "0x20"]);
        let p = &v["profiles"];
        assert_eq!(p[0]["name"], "T0 main");
        assert_eq!(p[0]["endValue"], 2);
        let evs: Vec<(String, u64, u64)> = p[0]["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["type"].as_str().unwrap().into(),
                    e["frame"].as_u64().unwrap(),
                    e["at"].as_u64().unwrap(),
                )
            })
            .collect();
        // frames still open at the end close there, innermost first
        let e = |k: &str, f, at| (k.to_string(), f, at);
        assert_eq!(evs, vec![e("O", 0, 0), e("O", 1, 1), e("C", 1, 2), e("C", 0, 2)]);
        assert_eq!(p[1]["name"], "T1 w");
        assert_eq!(p[1]["events"].as_array().unwrap().len(), 2);
        assert_eq!(p[1]["endValue"], 1);
    }
}

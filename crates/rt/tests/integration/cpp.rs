//! C++: exceptions, virtual calls, new/delete, std::thread.

use crate::util::*;
use memlens_format::{AllocKind, Event, FreeKind};

#[test]
fn exceptions_threads_new_delete() {
    for cc in BOTH {
        let dir = scratch("exc");
        let exe = build("exc.cpp", cc, &dir);
        let trace = dir.join("t.trace");
        let native = run(&exe, &[], None, &[]);
        let out = run(&exe, &[], Some(&trace), &[]);
        assert!(out.status.success(), "{cc:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(stdout(&out), stdout(&native));
        assert_eq!(stdout(&out), "r=-2 hits=2000\n");
        let t = read(&trace);
        t.check_invariants();
        assert_eq!(t.streams.len(), 3, "{cc:?}");
        let count = |f: &dyn Fn(&Event) -> bool| t.all().filter(|e| f(e)).count();
        assert_eq!(
            count(&|e| matches!(e, Event::Alloc { kind: AllocKind::NewArray, size: 492, .. })),
            1
        );
        assert_eq!(count(&|e| matches!(e, Event::Free { kind: FreeKind::DeleteArray, .. })), 1);
        assert!(count(&|e| matches!(e, Event::Alloc { kind: AllocKind::New, size: 8, .. })) >= 1);
        // Each thread ran catcher(4) once: its frames end balanced (checked above)
        // whether the compiler calls __tsan_func_exit on the unwind path or not.
        for evs in &t.streams[1..] {
            let rmw = evs.iter().filter(|e| matches!(e, Event::Rmw { .. })).count();
            assert_eq!(rmw, 1000, "{cc:?}");
        }
    }
}

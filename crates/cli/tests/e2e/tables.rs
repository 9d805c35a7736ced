//! Every text table fits 120 columns: names last, shortened with `…`.

use crate::util::*;

#[test]
fn every_text_table_fits_120_columns() {
    let dir = scratch("tables-are-the-width-of-a-terminal-even-with-long-paths-and-templates");
    let exe = crate::filters::build_project(Cc::Gcc, &dir);
    let t = dir.join("t.trace");
    assert!(record(&exe, &t, &[]).status.success());
    let ts = t.to_str().unwrap();
    let mut commands: Vec<Vec<&str>> = vec![vec!["info", ts]];
    for by in ["line", "function", "variable", "thread", "alloc"] {
        commands.push(vec!["report", "--by", by, "--top", "0", ts]);
    }
    for k in
        ["counts", "sharing", "false-sharing", "cachesim", "reuse", "working-set", "heap", "layout"]
    {
        commands.push(vec!["analyze", k, "--verbose", "--top", "0", ts]);
    }
    let mut shortened = 0;
    for args in &commands {
        let out = run_memlens(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let text = stdout(&out);
        assert!(!text.is_empty(), "{args:?}");
        for l in text.lines() {
            assert!(l.chars().count() <= 120, "{args:?}: {} wide:\n{l}", l.chars().count());
        }
        shortened += text.matches('…').count();
    }
    // the scratch path and libstdc++'s names are longer than a terminal
    assert!(shortened > 0);
    // report: numbers first, the names last
    let out = run_memlens(&["report", "--by", "line", ts]);
    let header = stdout(&out).lines().next().unwrap().to_string();
    assert!(header.starts_with("loads") && header.ends_with("function"), "{header}");
}

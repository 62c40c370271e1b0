//! Compile-fail tests of `#[tuned_kernel]`: each case in `ui/` holds one
//! mistake, and its `.stderr` the one diagnostic it must produce.
//!
//! Re-bless with `TRYBUILD=overwrite cargo test -p ktune-e2e --test ui`, then
//! read every changed `.stderr`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}

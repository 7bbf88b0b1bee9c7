//! Every input kept for the fuzz targets, run through them on stable, without libFuzzer: the
//! corpus of each target (`fuzz/corpus/<target>/`, the seeds and what the fuzzers found
//! interesting) and the inputs that once crashed one (`fuzz/regressions/<target>/`). A target
//! without a corpus, or a fuzz target that is not listed here, fails: a run that saw nothing
//! must not pass.

use std::{
    fs,
    panic::{AssertUnwindSafe, catch_unwind},
    path::{Path, PathBuf},
};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The files of a folder, sorted; `None` when there is no such folder.
fn files(dir: &Path) -> Option<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .map(|e| e.expect("a readable folder entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    Some(files)
}

#[test]
fn every_kept_input_passes_its_target() {
    let mut failures = Vec::new();
    let mut ran = 0;
    for (name, body) in fuzz_targets::TARGETS {
        let corpus = fuzz_dir().join("corpus").join(name);
        let inputs = files(&corpus).unwrap_or_default();
        assert!(
            !inputs.is_empty(),
            "{} is missing or empty: keep the target's seeds there",
            corpus.display()
        );
        let regressions = files(&fuzz_dir().join("regressions").join(name)).unwrap_or_default();
        for input in inputs.iter().chain(&regressions) {
            let data = fs::read(input).expect("a readable input");
            if catch_unwind(AssertUnwindSafe(|| body(&data))).is_err() {
                failures.push(input.display().to_string());
            }
            ran += 1;
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {ran} inputs fail their target (the panic of each is printed above; \
         reproduce one with `cargo +nightly fuzz run <target> <file>`): {failures:#?}",
        failures.len()
    );
}

#[test]
fn every_fuzz_target_is_run_here() {
    let dir = fuzz_dir().join("fuzz_targets");
    let mut on_disk: Vec<String> = files(&dir)
        .unwrap_or_else(|| panic!("{} is missing", dir.display()))
        .iter()
        .filter_map(|p| Some(p.file_stem()?.to_str()?.to_owned()))
        .collect();
    on_disk.sort();
    let listed: Vec<&str> = fuzz_targets::TARGETS.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        on_disk, listed,
        "fuzz/fuzz_targets/ and fuzz_targets::TARGETS differ"
    );
}

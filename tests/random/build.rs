//! Writes the kernels `ktune_vgpu::random` generates from [`SEEDS`], each at
//! its first shape, into `$OUT_DIR/random/kernels.rs`, with a runner for
//! each and the table of them, then has ktune's build helper prepare those
//! kernels as it prepares any crate's (heuristic defaults; no database, no
//! search).

use std::fmt::Write as _;
use std::ops::Range;
use std::path::PathBuf;

use ktune_build::out::write_if_changed;
use ktune_vgpu::random;

/// The generated kernels: those the virtual GPU's random-kernel test runs.
const SEEDS: Range<u64> = 0..200;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("Cargo sets OUT_DIR"));
    let dir = out_dir.join("random");
    std::fs::create_dir_all(&dir).expect("creating the generated kernels' folder");
    let mut text = String::from("// Written by build.rs: the kernels of `ktune_vgpu::random`.\n\n");
    let mut table = String::new();
    for seed in SEEDS {
        let generated = random::kernel(seed);
        let kernel = &generated.entry.kernel;
        let name = &kernel.name;
        // Public, for the tests to reach its module.
        let source =
            generated
                .source_at(&generated.entry.shapes[0])
                .replacen("\nfn ", "\npub fn ", 1);
        let uploads: Vec<String> = kernel
            .inputs
            .iter()
            .enumerate()
            .map(|(i, t)| format!("&upload::<{}>(device, &inputs[{i}])?", t.dtype.name()))
            .collect();
        let output = kernel.output.dtype.name();
        writeln!(
            text,
            "{source}\n\n\
             fn run_{name}(device: &Device, inputs: &[Vec<f32>]) -> Result<(Ran, Vec<f32>), Error> {{\n    \
                 let mut out = device.alloc::<{output}>({name}::KERNEL.output.len)?;\n    \
                 let ran = {name}::run(device, {}, &mut out)?;\n    \
                 Ok((ran, download(device, &out)?))\n\
             }}\n",
            uploads.join(", ")
        )
        .expect("writing to a String");
        writeln!(
            table,
            "    Generated {{ seed: {seed}, info: &{name}::KERNEL, run: run_{name} }},"
        )
        .expect("writing to a String");
    }
    writeln!(
        text,
        "/// Every generated kernel.\npub static KERNELS: &[Generated] = &[\n{table}];"
    )
    .expect("writing to a String");
    write_if_changed(&dir.join("kernels.rs"), text.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let built = ktune_build::Config::new()
        .source_dir(&dir)
        .user_cache(false)
        .search(false)
        .cargo_instructions(false)
        .build();
    if let Err(e) = built {
        panic!("{e}");
    }
}

//! Every generated kernel of the crate run through its generated `run`,
//! on seeded random inputs, against the CPU interpreter's evaluation of
//! the kernel's IR: on the CPU backend (the macro's reference), which
//! must equal it bit for bit (both compute in f32, in the same order, with
//! the same functions), and on the virtual GPU backend (the PTX the build
//! embedded, parsed and run by the runtime), within the verification
//! suite's tolerance. A failure prints the kernel's source.

use ktune::{Device, Error, Ran};
use ktune_core::canon;
use ktune_random_e2e::{Generated, KERNELS};
use ktune_vgpu::random;
use ktune_vgpu::verify::{Reference, encode, random_inputs, with_shape};

/// Runs `generated` on `device` and checks its output against `reference`,
/// bit for bit when `exact`.
fn check(
    generated: &Generated,
    (device, exact): (&Device, bool),
    inputs: &[Vec<f32>],
    reference: &Reference,
) -> Result<Ran, String> {
    let (ran, output) = (generated.run)(device, inputs).map_err(|e: Error| e.to_string())?;
    let differs = |(got, want): &(&f32, &f32)| got.to_bits() != want.to_bits();
    if exact
        && let Some((index, (got, want))) = output
            .iter()
            .zip(reference.output())
            .enumerate()
            .find(|(_, pair)| differs(pair))
    {
        return Err(format!(
            "{ran}: output element {index} is {got:e}, the interpreter says {want:e} exactly"
        ));
    }
    let bytes = encode(reference.kernel().output.dtype, &output);
    reference
        .compare(&bytes)
        .map_err(|failure| format!("{ran}: {failure}"))?;
    Ok(ran)
}

#[test]
fn generated_kernels_match_the_interpreter_on_the_cpu_and_the_virtual_gpu() {
    assert_eq!(KERNELS.len(), 200);

    let mut failures = Vec::new();
    for generated in KERNELS {
        let random = random::kernel(generated.seed);
        let shape = &random.entry.shapes[0];
        let kernel = with_shape(&random.entry.kernel, shape).expect("its own dimensions");
        let source = random.source_at(shape);
        assert_eq!(generated.info.name, kernel.name);
        assert_eq!(
            generated.info.checksum,
            canon::checksum(&kernel),
            "the crate's kernel is not the generator's\n{source}"
        );
        let inputs = random_inputs(&kernel, generated.seed);
        let reference = Reference::with_inputs(&kernel, inputs.clone());
        let devices = [
            (Device::cpu(), true, "cpu reference"),
            (Device::vgpu(), false, "vgpu sm_80 default"),
        ];
        for (device, exact, runs) in devices {
            match check(generated, (&device, exact), &inputs, &reference) {
                Ok(ran) => assert_eq!(ran.to_string(), runs, "{source}"),
                Err(e) => failures.push(format!("{}: {e}\n{source}\n", kernel.name)),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} runs failed:\n{}",
        failures.len(),
        2 * KERNELS.len(),
        failures.join("\n")
    );
}

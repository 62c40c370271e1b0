//! A variant's module is loaded once per CUDA context, however many
//! launches, threads and `Device` values use it. Alone in its test binary
//! because it counts the process's module loads. GPU-only and ignored
//! without one, as explained in `gpu.rs`.

mod expanded;

use expanded::{scale_add, softmax};
use ktune::__private::module_loads;
use ktune::prelude::*;

#[test]
#[ignore = "needs a GPU: cargo test -p ktune -- --include-ignored"]
fn modules_load_once_per_context() {
    let device = Device::cuda(0).unwrap_or_else(|e| panic!("this test needs a GPU: {e}"));
    let x = device.upload(&[0.5f32; 21]).unwrap();
    let mut out = device.alloc::<f32>(21).unwrap();

    let before = module_loads();
    for _ in 0..3 {
        softmax::run(&device, &x, &mut out).unwrap();
    }
    assert_eq!(module_loads() - before, 1);

    // Another Device on GPU 0 shares the primary context, and its modules.
    let again = Device::cuda(0).unwrap();
    let x2 = again.upload(&[0.5f32; 21]).unwrap();
    let mut out2 = again.alloc::<f32>(21).unwrap();
    softmax::run(&again, &x2, &mut out2).unwrap();
    assert_eq!(module_loads() - before, 1);

    // Threads racing to the first launch of another kernel load it once.
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                let xb = device.upload(&[bf16::ONE; 1000]).unwrap();
                let wb = device.upload(&[1.0f32; 1000]).unwrap();
                let mut ob = device.alloc::<bf16>(1000).unwrap();
                scale_add::run(&device, &xb, &wb, &mut ob).unwrap();
                assert_eq!(device.download(&ob).unwrap(), [bf16::from_f32(3.0); 1000]);
            });
        }
    });
    assert_eq!(module_loads() - before, 2);
    device.synchronize().unwrap();
}

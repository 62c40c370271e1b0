//! Hand-written copies of what `#[tuned_kernel]` (macros/src/expand.rs) and
//! the build helper generate, against the `ktune::__private` contract: no
//! `unsafe`, and each `mod __build` stands in for the build helper's
//! `include!` of `$OUT_DIR/ktune/<kernel>.rs`. The PTX is hand-written too
//! (checked with ptxas for sm_80 and sm_90).
//!
//! ```ignore
//! #[tuned_kernel(shape(R = 3, C = 7))]
//! pub fn softmax(x: Tensor<f32, (R, C)>) -> Tensor<f32, (R, C)> { ... }
//!
//! #[tuned_kernel(shape(N = 1000))]
//! pub fn scale_add(x: Tensor<bf16, (N,)>, w: Tensor<f32, (N,)>) -> Tensor<bf16, (N,)> {
//!     compute(|i| 2.0 * x[i] + w[i])
//! }
//! ```

#![allow(dead_code, clippy::all)]

/// The PTX module of `softmax`, with the same body under two entry names.
macro_rules! softmax_ptx {
    ($($entry:literal),*) => {
        concat!(
            ".version 7.0\n.target sm_80\n.address_size 64\n",
            $("\n.visible .entry ", $entry, " ", include_str!("softmax_entry.ptx"),)*
        )
    };
}

/// Both entries of the softmax module, for tests that build their own variant lists.
pub const SOFTMAX_PTX: &str = softmax_ptx!("softmax_default", "softmax_tuned");

pub mod softmax {
    use ::ktune::__private as __k;

    mod __build {
        pub const CHECKSUM: &str = "0123456789abcdef";

        pub static VARIANTS: &[::ktune::__private::Variant] = &[
            ::ktune::__private::Variant {
                gpu: Some("Imaginary GPU 9000"),
                sm: (9, 9),
                arch_specific: false,
                schedule: r#"{"rows_per_block":3}"#,
                entry: "softmax_tuned",
                ptx: super::super::SOFTMAX_PTX,
                grid: [1, 1, 1],
                block: [32, 1, 1],
                dynamic_shared_bytes: 0,
                workspace_bytes: 0,
                persistent: false,
                cluster: 1,
                registers: 0,
                tensor_maps: &[],
            },
            ::ktune::__private::Variant {
                gpu: None,
                sm: (8, 0),
                arch_specific: false,
                schedule: r#"{"rows_per_block":32}"#,
                entry: "softmax_default",
                ptx: super::super::SOFTMAX_PTX,
                grid: [1, 1, 1],
                block: [32, 1, 1],
                dynamic_shared_bytes: 0,
                workspace_bytes: 0,
                persistent: false,
                cluster: 1,
                registers: 0,
                tensor_maps: &[],
            },
        ];
    }

    const _: () = ::core::assert!(
        __k::same_checksum(__build::CHECKSUM, CHECKSUM),
        "ktune: stale build"
    );

    pub const CHECKSUM: &str = "0123456789abcdef";

    pub static KERNEL: __k::KernelInfo = __k::KernelInfo {
        name: "softmax",
        checksum: CHECKSUM,
        dims: &[("R", 3u32), ("C", 7u32)],
        inputs: &[__k::TensorInfo {
            name: "x",
            dtype: "f32",
            dims: &["R", "C"],
            len: 21usize,
        }],
        output: __k::TensorInfo {
            name: "out",
            dtype: "f32",
            dims: &["R", "C"],
            len: 21usize,
        },
        flops: 105u64,
        bytes: 168u64,
    };

    pub fn variants() -> &'static [__k::Variant] {
        __build::VARIANTS
    }

    pub fn reference(x: &[f32], out: &mut [f32]) -> ::core::result::Result<(), ::ktune::Error> {
        __k::check_len(&KERNEL, 0usize, x.len())?;
        __k::check_len(&KERNEL, 1usize, out.len())?;
        __k::for_each_row(out, 7usize, |__i0, __chunk| {
            let __l0 = {
                let mut __acc = f32::NEG_INFINITY;
                for __i2 in 0..7usize {
                    __acc = f32::max(
                        __acc,
                        __k::Element::to_f32(x[0usize + __i0 * 7usize + __i2 * 1usize]),
                    );
                }
                __acc
            };
            let __l1 = {
                let mut __acc = 0.0f32;
                for __i3 in 0..7usize {
                    __acc = __acc
                        + __k::math::exp(
                            __k::Element::to_f32(x[0usize + __i0 * 7usize + __i3 * 1usize]) - __l0,
                        );
                }
                __acc
            };
            for __i1 in 0..7usize {
                __chunk[0usize * 7usize + __i1] = <f32 as __k::Element>::from_f32(
                    __k::math::exp(
                        __k::Element::to_f32(x[0usize + __i0 * 7usize + __i1 * 1usize]) - __l0,
                    ) / __l1,
                );
            }
        });
        ::core::result::Result::Ok(())
    }

    pub fn launch(
        stream: &::std::sync::Arc<__k::cudarc::driver::CudaStream>,
        x: &__k::cudarc::driver::CudaSlice<f32>,
        out: &mut __k::cudarc::driver::CudaSlice<f32>,
    ) -> ::core::result::Result<&'static __k::Variant, ::ktune::Error> {
        __k::check_len(&KERNEL, 0usize, x.len())?;
        __k::check_len(&KERNEL, 1usize, out.len())?;
        __k::launch(
            stream,
            &KERNEL,
            __build::VARIANTS,
            &[x as &dyn __k::DeviceArg],
            out,
        )
    }

    pub fn run(
        device: &::ktune::Device,
        x: &::ktune::Buffer<f32>,
        out: &mut ::ktune::Buffer<f32>,
    ) -> ::core::result::Result<::ktune::Ran, ::ktune::Error> {
        match device.backend() {
            ::ktune::Backend::Cpu => {
                reference(
                    __k::host_slice(&KERNEL, 0usize, x)?,
                    __k::host_slice_mut(&KERNEL, 1usize, out)?,
                )?;
                ::core::result::Result::Ok(::ktune::Ran::cpu())
            }
            ::ktune::Backend::Cuda => {
                let stream = __k::stream(device, &KERNEL)?;
                let variant = launch(
                    stream,
                    __k::cuda_slice(&KERNEL, 0usize, x)?,
                    __k::cuda_slice_mut(&KERNEL, 1usize, out)?,
                )?;
                ::core::result::Result::Ok(::ktune::Ran::cuda(variant))
            }
            ::ktune::Backend::Vgpu => {
                __k::run_vgpu(&KERNEL, __build::VARIANTS, &[x as &dyn __k::HostArg], out)
            }
        }
    }
}

pub mod scale_add {
    use ::ktune::__private as __k;

    mod __build {
        pub const CHECKSUM: &str = "fedcba9876543210";

        pub static VARIANTS: &[::ktune::__private::Variant] = &[::ktune::__private::Variant {
            gpu: None,
            sm: (8, 0),
            arch_specific: false,
            schedule: r#"{"block":256}"#,
            entry: "scale_add",
            ptx: include_str!("scale_add.ptx"),
            grid: [4, 1, 1],
            block: [256, 1, 1],
            dynamic_shared_bytes: 64 * 1024,
            workspace_bytes: 0,
            persistent: false,
            cluster: 1,
            registers: 0,
            tensor_maps: &[],
        }];
    }

    const _: () = ::core::assert!(
        __k::same_checksum(__build::CHECKSUM, CHECKSUM),
        "ktune: stale build"
    );

    pub const CHECKSUM: &str = "fedcba9876543210";

    pub static KERNEL: __k::KernelInfo = __k::KernelInfo {
        name: "scale_add",
        checksum: CHECKSUM,
        dims: &[("N", 1000u32)],
        inputs: &[
            __k::TensorInfo {
                name: "x",
                dtype: "bf16",
                dims: &["N"],
                len: 1000usize,
            },
            __k::TensorInfo {
                name: "w",
                dtype: "f32",
                dims: &["N"],
                len: 1000usize,
            },
        ],
        output: __k::TensorInfo {
            name: "out",
            dtype: "bf16",
            dims: &["N"],
            len: 1000usize,
        },
        flops: 2000u64,
        bytes: 8000u64,
    };

    pub fn variants() -> &'static [__k::Variant] {
        __build::VARIANTS
    }

    pub fn reference(
        x: &[__k::half::bf16],
        w: &[f32],
        out: &mut [__k::half::bf16],
    ) -> ::core::result::Result<(), ::ktune::Error> {
        __k::check_len(&KERNEL, 0usize, x.len())?;
        __k::check_len(&KERNEL, 1usize, w.len())?;
        __k::check_len(&KERNEL, 2usize, out.len())?;
        __k::for_each_row(out, 1usize, |__i0, __chunk| {
            __chunk[0usize] = <__k::half::bf16 as __k::Element>::from_f32(
                (f32::from_bits(1073741824u32) * __k::Element::to_f32(x[0usize + __i0 * 1usize]))
                    + __k::Element::to_f32(w[0usize + __i0 * 1usize]),
            );
        });
        ::core::result::Result::Ok(())
    }

    pub fn launch(
        stream: &::std::sync::Arc<__k::cudarc::driver::CudaStream>,
        x: &__k::cudarc::driver::CudaSlice<__k::half::bf16>,
        w: &__k::cudarc::driver::CudaSlice<f32>,
        out: &mut __k::cudarc::driver::CudaSlice<__k::half::bf16>,
    ) -> ::core::result::Result<&'static __k::Variant, ::ktune::Error> {
        __k::check_len(&KERNEL, 0usize, x.len())?;
        __k::check_len(&KERNEL, 1usize, w.len())?;
        __k::check_len(&KERNEL, 2usize, out.len())?;
        __k::launch(
            stream,
            &KERNEL,
            __build::VARIANTS,
            &[x as &dyn __k::DeviceArg, w as &dyn __k::DeviceArg],
            out,
        )
    }

    pub fn run(
        device: &::ktune::Device,
        x: &::ktune::Buffer<__k::half::bf16>,
        w: &::ktune::Buffer<f32>,
        out: &mut ::ktune::Buffer<__k::half::bf16>,
    ) -> ::core::result::Result<::ktune::Ran, ::ktune::Error> {
        match device.backend() {
            ::ktune::Backend::Cpu => {
                reference(
                    __k::host_slice(&KERNEL, 0usize, x)?,
                    __k::host_slice(&KERNEL, 1usize, w)?,
                    __k::host_slice_mut(&KERNEL, 2usize, out)?,
                )?;
                ::core::result::Result::Ok(::ktune::Ran::cpu())
            }
            ::ktune::Backend::Cuda => {
                let stream = __k::stream(device, &KERNEL)?;
                let variant = launch(
                    stream,
                    __k::cuda_slice(&KERNEL, 0usize, x)?,
                    __k::cuda_slice(&KERNEL, 1usize, w)?,
                    __k::cuda_slice_mut(&KERNEL, 2usize, out)?,
                )?;
                ::core::result::Result::Ok(::ktune::Ran::cuda(variant))
            }
            ::ktune::Backend::Vgpu => __k::run_vgpu(
                &KERNEL,
                __build::VARIANTS,
                &[x as &dyn __k::HostArg, w as &dyn __k::HostArg],
                out,
            ),
        }
    }
}

//! Expands a checked kernel into its module: metadata, the CPU reference,
//! the CUDA launcher and the backend-dispatching `run` (CPU reference, CUDA
//! launch, or the virtual GPU).

use ktune_core::ir::{Kernel, Tensor};
use ktune_core::{canon, syntax};
use proc_macro2::{Ident, Span, TokenStream};
use quote::{format_ident, quote};

use crate::reference;

pub fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let parsed: Result<syn::ItemFn, _> = syn::parse2(item.clone());
    match syntax::parse_kernel(attr, item) {
        Ok(kernel) => match parsed {
            Ok(f) => module(&kernel, &f),
            Err(e) => e.to_compile_error(),
        },
        Err(e) => fallback(e, parsed.ok()),
    }
}

/// The errors, plus an empty module of the kernel's name so that paths to it
/// elsewhere in the crate do not add errors of their own.
fn fallback(error: syn::Error, item: Option<syn::ItemFn>) -> TokenStream {
    let error = error.to_compile_error();
    let Some(f) = item else {
        return error;
    };
    let vis = &f.vis;
    let name = &f.sig.ident;
    quote! {
        #error
        #[allow(dead_code)]
        #vis mod #name {}
    }
}

fn str_lit(s: &str) -> syn::LitStr {
    syn::LitStr::new(s, Span::call_site())
}

fn tensor_info(k: &Kernel, t: &Tensor) -> TokenStream {
    let name = str_lit(&t.name);
    let dtype = str_lit(t.dtype.name());
    let dims = t.dims.iter().map(|d| str_lit(&k.dim(*d).name));
    let len = k.len_of(t) as usize;
    quote! {
        __k::TensorInfo { name: #name, dtype: #dtype, dims: &[#(#dims),*], len: #len }
    }
}

fn module(k: &Kernel, f: &syn::ItemFn) -> TokenStream {
    let vis = &f.vis;
    let name = &f.sig.ident;
    let docs = f.attrs.iter().filter(|a| a.path().is_ident("doc"));
    let name_lit = str_lit(&k.name);
    let checksum = str_lit(&canon::checksum(k));
    let build_file = str_lit(&format!("/ktune/{}.rs", k.name));
    let dims = k.dims.iter().map(|d| {
        let n = str_lit(&d.name);
        let s = d.size;
        quote!((#n, #s))
    });
    let inputs_info = k.inputs.iter().map(|t| tensor_info(k, t));
    let output_info = tensor_info(k, &k.output);
    let flops = k.flops();
    let bytes = k.compulsory_bytes();

    let inputs: Vec<Ident> = k
        .inputs
        .iter()
        .map(|t| Ident::new(&t.name, Span::call_site()))
        .collect();
    let out = if k.inputs.iter().any(|t| t.name == "out") {
        format_ident!("output")
    } else {
        format_ident!("out")
    };
    let in_types: Vec<TokenStream> = k
        .inputs
        .iter()
        .map(|t| reference::elem_type(t.dtype))
        .collect();
    let out_type = reference::elem_type(k.output.dtype);
    let n_in = k.inputs.len();
    let in_idx: Vec<usize> = (0..n_in).collect();
    let reference_body = reference::body(k, &inputs, &out);
    let shape_doc = str_lit(&format!(
        " Shape: {}.",
        k.dims
            .iter()
            .map(|d| format!("{} = {}", d.name, d.size))
            .collect::<Vec<_>>()
            .join(", ")
    ));

    quote! {
        #(#docs)*
        #[doc = ""]
        #[doc = #shape_doc]
        #[allow(clippy::all, clippy::pedantic, unused_parens, non_snake_case)]
        #vis mod #name {
            use ::ktune::__private as __k;

            // The build helper's variants: dead code, like the rest of the
            // module, while the application calls none of its functions.
            #[allow(dead_code)]
            mod __build {
                include!(concat!(
                    env!("OUT_DIR", "ktune kernels need a build script: add `fn main() { ktune_build::tune_crate(); }` to build.rs"),
                    #build_file
                ));
            }

            const _: () = ::core::assert!(
                __k::same_checksum(__build::CHECKSUM, CHECKSUM),
                "ktune: the compiled variants of this kernel were built from another version of its source; the build script did not rerun"
            );

            /// Checksum of the kernel's canonical form.
            pub const CHECKSUM: &str = #checksum;

            /// The kernel's metadata.
            pub static KERNEL: __k::KernelInfo = __k::KernelInfo {
                name: #name_lit,
                checksum: CHECKSUM,
                dims: &[#(#dims),*],
                inputs: &[#(#inputs_info),*],
                output: #output_info,
                flops: #flops,
                bytes: #bytes,
            };

            /// The compiled variants embedded in this binary.
            pub fn variants() -> &'static [__k::Variant] {
                __build::VARIANTS
            }

            /// Computes the kernel on the CPU (the reference every variant is checked against).
            pub fn reference(#(#inputs: &[#in_types],)* #out: &mut [#out_type]) -> ::core::result::Result<(), ::ktune::Error> {
                #(__k::check_len(&KERNEL, #in_idx, #inputs.len())?;)*
                __k::check_len(&KERNEL, #n_in, #out.len())?;
                #reference_body
                ::core::result::Result::Ok(())
            }

            /// Launches the variant chosen for the stream's GPU.
            pub fn launch(
                stream: &::std::sync::Arc<__k::cudarc::driver::CudaStream>,
                #(#inputs: &__k::cudarc::driver::CudaSlice<#in_types>,)*
                #out: &mut __k::cudarc::driver::CudaSlice<#out_type>,
            ) -> ::core::result::Result<&'static __k::Variant, ::ktune::Error> {
                #(__k::check_len(&KERNEL, #in_idx, #inputs.len())?;)*
                __k::check_len(&KERNEL, #n_in, #out.len())?;
                __k::launch(stream, &KERNEL, __build::VARIANTS, &[#(#inputs as &dyn __k::DeviceArg),*], #out)
            }

            /// Runs the kernel on `device`'s backend.
            pub fn run(
                device: &::ktune::Device,
                #(#inputs: &::ktune::Buffer<#in_types>,)*
                #out: &mut ::ktune::Buffer<#out_type>,
            ) -> ::core::result::Result<::ktune::Ran, ::ktune::Error> {
                match device.backend() {
                    ::ktune::Backend::Cpu => {
                        reference(
                            #(__k::host_slice(&KERNEL, #in_idx, #inputs)?,)*
                            __k::host_slice_mut(&KERNEL, #n_in, #out)?,
                        )?;
                        ::core::result::Result::Ok(::ktune::Ran::cpu())
                    }
                    ::ktune::Backend::Cuda => {
                        let stream = __k::stream(device, &KERNEL)?;
                        let variant = launch(
                            stream,
                            #(__k::cuda_slice(&KERNEL, #in_idx, #inputs)?,)*
                            __k::cuda_slice_mut(&KERNEL, #n_in, #out)?,
                        )?;
                        ::core::result::Result::Ok(::ktune::Ran::cuda(variant))
                    }
                    ::ktune::Backend::Vgpu => {
                        __k::run_vgpu(&KERNEL, __build::VARIANTS, &[#(#inputs as &dyn __k::HostArg),*], #out)
                    }
                }
            }
        }
    }
}

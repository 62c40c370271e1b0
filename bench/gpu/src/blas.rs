//! The cuBLAS baseline, loaded at run time: sgemm for f32 (full f32, the
//! default math mode, no TF32; for an `allow_tf32` kernel, sgemm in the
//! `CUBLAS_TF32_TENSOR_OP_MATH` mode, which lets cuBLAS round to tf32 on
//! tensor cores just as the kernel may), gemmEx with bf16 operands and f32
//! compute for bf16, and their strided-batched forms for a batch.

use anyhow::{Context, Result, bail};
use cudarc::cublas::sys::{self, cublasOperation_t};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::CudaSlice;
use half::bf16;
use ktune_core::DType;

use crate::gpu::Gpu;

/// A cuBLAS handle on the GPU's stream.
pub struct Blas {
    handle: CudaBlas,
}

/// A row-major product `C[b] = A[b]·B[b]`, `A[b]` of `m × k`, `B[b]` of
/// `k × n`, every matrix of `dtype`.
#[derive(Debug, Clone, Copy)]
pub struct Product {
    pub batch: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub dtype: DType,
    /// Whether f32 products may round their factors to tf32 (the kernel's
    /// `allow_tf32`).
    pub tf32: bool,
}

impl Blas {
    /// Loads cuBLAS and creates a handle; returns it with cuBLAS's version.
    ///
    /// # Errors
    ///
    /// When the library is not found (searched as cudarc names it,
    /// `libcublas.so` first, on `LD_LIBRARY_PATH`), or handle creation fails.
    pub fn open(gpu: &Gpu) -> Result<(Blas, String)> {
        // SAFETY: loads (and unloads) the cuBLAS library by its standard
        // names, to ask whether it exists before cudarc would panic on its
        // absence.
        if !unsafe { sys::is_culib_present() } {
            bail!("cuBLAS not found: put the folder holding libcublas.so on LD_LIBRARY_PATH");
        }
        let handle = CudaBlas::new(gpu.stream.clone()).context("creating a cuBLAS handle")?;
        let mut version = 0;
        // SAFETY: the handle is valid; cublasGetVersion writes one int.
        unsafe { sys::cublasGetVersion_v2(*handle.handle(), &mut version) }
            .result()
            .context("asking cuBLAS's version")?;
        let version = format!(
            "{}.{}.{}",
            version / 10000,
            (version % 10000) / 100,
            version % 100
        );
        Ok((Blas { handle }, version))
    }

    /// Queues `c = a·b` on the GPU's stream.
    pub fn gemm(
        &self,
        p: Product,
        a: &CudaSlice<u8>,
        b: &CudaSlice<u8>,
        c: &mut CudaSlice<u8>,
    ) -> Result<()> {
        match p.dtype {
            DType::F32 if p.tf32 => {
                self.math_mode(sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH)?;
                let queued = self.typed(p, 1.0f32, 0.0f32, a, b, c);
                self.math_mode(sys::cublasMath_t::CUBLAS_DEFAULT_MATH)?;
                queued
            }
            DType::F32 => self.typed(p, 1.0f32, 0.0f32, a, b, c),
            DType::Bf16 => self.typed(p, bf16::ONE, bf16::ZERO, a, b, c),
            DType::F16 => bail!("no f16 baseline"),
        }
    }

    /// Sets the handle's math mode, which applies to the calls after it.
    fn math_mode(&self, mode: sys::cublasMath_t) -> Result<()> {
        // SAFETY: the handle is valid; the mode is one of the enum's values.
        unsafe { sys::cublasSetMathMode(*self.handle.handle(), mode) }
            .result()
            .context("setting cuBLAS's math mode")
    }

    fn typed<T>(
        &self,
        p: Product,
        alpha: T,
        beta: T,
        a: &CudaSlice<u8>,
        b: &CudaSlice<u8>,
        c: &mut CudaSlice<u8>,
    ) -> Result<()>
    where
        CudaBlas: Gemm<T>,
    {
        let (la, lb, lc) = (
            p.batch * p.m * p.k,
            p.batch * p.k * p.n,
            p.batch * p.m * p.n,
        );
        let int = |x: usize| i32::try_from(x).context("a dimension exceeds cuBLAS's int");
        // SAFETY: the buffers hold elements of `T` (the case's dtype); each
        // view covers the whole matrix and `transmute` checks the buffer is
        // long enough.
        let (a, b, mut c) = unsafe {
            (
                a.transmute::<T>(la).context("A is too short")?,
                b.transmute::<T>(lb).context("B is too short")?,
                c.transmute_mut::<T>(lc).context("C is too short")?,
            )
        };
        // cuBLAS is column-major: a row-major C = A·B is the column-major
        // Cᵀ = Bᵀ·Aᵀ, with no transposition of the data.
        let gemm = GemmConfig {
            transa: cublasOperation_t::CUBLAS_OP_N,
            transb: cublasOperation_t::CUBLAS_OP_N,
            m: int(p.n)?,
            n: int(p.m)?,
            k: int(p.k)?,
            alpha,
            lda: int(p.n)?,
            ldb: int(p.k)?,
            beta,
            ldc: int(p.n)?,
        };
        // SAFETY: with these leading dimensions and strides cuBLAS reads
        // `lb` elements of B, `la` of A and writes `lc` of C: the views'
        // lengths.
        unsafe {
            if p.batch == 1 {
                self.handle.gemm(gemm, &b, &a, &mut c)
            } else {
                let cfg = StridedBatchedConfig {
                    gemm,
                    batch_size: int(p.batch)?,
                    stride_a: (p.k * p.n) as i64,
                    stride_b: (p.m * p.k) as i64,
                    stride_c: (p.m * p.n) as i64,
                };
                self.handle.gemm_strided_batched(cfg, &b, &a, &mut c)
            }
        }
        .context("cuBLAS gemm")
    }
}

//! Whether the CUDA driver library can be loaded, asked before any other
//! cudarc call: cudarc panics, rather than returning an error, when a driver
//! function is called and libcuda is absent.

use std::sync::OnceLock;

/// True when libcuda (nvcuda on Windows) can be loaded on this machine.
pub(crate) fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: this loads the system's CUDA driver library by its standard
    // names (and unloads it again); running the initialisers of the installed
    // driver library is what any CUDA program does first.
    *PRESENT.get_or_init(|| unsafe { cudarc::driver::sys::is_culib_present() })
}

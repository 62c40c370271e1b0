//! PTX: the typed instruction list, a builder for it, and its printer.

pub mod builder;
pub mod inst;
pub mod print;

pub use builder::Builder;
pub use inst::Kernel;
pub use print::print;

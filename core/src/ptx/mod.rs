//! PTX: the typed instruction list, a builder for it, its printer, and a
//! parser for the printed text.

pub mod builder;
pub mod inst;
pub mod parse;
pub mod print;
pub mod tensor_map;

pub use builder::Builder;
pub use inst::Kernel;
pub use parse::{ParseError, parse};
pub use print::print;
pub use tensor_map::{Swizzle, TensorMap};

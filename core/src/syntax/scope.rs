//! The kernel's one namespace: dimensions, tensors, index variables and lets.

use proc_macro2::Ident;

use super::Errors;
use super::ast::Loc;
use crate::ir::{DimId, LetId, TensorId, VarId};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Binding {
    Dim(DimId),
    Tensor(TensorId),
    /// `None`: the variable covers no dimension (an extra `compute`
    /// parameter, or one over an unknown dimension), already reported.
    Var(Option<VarId>),
    Let(LetId),
    /// A name declared twice: uses are ambiguous and the redeclaration is
    /// already reported, so they resolve to nothing, silently.
    Error,
}

impl Binding {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Binding::Dim(_) => "a dimension in `shape(...)`",
            Binding::Tensor(_) => "a tensor parameter",
            Binding::Var(_) => "an index variable",
            Binding::Let(_) => "a `let` binding",
            Binding::Error => "a name declared twice",
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Scope {
    /// Innermost last; a reduction's variable is popped when its closure ends.
    entries: Vec<(String, Binding)>,
}

impl Scope {
    pub(crate) fn lookup(&self, name: &Ident) -> Option<Binding> {
        self.entries
            .iter()
            .rev()
            .find(|(n, _)| name == n)
            .map(|&(_, binding)| binding)
    }

    /// Declares `name`, reporting a redeclaration of a visible name.
    pub(crate) fn declare(&mut self, name: &Ident, binding: Binding, errors: &mut Errors) {
        let text = name.to_string();
        if text.starts_with("r#") {
            errors.push(Loc::of(name).error(format!(
                "raw identifiers are not supported in a ktune kernel; rename `{text}`"
            )));
        }
        let binding = match self.lookup(name) {
            Some(previous) => {
                errors.push(Loc::of(name).error(format!(
                    "duplicate name `{text}`: already declared as {}; pick another name",
                    previous.describe()
                )));
                Binding::Error
            }
            None => binding,
        };
        self.entries.push((text, binding));
    }

    pub(crate) fn depth(&self) -> usize {
        self.entries.len()
    }

    /// Forgets what was declared since `depth` was taken.
    pub(crate) fn truncate(&mut self, depth: usize) {
        self.entries.truncate(depth);
    }

    /// The visible names whose binding satisfies `keep`, outermost first.
    pub(crate) fn names(&self, keep: impl Fn(Binding) -> bool) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|(_, binding)| keep(*binding))
            .map(|(name, _)| name.as_str())
            .collect()
    }

    pub(crate) fn bindings(&self) -> impl DoubleEndedIterator<Item = (&str, Binding)> {
        self.entries
            .iter()
            .map(|(name, binding)| (name.as_str(), *binding))
    }
}

//! The kernel IR: a checked, typed description of one kernel's computation.
//!
//! Produced by the front-end ([`crate::syntax`]) and consumed by the CPU
//! reference generator (in the macro crate), the scheduler and the lowering to
//! PTX. Every id in a [`Kernel`] indexes one of its vectors; the front-end
//! guarantees the invariants listed on each type, so consumers never re-check.

use crate::dtype::DType;

/// Index into [`Kernel::dims`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DimId(pub usize);

/// Index into [`Kernel::inputs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub usize);

/// Index into [`Kernel::vars`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VarId(pub usize);

/// Index into [`Kernel::lets`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LetId(pub usize);

/// Index into [`Kernel::exprs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExprId(pub usize);

/// A named dimension with a static, positive size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dim {
    pub name: String,
    pub size: u32,
}

/// A tensor parameter (input) or the result (output). Row-major, densely
/// packed: the last dimension is contiguous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor {
    pub name: String,
    pub dtype: DType,
    pub dims: Vec<DimId>,
}

/// What introduces an index variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarKind {
    /// The `i`-th parameter of the `compute` closure: ranges over the output's
    /// `i`-th dimension.
    Output(usize),
    /// The variable of a reduction's closure.
    Reduce,
}

/// An index variable, ranging over `0..dims[dim].size`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Var {
    pub name: String,
    pub dim: DimId,
    pub kind: VarKind,
}

/// A `let` binding inside the `compute` closure.
///
/// Invariant: `value` refers only to output variables, earlier lets and the
/// variables of reductions nested inside it; `deps` is the set of output
/// variables its value depends on (directly or through earlier lets), sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Let {
    pub name: String,
    pub value: ExprId,
    pub deps: Vec<VarId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Tanh,
    Abs,
    Relu,
    Sigmoid,
    Silu,
    /// GELU, tanh approximation: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
    GeluTanh,
    /// GELU, exact form: `0.5·x·(1 + erf(x/√2))`.
    GeluErf,
    Erf,
}

impl UnaryOp {
    /// The functions of the kernel language, in the order error messages
    /// list them (every unary op but `Neg`, which is written `-x`).
    pub const FUNCTIONS: [UnaryOp; 12] = [
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Tanh,
        UnaryOp::Abs,
        UnaryOp::Relu,
        UnaryOp::Sigmoid,
        UnaryOp::Silu,
        UnaryOp::GeluTanh,
        UnaryOp::GeluErf,
        UnaryOp::Erf,
    ];

    /// The op's name: the function's name in the kernel language, in the
    /// canonical form and in the reference's math module.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Abs => "abs",
            UnaryOp::Relu => "relu",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Silu => "silu",
            UnaryOp::GeluTanh => "gelu",
            UnaryOp::GeluErf => "gelu_erf",
            UnaryOp::Erf => "erf",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Min,
    Max,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogicOp {
    And,
    Or,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
    /// Sum divided by the extent of the reduced dimension.
    Mean,
}

/// The static type of an expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Type {
    Bool,
    /// A number, computed in f32. The dtype records where it came from (a
    /// load, a cast) for the front-end's type rules only.
    Num(DType),
}

/// One node of the expression arena. Children always have smaller ids than
/// their parent, so a forward pass over [`Kernel::exprs`] sees operands first.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A constant, of type `Num(F32)`.
    Const(f32),
    /// An index variable's value, as a number.
    Index(VarId),
    /// `tensor[index[0]][index[1]]…`; invariant: `index.len()` is the
    /// tensor's rank and `vars[index[i]].dim == tensor.dims[i]`.
    Load {
        tensor: TensorId,
        index: Vec<VarId>,
    },
    Let(LetId),
    Unary(UnaryOp, ExprId),
    Binary(BinaryOp, ExprId, ExprId),
    Compare(CmpOp, ExprId, ExprId),
    Logic(LogicOp, ExprId, ExprId),
    Not(ExprId),
    /// `select(cond, then, else)`.
    Select(ExprId, ExprId, ExprId),
    /// Round to the dtype's precision (the value stays an f32).
    Cast(DType, ExprId),
    /// `op(dim, |var| body)`: `var` is a [`VarKind::Reduce`] variable.
    Reduce {
        op: ReduceOp,
        var: VarId,
        body: ExprId,
    },
}

/// A checked kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    pub name: String,
    pub dims: Vec<Dim>,
    pub inputs: Vec<Tensor>,
    pub output: Tensor,
    pub vars: Vec<Var>,
    pub lets: Vec<Let>,
    pub exprs: Vec<Expr>,
    /// Types of `exprs`, index for index.
    pub types: Vec<Type>,
    /// The output element's value.
    pub root: ExprId,
    /// `#[tuned_kernel(..., allow_tf32)]`: a contraction of f32 operands may
    /// run on tensor cores, which round each factor to tf32 (10 mantissa
    /// bits) and accumulate in f32. Without it f32 products are exact.
    pub allow_tf32: bool,
}

impl Kernel {
    /// The shape: each dimension's name and size, in declaration order.
    pub fn shape(&self) -> impl Iterator<Item = (String, u32)> + '_ {
        self.dims.iter().map(|d| (d.name.clone(), d.size))
    }

    pub fn dim(&self, id: DimId) -> &Dim {
        &self.dims[id.0]
    }

    pub fn input(&self, id: TensorId) -> &Tensor {
        &self.inputs[id.0]
    }

    pub fn var(&self, id: VarId) -> &Var {
        &self.vars[id.0]
    }

    pub fn let_(&self, id: LetId) -> &Let {
        &self.lets[id.0]
    }

    pub fn expr(&self, id: ExprId) -> &Expr {
        &self.exprs[id.0]
    }

    /// Extent of an index variable.
    pub fn extent(&self, var: VarId) -> u32 {
        self.dim(self.var(var).dim).size
    }

    /// The output variables, in the order of the output's dimensions.
    pub fn output_vars(&self) -> Vec<VarId> {
        let mut vars: Vec<(usize, VarId)> = self
            .vars
            .iter()
            .enumerate()
            .filter_map(|(i, v)| match v.kind {
                VarKind::Output(pos) => Some((pos, VarId(i))),
                VarKind::Reduce => None,
            })
            .collect();
        vars.sort();
        vars.into_iter().map(|(_, v)| v).collect()
    }

    /// Number of elements of a tensor.
    pub fn len_of(&self, tensor: &Tensor) -> u64 {
        tensor
            .dims
            .iter()
            .fold(1u64, |n, d| n.saturating_mul(u64::from(self.dim(*d).size)))
    }

    /// Element strides of a tensor, one per dimension (row-major).
    pub fn strides_of(&self, tensor: &Tensor) -> Vec<u64> {
        let mut strides = vec![1u64; tensor.dims.len()];
        for i in (0..tensor.dims.len().saturating_sub(1)).rev() {
            strides[i] =
                strides[i + 1].saturating_mul(u64::from(self.dim(tensor.dims[i + 1]).size));
        }
        strides
    }

    /// The children of an expression node, in evaluation order.
    pub fn children(&self, id: ExprId) -> Vec<ExprId> {
        match self.expr(id) {
            Expr::Const(_) | Expr::Index(_) | Expr::Load { .. } | Expr::Let(_) => vec![],
            Expr::Unary(_, a) | Expr::Not(a) | Expr::Cast(_, a) => vec![*a],
            Expr::Reduce { body, .. } => vec![*body],
            Expr::Binary(_, a, b) | Expr::Compare(_, a, b) | Expr::Logic(_, a, b) => vec![*a, *b],
            Expr::Select(c, a, b) => vec![*c, *a, *b],
        }
    }

    /// The inputs the computation never reads (through its lets included),
    /// in parameter order.
    pub fn unread_inputs(&self) -> Vec<&Tensor> {
        let mut read = vec![false; self.inputs.len()];
        let mut seen = vec![false; self.exprs.len()];
        let mut stack = vec![self.root];
        while let Some(id) = stack.pop() {
            if std::mem::replace(&mut seen[id.0], true) {
                continue;
            }
            match self.expr(id) {
                Expr::Load { tensor, .. } => read[tensor.0] = true,
                Expr::Let(l) => stack.push(self.let_(*l).value),
                _ => stack.extend(self.children(id)),
            }
        }
        self.inputs
            .iter()
            .zip(read)
            .filter_map(|(t, read)| (!read).then_some(t))
            .collect()
    }

    /// The set of free index variables of an expression: the variables it
    /// reads, directly or through lets, minus those bound by reductions inside
    /// it. Sorted.
    pub fn free_vars(&self, id: ExprId) -> Vec<VarId> {
        let mut out = Vec::new();
        self.collect_free_vars(id, &mut out);
        out.sort();
        out.dedup();
        out
    }

    fn collect_free_vars(&self, id: ExprId, out: &mut Vec<VarId>) {
        match self.expr(id) {
            Expr::Index(v) => out.push(*v),
            Expr::Load { index, .. } => out.extend(index.iter().copied()),
            Expr::Let(l) => out.extend(self.let_(*l).deps.iter().copied()),
            Expr::Reduce { var, body, .. } => {
                let mut inner = Vec::new();
                self.collect_free_vars(*body, &mut inner);
                out.extend(inner.into_iter().filter(|v| v != var));
            }
            _ => {
                for c in self.children(id) {
                    self.collect_free_vars(c, out);
                }
            }
        }
    }

    /// Whether an expression contains a reduction (not looking through lets).
    pub fn contains_reduce(&self, id: ExprId) -> bool {
        matches!(self.expr(id), Expr::Reduce { .. })
            || self
                .children(id)
                .into_iter()
                .any(|c| self.contains_reduce(c))
    }

    /// Floating-point operations for one evaluation of the whole kernel: a
    /// let counted once per value of its dependencies, a reduction's body once
    /// per reduced element (a figure for throughput reports, not a cost model).
    pub fn flops(&self) -> u64 {
        let lets: u64 = self
            .lets
            .iter()
            .map(|l| {
                let evaluations = l
                    .deps
                    .iter()
                    .fold(1u64, |n, v| n.saturating_mul(u64::from(self.extent(*v))));
                self.expr_flops(l.value).saturating_mul(evaluations)
            })
            .fold(0u64, u64::saturating_add);
        lets.saturating_add(
            self.expr_flops(self.root)
                .saturating_mul(self.len_of(&self.output)),
        )
    }

    fn expr_flops(&self, id: ExprId) -> u64 {
        let own = match self.expr(id) {
            Expr::Const(_) | Expr::Index(_) | Expr::Load { .. } | Expr::Let(_) => 0,
            Expr::Reduce { var, body, .. } => {
                return u64::from(self.extent(*var))
                    .saturating_mul(self.expr_flops(*body).saturating_add(1));
            }
            _ => 1,
        };
        self.children(id)
            .into_iter()
            .map(|c| self.expr_flops(c))
            .fold(own, u64::saturating_add)
    }

    /// Bytes read and written by one evaluation if every tensor were touched
    /// exactly once (the compulsory traffic). Sizes saturate rather than
    /// overflow, here and in the other size computations.
    pub fn compulsory_bytes(&self) -> u64 {
        self.inputs
            .iter()
            .chain(std::iter::once(&self.output))
            .map(|t| self.len_of(t).saturating_mul(u64::from(t.dtype.size())))
            .fold(0, u64::saturating_add)
    }
}

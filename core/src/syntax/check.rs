//! The surface syntax tree → a checked [`ir::Kernel`]: name resolution,
//! shapes, index ranges and types.
//!
//! Every check that fails reports once and yields `None`; whatever uses the
//! failed construct then yields `None` silently, so one mistake is one error.

use std::collections::BTreeSet;

use proc_macro2::Ident;

use super::Errors;
use super::args::Args;
use super::ast::{self, BinOp, ExprKind, Loc};
use super::builtin::{self, Function};
use super::scope::{Binding, Scope};
use super::suggest;
use crate::dtype::DType;
use crate::ir::{self, DimId, ExprId, LetId, TensorId, Type, VarId, VarKind};

/// The output tensor's name in the IR; no parameter may take it.
const OUTPUT_NAME: &str = "out";

/// The most elements a tensor may have: 2^31 - 1.
const MAX_TENSOR_ELEMENTS: u64 = i32::MAX as u64;

pub(crate) fn kernel(args: &Args, kernel: &ast::Kernel, errors: &mut Errors) -> Option<ir::Kernel> {
    let mut checker = Checker {
        errors,
        dims_complete: args.dims_complete,
        names_complete: kernel.names_complete,
        dims: Vec::new(),
        scope: Scope::default(),
        inputs: Vec::new(),
        vars: Vec::new(),
        lets: Vec::new(),
        exprs: Vec::new(),
        types: Vec::new(),
    };
    for dim in &args.dims {
        let id = DimId(checker.dims.len());
        checker.dims.push(ir::Dim {
            name: dim.name.to_string(),
            size: dim.size,
        });
        checker
            .scope
            .declare(&dim.name, Binding::Dim(id), checker.errors);
    }
    for param in &kernel.params {
        let tensor = param
            .ty
            .as_ref()
            .and_then(|ty| checker.tensor(param.name.to_string(), ty));
        if param.name == OUTPUT_NAME {
            checker.error(
                Loc::of(&param.name),
                format!("`{OUTPUT_NAME}` names the kernel's output; rename this parameter"),
            );
        }
        let id = TensorId(checker.inputs.len());
        checker.inputs.push(tensor);
        checker
            .scope
            .declare(&param.name, Binding::Tensor(id), checker.errors);
    }
    let output = kernel
        .output
        .as_ref()
        .and_then(|ty| checker.tensor(OUTPUT_NAME.to_owned(), ty));
    if kernel.name.to_string().starts_with("r#") {
        checker.error(
            Loc::of(&kernel.name),
            format!(
                "raw identifiers are not supported in a ktune kernel; rename `{}`",
                kernel.name
            ),
        );
    }
    let body = kernel.body.as_ref()?;
    let root = checker.compute(body, kernel.output.as_ref(), output.as_ref());

    let inputs = checker.inputs.into_iter().collect::<Option<Vec<_>>>()?;
    let lets = checker
        .lets
        .into_iter()
        .map(|slot| {
            slot.value.map(|value| ir::Let {
                name: slot.name,
                value: value.id,
                deps: slot.deps,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(ir::Kernel {
        name: kernel.name.to_string(),
        dims: checker.dims,
        inputs,
        output: output?,
        vars: checker.vars,
        lets,
        exprs: checker.exprs,
        types: checker.types,
        root: root?.id,
        allow_tf32: args.allow_tf32,
    })
}

struct Checker<'a> {
    errors: &'a mut Errors,
    dims_complete: bool,
    names_complete: bool,
    dims: Vec<ir::Dim>,
    scope: Scope,
    /// One per named parameter; `None` for one whose type was rejected.
    inputs: Vec<Option<ir::Tensor>>,
    vars: Vec<ir::Var>,
    lets: Vec<LetSlot>,
    exprs: Vec<ir::Expr>,
    types: Vec<Type>,
}

struct LetSlot {
    name: String,
    /// `None` when the value was rejected.
    value: Option<Val>,
    deps: Vec<VarId>,
}

/// A checked expression.
#[derive(Debug, Clone, Copy)]
struct Val {
    id: ExprId,
    ty: Type,
}

impl Checker<'_> {
    fn error(&mut self, loc: Loc, message: impl std::fmt::Display) {
        self.errors.push(loc.error(message));
    }

    fn push(&mut self, expr: ir::Expr, ty: Type) -> Val {
        let id = ExprId(self.exprs.len());
        self.exprs.push(expr);
        self.types.push(ty);
        Val { id, ty }
    }

    fn dim_names(&self) -> String {
        let names: Vec<&str> = self.dims.iter().map(|d| d.name.as_str()).collect();
        names.join(", ")
    }

    fn dim_name(&self, id: DimId) -> &str {
        self.dims.get(id.0).map_or("?", |d| d.name.as_str())
    }

    fn var_dim(&self, id: VarId) -> Option<DimId> {
        self.vars.get(id.0).map(|v| v.dim)
    }

    fn tensor(&mut self, name: String, ty: &ast::TensorType) -> Option<ir::Tensor> {
        let mut dims = Vec::new();
        for dim in &ty.dims {
            match self.dims.iter().position(|d| *dim == d.name) {
                Some(id) => dims.push(DimId(id)),
                None => self.unknown_dim(dim),
            }
        }
        if dims.len() != ty.dims.len() {
            return None;
        }
        // Lowerings index every tensor with 32-bit signed offsets.
        let len = dims
            .iter()
            .try_fold(1u64, |n, d| n.checked_mul(u64::from(self.dims[d.0].size)));
        if len.is_none_or(|len| len > MAX_TENSOR_ELEMENTS) {
            let sizes: Vec<String> = dims
                .iter()
                .map(|d| self.dims[d.0].size.to_string())
                .collect();
            let whose = match name.as_str() {
                OUTPUT_NAME => "the output".to_owned(),
                input => format!("tensor `{input}`"),
            };
            let count = len.map_or_else(|| "more than 2^64".to_owned(), |n| n.to_string());
            self.error(
                Loc::of(&ty.dims[0]).to(Loc::of(&ty.dims[ty.dims.len() - 1])),
                format!(
                    "{whose} has {count} elements ({} = {}); ktune supports at most 2^31 - 1 ({MAX_TENSOR_ELEMENTS}) elements a tensor",
                    ty.dims.iter().map(Ident::to_string).collect::<Vec<_>>().join(" × "),
                    sizes.join(" × "),
                ),
            );
            return None;
        }
        Some(ir::Tensor {
            name,
            dtype: ty.dtype,
            dims,
        })
    }

    fn unknown_dim(&mut self, name: &Ident) {
        if !self.dims_complete {
            return;
        }
        let text = name.to_string();
        let guess = suggest::closest(&text, self.dims.iter().map(|d| d.name.as_str()))
            .map(|g| format!(" (did you mean `{g}`?)"))
            .unwrap_or_default();
        let declared = self.dim_names();
        self.error(
            Loc::of(name),
            format!(
                "unknown dimension `{text}`{guess}; dimensions declared in `shape(...)`: {declared}"
            ),
        );
    }

    fn compute(
        &mut self,
        compute: &ast::Compute,
        output_ty: Option<&ast::TensorType>,
        output: Option<&ir::Tensor>,
    ) -> Option<Val> {
        if let Some(ty) = output_ty
            && compute.indices.len() != ty.dims.len()
        {
            let bound = compute.indices.len();
            let rank = ty.dims.len();
            let fix = self.index_names(&compute.indices, &ty.dims);
            self.error(
                compute.indices_loc,
                format!(
                    "`compute` binds {bound} index variable{} but the output `{}` has {rank} dimension{}; write `compute(|{fix}| ...)`",
                    plural(bound),
                    ty.display(),
                    plural(rank),
                ),
            );
            // The body likely uses the missing variables by the names it
            // meant to bind; those uses are the same mistake.
            if bound < rank {
                self.names_complete = false;
            }
        }
        for (pos, index) in compute.indices.iter().enumerate() {
            let Some(index) = index else { continue };
            let var = output.and_then(|out| out.dims.get(pos)).map(|&dim| {
                let id = VarId(self.vars.len());
                self.vars.push(ir::Var {
                    name: index.to_string(),
                    dim,
                    kind: VarKind::Output(pos),
                });
                id
            });
            self.scope.declare(index, Binding::Var(var), self.errors);
        }
        for binding in &compute.lets {
            let value = self.expr(&binding.value);
            let deps = value.map(|v| self.output_deps(v.id)).unwrap_or_default();
            let id = LetId(self.lets.len());
            self.lets.push(LetSlot {
                name: binding.name.to_string(),
                value,
                deps,
            });
            self.scope
                .declare(&binding.name, Binding::Let(id), self.errors);
        }
        let root = self.expr(&compute.value)?;
        self.num(root, compute.value.loc, || "the output value".to_owned())?;
        Some(root)
    }

    /// Index variable names for the output's dimensions: those the user
    /// bound, then the dimension names in lowercase, kept unique.
    fn index_names(&self, bound: &[Option<Ident>], dims: &[Ident]) -> String {
        let mut names: Vec<String> = Vec::new();
        for (pos, dim) in dims.iter().enumerate() {
            let name = match bound.get(pos) {
                Some(Some(name)) => name.to_string(),
                _ => {
                    let base = dim.to_string().to_lowercase();
                    let taken = |n: &str| {
                        names.iter().any(|m| m == n)
                            || bound.iter().flatten().any(|b| b == n)
                            || self.scope.bindings().any(|(m, _)| m == n)
                    };
                    let mut candidate = base.clone();
                    let mut suffix = 2;
                    while taken(&candidate) {
                        candidate = format!("{base}{suffix}");
                        suffix += 1;
                    }
                    candidate
                }
            };
            names.push(name);
        }
        names.join(", ")
    }

    /// The output variables an expression reads, directly or through lets.
    /// Reduction variables never escape their reduction, so every reduction
    /// variable found is bound inside the expression and left out.
    fn output_deps(&self, root: ExprId) -> Vec<VarId> {
        let mut found = BTreeSet::new();
        let mut stack = vec![root];
        while let Some(id) = stack.pop() {
            let Some(expr) = self.exprs.get(id.0) else {
                continue;
            };
            match expr {
                ir::Expr::Const(_) => {}
                ir::Expr::Index(var) => {
                    found.insert(*var);
                }
                ir::Expr::Load { index, .. } => found.extend(index.iter().copied()),
                ir::Expr::Let(id) => {
                    if let Some(slot) = self.lets.get(id.0) {
                        found.extend(slot.deps.iter().copied());
                    }
                }
                ir::Expr::Unary(_, a) | ir::Expr::Not(a) | ir::Expr::Cast(_, a) => stack.push(*a),
                ir::Expr::Reduce { body, .. } => stack.push(*body),
                ir::Expr::Binary(_, a, b)
                | ir::Expr::Compare(_, a, b)
                | ir::Expr::Logic(_, a, b) => {
                    stack.extend([*a, *b]);
                }
                ir::Expr::Select(c, a, b) => stack.extend([*c, *a, *b]),
            }
        }
        found
            .into_iter()
            .filter(|v| matches!(self.vars.get(v.0), Some(var) if matches!(var.kind, VarKind::Output(_))))
            .collect()
    }

    fn expr(&mut self, expr: &ast::Expr) -> Option<Val> {
        match &expr.kind {
            ExprKind::Const(value) => {
                Some(self.push(ir::Expr::Const(*value), Type::Num(DType::F32)))
            }
            ExprKind::Name(name) => self.name(name),
            ExprKind::Load { tensor, indices } => self.load(tensor, indices, expr.loc),
            ExprKind::Neg(operand) => {
                let value = self.expr(operand)?;
                let dtype =
                    self.num(value, operand.loc, || "the operand of unary `-`".to_owned())?;
                Some(self.push(
                    ir::Expr::Unary(ir::UnaryOp::Neg, value.id),
                    Type::Num(dtype),
                ))
            }
            ExprKind::Not(operand) => {
                let value = self.expr(operand)?;
                self.boolean(value, operand.loc, "the operand of `!`")?;
                Some(self.push(ir::Expr::Not(value.id), Type::Bool))
            }
            ExprKind::Binary { op, lhs, rhs } => self.binary(*op, lhs, rhs, expr.loc),
            ExprKind::Cast { value, dtype } => {
                let checked = self.expr(value)?;
                if checked.ty == Type::Bool {
                    self.error(
                        value.loc,
                        format!(
                            "mismatched types: cannot cast a boolean to `{dtype}`; to turn a condition into a number write `select(cond, 1.0, 0.0)`"
                        ),
                    );
                    return None;
                }
                Some(self.push(ir::Expr::Cast(*dtype, checked.id), Type::Num(*dtype)))
            }
            ExprKind::Call { func, args } => self.call(func, args, expr.loc),
            ExprKind::Reduce {
                func,
                dim,
                var,
                body,
            } => self.reduce(func, dim, var, body),
            ExprKind::Invalid => None,
        }
    }

    /// The dtype of a value that must be a number.
    fn num(&mut self, value: Val, loc: Loc, role: impl FnOnce() -> String) -> Option<DType> {
        match value.ty {
            Type::Num(dtype) => Some(dtype),
            Type::Bool => {
                self.error(
                    loc,
                    format!(
                        "mismatched types: {} must be a number, found a boolean; to turn a condition into a number write `select(cond, 1.0, 0.0)`",
                        role()
                    ),
                );
                None
            }
        }
    }

    fn boolean(&mut self, value: Val, loc: Loc, role: &str) -> Option<()> {
        match value.ty {
            Type::Bool => Some(()),
            Type::Num(dtype) => {
                self.error(
                    loc,
                    format!(
                        "mismatched types: {role} must be a boolean, found a number ({dtype}); compare it to get a boolean, like `a > 0.0`"
                    ),
                );
                None
            }
        }
    }

    /// The dtype of combining two numbers; `what` names the combination.
    fn unify(&mut self, a: DType, b: DType, loc: Loc, what: &str) -> Option<DType> {
        match (a, b) {
            (DType::F32, _) | (_, DType::F32) => Some(DType::F32),
            (a, b) if a == b => Some(a),
            (a, b) => {
                self.error(
                    loc,
                    format!(
                        "dtype mismatch: {what} combines {a} with {b}; cast one side with `as f32`"
                    ),
                );
                None
            }
        }
    }

    fn binary(&mut self, op: BinOp, lhs: &ast::Expr, rhs: &ast::Expr, loc: Loc) -> Option<Val> {
        let left = self.expr(lhs);
        let right = self.expr(rhs);
        let (left, right) = (left?, right?);
        let symbol = op.symbol();
        match op {
            BinOp::Arith(_) | BinOp::Cmp(_) => {
                let a = self.num(left, lhs.loc, || format!("the left operand of `{symbol}`"));
                let b = self.num(right, rhs.loc, || {
                    format!("the right operand of `{symbol}`")
                });
                let dtype = self.unify(a?, b?, loc, &format!("`{symbol}`"))?;
                Some(match op {
                    BinOp::Arith(op) => {
                        self.push(ir::Expr::Binary(op, left.id, right.id), Type::Num(dtype))
                    }
                    BinOp::Cmp(op) => {
                        self.push(ir::Expr::Compare(op, left.id, right.id), Type::Bool)
                    }
                    BinOp::Logic(op) => {
                        self.push(ir::Expr::Logic(op, left.id, right.id), Type::Bool)
                    }
                })
            }
            BinOp::Logic(op) => {
                let a = self.boolean(left, lhs.loc, &format!("the left operand of `{symbol}`"));
                let b = self.boolean(right, rhs.loc, &format!("the right operand of `{symbol}`"));
                a.zip(b)?;
                Some(self.push(ir::Expr::Logic(op, left.id, right.id), Type::Bool))
            }
        }
    }

    fn name(&mut self, name: &Ident) -> Option<Val> {
        match self.scope.lookup(name) {
            Some(Binding::Var(Some(var))) => {
                Some(self.push(ir::Expr::Index(var), Type::Num(DType::F32)))
            }
            Some(Binding::Var(None) | Binding::Error) => None,
            Some(Binding::Let(id)) => {
                let value = self.lets.get(id.0)?.value?;
                Some(self.push(ir::Expr::Let(id), value.ty))
            }
            Some(Binding::Tensor(id)) => {
                // A parameter whose type was rejected (say a scalar) is used
                // as its author meant; the type error says it all.
                if matches!(self.inputs.get(id.0), Some(None)) {
                    return None;
                }
                let example = self.load_example(name, id);
                self.error(
                    Loc::of(name),
                    format!("`{name}` is a tensor, not a value; read an element by indexing it, like `{example}`"),
                );
                None
            }
            Some(Binding::Dim(_)) => {
                let var = name.to_string().to_lowercase();
                self.error(
                    Loc::of(name),
                    format!(
                        "dimension `{name}` cannot be used as a value; bind an index variable over it with `sum({name}, |{var}| ...)`, or average with `mean({name}, |{var}| ...)`"
                    ),
                );
                None
            }
            None => {
                self.unknown_name(name);
                None
            }
        }
    }

    fn unknown_name(&mut self, name: &Ident) {
        if !self.names_complete {
            return;
        }
        let text = name.to_string();
        if builtin::function(&text).is_some() || builtin::reduction(&text).is_some() {
            self.error(
                Loc::of(name),
                format!("`{text}` is a function, not a value; call it, like `{text}(...)`"),
            );
            return;
        }
        let tensors = self.scope.names(|b| matches!(b, Binding::Tensor(_)));
        let vars = self.scope.names(|b| matches!(b, Binding::Var(_)));
        let lets = self.scope.names(|b| matches!(b, Binding::Let(_)));
        let guess = suggest::closest(&text, tensors.iter().chain(&vars).chain(&lets).copied())
            .map(|g| format!(" (did you mean `{g}`?)"))
            .unwrap_or_default();
        let mut message = format!(
            "unknown name `{text}`{guess}; expected a tensor, index variable or let binding — tensors here: {}",
            list(&tensors)
        );
        if !vars.is_empty() {
            message += &format!("; index variables: {}", vars.join(", "));
        }
        if !lets.is_empty() {
            message += &format!("; let bindings: {}", lets.join(", "));
        }
        self.error(Loc::of(name), message);
    }

    /// `x[i][j]` with, for each dimension, a visible index variable over it
    /// or else the dimension's name in lowercase.
    fn load_example(&self, name: &Ident, id: TensorId) -> String {
        let Some(Some(tensor)) = self.inputs.get(id.0) else {
            return format!("{name}[i]");
        };
        let indices: Vec<String> = tensor
            .dims
            .iter()
            .map(|&dim| format!("[{}]", self.var_over(dim)))
            .collect();
        format!("{name}{}", indices.concat())
    }

    /// A visible index variable ranging over `dim`, or a name for one.
    fn var_over(&self, dim: DimId) -> String {
        self.scope
            .bindings()
            .rev()
            .find(|(_, b)| matches!(b, Binding::Var(Some(v)) if self.var_dim(*v) == Some(dim)))
            .map_or_else(
                || self.dim_name(dim).to_lowercase(),
                |(name, _)| name.to_owned(),
            )
    }

    fn load(&mut self, name: &Ident, indices: &[Option<Ident>], loc: Loc) -> Option<Val> {
        let tensor = match self.scope.lookup(name) {
            Some(Binding::Tensor(id)) => Some(id),
            Some(Binding::Error) => None,
            Some(other) => {
                self.error(
                    Loc::of(name),
                    format!(
                        "`{name}` is {}, not a tensor; only tensor parameters can be indexed",
                        other.describe()
                    ),
                );
                None
            }
            None => {
                if self.names_complete {
                    let tensors = self.scope.names(|b| matches!(b, Binding::Tensor(_)));
                    let guess = suggest::closest(&name.to_string(), tensors.iter().copied())
                        .map(|g| format!(" (did you mean `{g}`?)"))
                        .unwrap_or_default();
                    let message = format!(
                        "unknown tensor `{name}`{guess}; tensors here: {}",
                        list(&tensors)
                    );
                    self.error(Loc::of(name), message);
                }
                None
            }
        };
        let vars: Vec<Option<VarId>> = indices
            .iter()
            .map(|index| index.as_ref().and_then(|index| self.index_var(index)))
            .collect();
        let id = tensor?;
        let Some(Some(tensor)) = self.inputs.get(id.0) else {
            return None;
        };
        let (dtype, dims) = (tensor.dtype, tensor.dims.clone());
        // An index already rejected (`x[(i, j)]`, `x[i + 1]`) may stand for
        // any number of indices, so the count is not checked then.
        if indices.iter().any(Option::is_none) {
            return None;
        }
        if indices.len() != dims.len() {
            let names: Vec<&str> = dims.iter().map(|&d| self.dim_name(d)).collect();
            let example = self.load_example(name, id);
            self.error(
                loc,
                format!(
                    "`{name}` has {} dimension{} ({}) but is indexed with {}; write `{example}`",
                    dims.len(),
                    plural(dims.len()),
                    names.join(", "),
                    indices.len()
                ),
            );
            return None;
        }
        if self.swapped(name, &vars, &dims, loc) {
            return None;
        }
        let mut index = Vec::new();
        for (pos, ((var, ident), &want)) in vars.iter().zip(indices).zip(&dims).enumerate() {
            let (Some(var), Some(ident)) = (var, ident) else {
                continue;
            };
            let have = self.var_dim(*var);
            if have != Some(want) {
                let have = have.map_or("?", |d| self.dim_name(d)).to_owned();
                let want_name = self.dim_name(want).to_owned();
                let example = self.var_over(want);
                let visible = self
                    .scope
                    .bindings()
                    .any(|(n, b)| n == example && matches!(b, Binding::Var(_)));
                let fix = if visible {
                    format!("index it with a variable over {want_name}, such as `{example}`")
                } else {
                    format!(
                        "index it with a variable over {want_name}, like `{example}` in `sum({want_name}, |{example}| ...)`"
                    )
                };
                self.error(
                    Loc::of(ident),
                    format!("index `{ident}` ranges over {have} but dimension {pos} of `{name}` is {want_name}; {fix}"),
                );
                continue;
            }
            index.push(*var);
        }
        if index.len() != dims.len() {
            return None;
        }
        Some(self.push(ir::Expr::Load { tensor: id, index }, Type::Num(dtype)))
    }

    /// Reports indices that are right but in the wrong order (`x[k][m]` for
    /// `x: (M, K)`) as one mistake, not one per position.
    fn swapped(&mut self, name: &Ident, vars: &[Option<VarId>], dims: &[DimId], loc: Loc) -> bool {
        let Some(have) = vars
            .iter()
            .map(|v| v.and_then(|v| self.var_dim(v)))
            .collect::<Option<Vec<DimId>>>()
        else {
            return false;
        };
        let misplaced = have.iter().zip(dims).filter(|(h, w)| h != w).count();
        let (mut sorted_have, mut sorted_want) = (have.clone(), dims.to_vec());
        sorted_have.sort();
        sorted_want.sort();
        if misplaced < 2 || sorted_have != sorted_want {
            return false;
        }
        let names: Vec<&str> = dims.iter().map(|&d| self.dim_name(d)).collect();
        // Reorder the user's own variables to match the dimensions.
        let mut pool: Vec<VarId> = vars.iter().flatten().copied().collect();
        let mut fixed = String::new();
        for want in dims {
            if let Some(at) = pool.iter().position(|v| self.var_dim(*v) == Some(*want)) {
                let var = pool.remove(at);
                let var_name = self.vars.get(var.0).map_or("?", |v| v.name.as_str());
                fixed += &format!("[{var_name}]");
            }
        }
        // Where a variable is not named after its dimension (`r` bound to an
        // output's `C`), the order is not what it looks like: say what each
        // ranges over.
        let ranges: Vec<(&str, &str)> = vars
            .iter()
            .flatten()
            .zip(&have)
            .map(|(v, d)| {
                let var_name = self.vars.get(v.0).map_or("?", |v| v.name.as_str());
                (var_name, self.dim_name(*d))
            })
            .collect();
        let why = match ranges.iter().all(|(v, d)| v.eq_ignore_ascii_case(d)) {
            true => String::new(),
            false => {
                let each: Vec<String> = ranges
                    .iter()
                    .map(|(v, d)| format!("`{v}` ranges over {d}"))
                    .collect();
                format!(": {}", each.join(", "))
            }
        };
        self.error(
            loc,
            format!(
                "indices of `{name}` are in the wrong order for its dimensions ({}){why}; write `{name}{fixed}`",
                names.join(", "),
            ),
        );
        true
    }

    fn index_var(&mut self, name: &Ident) -> Option<VarId> {
        match self.scope.lookup(name) {
            Some(Binding::Var(var)) => var,
            Some(Binding::Error) => None,
            Some(Binding::Dim(_)) => {
                let var = name.to_string().to_lowercase();
                self.error(
                    Loc::of(name),
                    format!(
                        "`{name}` is a dimension, not an index variable; index with a variable that ranges over it, like `{var}` in `sum({name}, |{var}| ...)`"
                    ),
                );
                None
            }
            Some(other) => {
                self.error(
                    Loc::of(name),
                    format!(
                        "only index variables may index a tensor, and `{name}` is {}",
                        other.describe()
                    ),
                );
                None
            }
            None => {
                if self.names_complete {
                    let vars = self.scope.names(|b| matches!(b, Binding::Var(_)));
                    let guess = suggest::closest(&name.to_string(), vars.iter().copied())
                        .map(|g| format!(" (did you mean `{g}`?)"))
                        .unwrap_or_default();
                    let message = format!(
                        "unknown index variable `{name}`{guess}; index variables here: {}",
                        list(&vars)
                    );
                    self.error(Loc::of(name), message);
                }
                None
            }
        }
    }

    fn call(&mut self, func: &Ident, args: &[ast::Expr], loc: Loc) -> Option<Val> {
        let values: Vec<Option<Val>> = args.iter().map(|arg| self.expr(arg)).collect();
        let name = func.to_string();
        let Some(function) = builtin::function(&name) else {
            if builtin::reduction(&name).is_some() {
                self.error(
                    loc,
                    format!("`{name}` is a reduction; write `{name}(D, |v| ...)` with `D` a dimension from `shape(...)`"),
                );
            } else {
                self.unknown_function(func);
            }
            return None;
        };
        let arity = function.arity();
        if args.len() != arity {
            let given = args.len();
            let was = if given == 1 { "was" } else { "were" };
            let form = match function {
                Function::Unary(_) => format!("write `{name}(x)`"),
                Function::Binary(_) => {
                    format!(
                        "write `{name}(a, b)`, or `{name}(D, |v| ...)` to reduce over a dimension"
                    )
                }
                Function::Select => "write `select(cond, a, b)`".to_owned(),
            };
            self.error(
                loc,
                format!(
                    "`{name}` takes {arity} argument{} but {given} {was} given; {form}",
                    plural(arity)
                ),
            );
            return None;
        }
        let values = values.into_iter().collect::<Option<Vec<Val>>>()?;
        match (function, values.as_slice(), args) {
            (Function::Unary(op), [a], [ea]) => {
                let dtype = self.num(*a, ea.loc, || format!("the argument of `{name}`"))?;
                Some(self.push(ir::Expr::Unary(op, a.id), Type::Num(dtype)))
            }
            (Function::Binary(op), [a, b], [ea, eb]) => {
                let da = self.num(*a, ea.loc, || format!("the first argument of `{name}`"));
                let db = self.num(*b, eb.loc, || format!("the second argument of `{name}`"));
                let dtype = self.unify(da?, db?, loc, &format!("`{name}`"))?;
                Some(self.push(ir::Expr::Binary(op, a.id, b.id), Type::Num(dtype)))
            }
            (Function::Select, [c, a, b], [ec, ea, eb]) => {
                let cond = self.boolean(*c, ec.loc, "the condition of `select`");
                let da = self.num(*a, ea.loc, || "the second argument of `select`".to_owned());
                let db = self.num(*b, eb.loc, || "the third argument of `select`".to_owned());
                cond?;
                let dtype = self.unify(da?, db?, loc, "`select`")?;
                Some(self.push(ir::Expr::Select(c.id, a.id, b.id), Type::Num(dtype)))
            }
            _ => None,
        }
    }

    fn unknown_function(&mut self, func: &Ident) {
        let name = func.to_string();
        let message = if let Some(Binding::Tensor(id)) = self.scope.lookup(func) {
            let example = self.load_example(func, id);
            format!("`{name}` is a tensor, not a function; index it, like `{example}`")
        } else {
            let guess = suggest::closest(&name, builtin::names())
                .map(|g| format!(" (did you mean `{g}`?)"))
                .unwrap_or_default();
            format!(
                "unknown function `{name}`{guess}; supported functions: {}",
                builtin::catalogue()
            )
        };
        self.error(Loc::of(func), message);
    }

    fn reduce(&mut self, func: &Ident, dim: &Ident, var: &Ident, body: &ast::Expr) -> Option<Val> {
        let name = func.to_string();
        let op = builtin::reduction(&name);
        if op.is_none() {
            if builtin::function(&name).is_some() {
                self.error(
                    Loc::of(func),
                    format!(
                        "`{name}` is not a reduction, so it takes no closure; reductions: {}",
                        builtin::REDUCTIONS_LIST
                    ),
                );
            } else {
                self.unknown_function(func);
            }
        }
        let dim_id = self.reduce_dim(&name, dim);
        let depth = self.scope.depth();
        let var_id = dim_id.map(|dim| {
            let id = VarId(self.vars.len());
            self.vars.push(ir::Var {
                name: var.to_string(),
                dim,
                kind: VarKind::Reduce,
            });
            id
        });
        self.scope.declare(var, Binding::Var(var_id), self.errors);
        let checked = self.expr(body);
        self.scope.truncate(depth);
        let checked = checked?;
        let dtype = self.num(checked, body.loc, || format!("the body of `{name}`"))?;
        Some(self.push(
            ir::Expr::Reduce {
                op: op?,
                var: var_id?,
                body: checked.id,
            },
            Type::Num(dtype),
        ))
    }

    fn reduce_dim(&mut self, func: &str, dim: &Ident) -> Option<DimId> {
        match self.scope.lookup(dim) {
            Some(Binding::Dim(id)) => Some(id),
            Some(Binding::Error) => None,
            Some(other) => {
                let declared = self.dim_names();
                self.error(
                    Loc::of(dim),
                    format!(
                        "`{dim}` is {}, not a dimension; `{func}` ranges over a dimension declared in `shape(...)`: {declared}",
                        other.describe()
                    ),
                );
                None
            }
            None => {
                self.unknown_dim(dim);
                None
            }
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn list(names: &[&str]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

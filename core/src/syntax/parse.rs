//! A syn fn item → the surface syntax tree ([`ast`]), reporting every
//! construct that is valid Rust but not part of the kernel language.

use proc_macro2::Ident;
use quote::ToTokens;
use syn::{
    Attribute, BinOp as SynBinOp, Block, Expr as SynExpr, ExprClosure, FnArg, GenericArgument,
    ItemFn, Lit, Pat, PathArguments, ReturnType, Signature, Stmt, Type, UnOp,
};

use super::Errors;
use super::ast::{self, BinOp, Compute, Expr, ExprKind, Let, Loc, Param, TensorType};
use super::builtin;
use crate::dtype::DType;
use crate::ir::{BinaryOp, CmpOp, LogicOp};

/// Expressions nested deeper than this are rejected rather than recursed
/// into, so no input can exhaust the stack of the checker or of IR consumers.
const MAX_DEPTH: usize = 256;

const TENSOR_SYNTAX: &str = "`Tensor<DTYPE, (D1, D2, ...)>` with DTYPE f32, f16 or bf16";
const TENSOR_TYPE: &str = "Tensor<DTYPE, (D1, D2, ...)>";
const COMPUTE_SYNTAX: &str =
    "`compute(|i, j, ...| value)`, with one index variable per output dimension";

/// Parses a kernel's fn item. `own_attr` is its `#[tuned_kernel]` attribute
/// when it is still among the item's attributes.
pub(crate) fn kernel(
    func: &ItemFn,
    own_attr: Option<&Attribute>,
    errors: &mut Errors,
) -> ast::Kernel {
    let mut parser = Parser {
        errors,
        names_complete: true,
        depth_reported: false,
    };
    parser.fn_attrs(&func.attrs, own_attr);
    parser.modifiers(&func.sig);
    let params = parser.params(&func.sig);
    let output = parser.output(&func.sig);
    let body = parser.body(&func.block);
    ast::Kernel {
        name: func.sig.ident.clone(),
        params,
        output,
        body,
        names_complete: parser.names_complete,
    }
}

struct Parser<'a> {
    errors: &'a mut Errors,
    names_complete: bool,
    depth_reported: bool,
}

/// What a name is being bound as, for messages.
#[derive(Clone, Copy)]
enum Binder {
    Param,
    Index,
    Let,
}

impl Binder {
    fn example(self) -> &'static str {
        match self {
            Binder::Param => "parameters must be plain names, like `x: Tensor<f32, (N,)>`",
            Binder::Index => "index variables must be plain names, like `|i, j| ...`",
            Binder::Let => "`let` must bind a plain name, like `let s = ...;`",
        }
    }
}

impl Parser<'_> {
    fn error(&mut self, loc: Loc, message: impl std::fmt::Display) {
        self.errors.push(loc.error(message));
    }

    /// "{subject} not supported in a ktune kernel; {hint}".
    fn unsupported(&mut self, loc: Loc, subject: &str, hint: &str) {
        if hint.is_empty() {
            self.error(loc, format!("{subject} not supported in a ktune kernel"));
        } else {
            self.error(
                loc,
                format!("{subject} not supported in a ktune kernel; {hint}"),
            );
        }
    }

    fn no_attrs(&mut self, attrs: &[Attribute]) {
        for attr in attrs {
            self.unsupported(Loc::of(attr), "this attribute is", "remove it");
        }
    }

    fn fn_attrs(&mut self, attrs: &[Attribute], mut own: Option<&Attribute>) {
        for attr in attrs {
            if attr.path().is_ident("doc") {
                continue;
            }
            if super::is_kernel_attr(attr) {
                if own.is_some_and(|own| own == attr) {
                    own = None;
                } else {
                    self.error(
                        Loc::of(attr),
                        "duplicate `#[tuned_kernel]` attribute; a kernel has exactly one",
                    );
                }
                continue;
            }
            let path: Vec<String> = attr
                .path()
                .segments
                .iter()
                .map(|s| s.ident.to_string())
                .collect();
            self.error(
                Loc::of(attr),
                format!(
                    "attribute `#[{}]` is not supported on a ktune kernel; only doc comments are allowed",
                    path.join("::")
                ),
            );
        }
    }

    fn modifiers(&mut self, sig: &Signature) {
        if let Some(token) = &sig.constness {
            self.unsupported(Loc::of(token), "`const fn` is", "remove `const`");
        }
        if let Some(token) = &sig.asyncness {
            self.unsupported(Loc::of(token), "`async fn` is", "remove `async`");
        }
        if let Some(token) = &sig.unsafety {
            self.unsupported(Loc::of(token), "`unsafe fn` is", "remove `unsafe`");
        }
        if let Some(abi) = &sig.abi {
            self.unsupported(
                Loc::of(abi),
                "`extern` functions are",
                "remove the `extern` ABI",
            );
        }
        if !sig.generics.params.is_empty() {
            self.unsupported(
                Loc::of(&sig.generics),
                "generic parameters are",
                "declare dimensions in `shape(...)` instead",
            );
        }
        if let Some(clause) = &sig.generics.where_clause {
            self.unsupported(Loc::of(clause), "`where` clauses are", "remove it");
        }
        if let Some(variadic) = &sig.variadic {
            self.unsupported(Loc::of(variadic), "variadic parameters are", "remove `...`");
        }
    }

    fn params(&mut self, sig: &Signature) -> Vec<Param> {
        if sig.inputs.is_empty() {
            self.error(
                Loc::at(sig.paren_token.span.join()),
                "a ktune kernel needs at least one input tensor, like `x: Tensor<f32, (N,)>`",
            );
        }
        let mut params = Vec::new();
        for input in &sig.inputs {
            match input {
                FnArg::Receiver(receiver) => self.unsupported(
                    Loc::of(receiver),
                    "`self` parameters are",
                    "a kernel is a free function over tensors: remove `self`",
                ),
                FnArg::Typed(typed) => {
                    self.no_attrs(&typed.attrs);
                    let name = self.binding_name(&typed.pat, Binder::Param);
                    let whose = match &name {
                        Some(name) => format!("parameter `{name}`"),
                        None => "a parameter".to_owned(),
                    };
                    let ty = self.tensor_type(&typed.ty, &whose);
                    match name {
                        Some(name) => params.push(Param { name, ty }),
                        None => self.names_complete = false,
                    }
                }
            }
        }
        params
    }

    fn output(&mut self, sig: &Signature) -> Option<TensorType> {
        match &sig.output {
            ReturnType::Default => {
                self.error(
                    Loc::of(&sig.ident).to(Loc::at(sig.paren_token.span.close())),
                    format!("a ktune kernel returns its output tensor: add `-> {TENSOR_TYPE}` (DTYPE f32, f16 or bf16)"),
                );
                None
            }
            ReturnType::Type(_, ty) => self.tensor_type(ty, "the return type"),
        }
    }

    /// The name a pattern binds, if it is a plain name; reports anything else.
    fn binding_name(&mut self, pat: &Pat, binder: Binder) -> Option<Ident> {
        match pat {
            Pat::Ident(pat) => {
                self.no_attrs(&pat.attrs);
                if let Some(token) = &pat.by_ref {
                    self.error(
                        Loc::of(token),
                        format!("`ref` is not supported here; {}", binder.example()),
                    );
                }
                if let Some(token) = &pat.mutability {
                    self.error(
                        Loc::of(token),
                        format!(
                            "`mut` is not supported: kernel values are immutable; {}",
                            binder.example()
                        ),
                    );
                }
                if let Some((at, sub)) = &pat.subpat {
                    self.error(
                        Loc::of(at).to(Loc::of(sub)),
                        format!("patterns are not supported here; {}", binder.example()),
                    );
                }
                Some(pat.ident.clone())
            }
            Pat::Type(typed) => {
                let message = match binder {
                    Binder::Index => {
                        "index variables take no type annotation; write just the name, like `|i| ...`"
                    }
                    Binder::Let => {
                        "type annotations on `let` are not supported; the type is inferred: write `let s = ...;`"
                    }
                    Binder::Param => {
                        "nested type annotations are not supported; write `x: Tensor<...>`"
                    }
                };
                self.error(Loc::of(&typed.colon_token).to(Loc::of(&typed.ty)), message);
                self.binding_name(&typed.pat, binder)
            }
            Pat::Wild(wild) => {
                self.error(
                    Loc::of(wild),
                    format!(
                        "`_` is not supported here; give it a name even if unused: {}",
                        binder.example()
                    ),
                );
                None
            }
            other => {
                self.error(
                    Loc::of(other),
                    format!(
                        "patterns are not supported in a ktune kernel; {}",
                        binder.example()
                    ),
                );
                None
            }
        }
    }

    fn tensor_type(&mut self, ty: &Type, whose: &str) -> Option<TensorType> {
        let loc = Loc::of(ty);
        let expected = format!("{whose} must be a tensor: {TENSOR_SYNTAX}");
        let path = match strip_type_group(ty) {
            Type::Path(path) if path.qself.is_none() => &path.path,
            Type::Reference(_) => {
                self.error(
                    loc,
                    format!("{whose}: tensors are passed by value; remove the `&`"),
                );
                return None;
            }
            _ => {
                self.error(loc, expected);
                return None;
            }
        };
        let Some(last) = path.segments.last() else {
            self.error(loc, expected);
            return None;
        };
        if last.ident != "Tensor" {
            if path.segments.len() == 1 && matches!(last.arguments, PathArguments::None) {
                let name = &last.ident;
                self.error(
                    loc,
                    format!(
                        "{whose} has type `{name}`, but kernel parameters and results are tensors: {TENSOR_SYNTAX}"
                    ),
                );
            } else {
                self.error(loc, expected);
            }
            return None;
        }
        let args: Vec<&GenericArgument> = match &last.arguments {
            PathArguments::AngleBracketed(args) => args.args.iter().collect(),
            _ => Vec::new(),
        };
        let [dtype, shape] = args.as_slice() else {
            self.error(
                Loc::of(last),
                "`Tensor` takes an element type and a shape, like `Tensor<f32, (M, N)>`",
            );
            return None;
        };
        let dtype = self.dtype(dtype);
        let dims = self.shape(shape);
        Some(TensorType {
            dtype: dtype?,
            dims: dims?,
        })
    }

    fn dtype(&mut self, arg: &GenericArgument) -> Option<DType> {
        let name = match arg {
            GenericArgument::Type(ty) => type_ident(ty),
            _ => None,
        };
        let dtype = name.as_ref().and_then(|n| DType::from_name(&n.to_string()));
        if dtype.is_none() {
            let found = name.map(|n| format!(" `{n}`")).unwrap_or_default();
            self.error(
                Loc::of(arg),
                format!("unsupported element type{found}; expected f32, f16 or bf16"),
            );
        }
        dtype
    }

    fn shape(&mut self, arg: &GenericArgument) -> Option<Vec<Ident>> {
        const NAMES: &str =
            "tensor shapes are written with dimension names from `shape(...)`, like `(M, N)`";
        let GenericArgument::Type(ty) = arg else {
            self.error(Loc::of(arg), NAMES);
            return None;
        };
        let elems: Vec<&Type> = match strip_type_group(ty) {
            Type::Tuple(tuple) => tuple.elems.iter().collect(),
            Type::Paren(paren) => vec![&*paren.elem],
            other => vec![other],
        };
        if elems.is_empty() {
            self.error(
                Loc::of(arg),
                "rank-0 tensors are not supported; give the tensor at least one dimension, like `Tensor<f32, (N,)>`",
            );
            return None;
        }
        let mut dims = Vec::new();
        for elem in elems {
            match type_ident(elem) {
                Some(dim) => dims.push(dim),
                None => self.error(Loc::of(elem), NAMES),
            }
        }
        Some(dims)
    }

    fn body(&mut self, block: &Block) -> Option<Compute> {
        let Some((last, rest)) = block.stmts.split_last() else {
            self.error(
                Loc::of(block),
                format!("the kernel body is empty; write {COMPUTE_SYNTAX}"),
            );
            return None;
        };
        if let Some(first) = rest.first() {
            self.error(
                Loc::of(first),
                "a kernel body holds only the `compute(...)` expression; put `let` bindings inside the `compute` closure",
            );
        }
        match last {
            Stmt::Expr(expr, semi) => {
                if let Some(semi) = semi {
                    self.error(
                        Loc::of(semi),
                        "remove this `;`: the kernel body is the `compute(...)` expression",
                    );
                }
                self.compute(expr)
            }
            other => {
                self.error(Loc::of(other), format!("expected {COMPUTE_SYNTAX}"));
                None
            }
        }
    }

    fn compute(&mut self, expr: &SynExpr) -> Option<Compute> {
        let expr = strip_expr_group(expr);
        let SynExpr::Call(call) = expr else {
            self.error(Loc::of(expr), format!("a kernel body is {COMPUTE_SYNTAX}"));
            return None;
        };
        if path_ident(&call.func).is_none_or(|f| f != "compute") {
            self.error(Loc::of(&call.func), format!("expected {COMPUTE_SYNTAX}"));
            return None;
        }
        self.no_attrs(&call.attrs);
        let args: Vec<&SynExpr> = call.args.iter().collect();
        let [SynExpr::Closure(closure)] = args.as_slice() else {
            self.error(
                Loc::at(call.paren_token.span.join()),
                format!("`compute` takes one closure: {COMPUTE_SYNTAX}"),
            );
            return None;
        };
        self.closure_modifiers(closure);
        let indices: Vec<Option<Ident>> = closure
            .inputs
            .iter()
            .map(|pat| self.index_var(pat))
            .collect();
        if indices.iter().any(Option::is_none) {
            self.names_complete = false;
        }
        let indices_loc = Loc::of(&closure.or1_token).to(Loc::of(&closure.or2_token));
        let (lets, value) = self.closure_body(&closure.body);
        Some(Compute {
            indices,
            indices_loc,
            lets,
            value,
        })
    }

    fn closure_modifiers(&mut self, closure: &ExprClosure) {
        self.no_attrs(&closure.attrs);
        if let Some(lifetimes) = &closure.lifetimes {
            self.unsupported(Loc::of(lifetimes), "`for<...>` on closures is", "remove it");
        }
        if let Some(token) = &closure.constness {
            self.unsupported(Loc::of(token), "`const` closures are", "remove `const`");
        }
        if let Some(token) = &closure.movability {
            self.unsupported(Loc::of(token), "`static` closures are", "remove `static`");
        }
        if let Some(token) = &closure.asyncness {
            self.unsupported(Loc::of(token), "`async` closures are", "remove `async`");
        }
        if let Some(token) = &closure.capture {
            self.unsupported(Loc::of(token), "`move` closures are", "remove `move`");
        }
        if let ReturnType::Type(arrow, ty) = &closure.output {
            self.unsupported(
                Loc::of(arrow).to(Loc::of(ty)),
                "closure return types are",
                "remove it; the type is inferred",
            );
        }
    }

    fn index_var(&mut self, pat: &Pat) -> Option<Ident> {
        self.binding_name(pat, Binder::Index)
    }

    /// The `compute` closure's body: leading `let`s, then the output value.
    fn closure_body(&mut self, body: &SynExpr) -> (Vec<Let>, Expr) {
        let block = match strip_expr_group(body) {
            SynExpr::Block(block) if block.label.is_none() && block.attrs.is_empty() => {
                &block.block
            }
            other => return (Vec::new(), self.expr(other, 0)),
        };
        let close = Loc::at(block.brace_token.span.close());
        let Some((last, rest)) = block.stmts.split_last() else {
            self.error(
                Loc::of(block),
                "the `compute` closure's body is empty; it must end with the output value",
            );
            return (Vec::new(), Expr::invalid(Loc::of(block)));
        };
        let mut lets = Vec::new();
        for stmt in rest {
            match stmt {
                Stmt::Local(local) => lets.extend(self.let_stmt(local)),
                Stmt::Expr(expr, _) => self.error(
                    Loc::of(expr),
                    "only `let` bindings may come before the output value; bind this with `let name = ...;` or remove it",
                ),
                other => self.stmt_other(other),
            }
        }
        let value = match last {
            Stmt::Expr(expr, None) => self.expr(expr, 0),
            Stmt::Expr(expr, Some(semi)) => {
                self.error(
                    Loc::of(semi),
                    "remove this `;`: the `compute` closure must end with the output value",
                );
                self.expr(expr, 0)
            }
            Stmt::Local(local) => {
                lets.extend(self.let_stmt(local));
                self.error(
                    close,
                    "the `compute` closure must end with the output value, an expression after the last `let`",
                );
                Expr::invalid(close)
            }
            other => {
                self.stmt_other(other);
                Expr::invalid(close)
            }
        };
        (lets, value)
    }

    fn stmt_other(&mut self, stmt: &Stmt) {
        match stmt {
            Stmt::Item(item) => self.unsupported(
                Loc::of(item),
                "items (`fn`, `const`, `struct`, ...) are",
                "bind values with `let` inside the `compute` closure",
            ),
            Stmt::Macro(mac) => self.unsupported(
                Loc::of(mac),
                "macros are",
                "write the value with the kernel language's operators and functions, like `exp(x[i]) * 2.0`",
            ),
            Stmt::Local(local) => self.unsupported(
                Loc::of(local),
                "`let` here is",
                "`let` bindings go at the top of the `compute` closure",
            ),
            Stmt::Expr(expr, _) => self.unsupported(Loc::of(expr), "this statement is", ""),
        }
    }

    fn let_stmt(&mut self, local: &syn::Local) -> Option<Let> {
        self.no_attrs(&local.attrs);
        let name = self.binding_name(&local.pat, Binder::Let);
        let value = match &local.init {
            None => {
                let shown = name
                    .as_ref()
                    .map_or_else(|| "name".to_owned(), Ident::to_string);
                self.error(
                    Loc::of(local),
                    format!("`let` needs a value: write `let {shown} = ...;`"),
                );
                Expr::invalid(Loc::of(local))
            }
            // A destructuring pattern's value (typically a tuple) is part of
            // the same mistake; it is not reported separately.
            Some(_) if name.is_none() => Expr::invalid(Loc::of(local)),
            Some(init) => {
                if let Some((else_token, diverge)) = &init.diverge {
                    self.unsupported(
                        Loc::of(else_token).to(Loc::of(diverge)),
                        "`let ... else` is",
                        "write `let name = value;`",
                    );
                }
                self.expr(&init.expr, 0)
            }
        };
        match name {
            Some(name) => Some(Let { name, value }),
            None => {
                self.names_complete = false;
                None
            }
        }
    }

    fn expr(&mut self, expr: &SynExpr, depth: usize) -> Expr {
        let loc = Loc::of(expr);
        if depth > MAX_DEPTH {
            if !self.depth_reported {
                self.depth_reported = true;
                self.error(
                    loc,
                    format!("expression nests more than {MAX_DEPTH} levels deep; split it with `let` bindings"),
                );
            }
            return Expr::invalid(loc);
        }
        let depth = depth + 1;
        let kind = match expr {
            SynExpr::Lit(lit) => {
                self.no_attrs(&lit.attrs);
                self.literal(&lit.lit, loc)
            }
            SynExpr::Paren(paren) => {
                self.no_attrs(&paren.attrs);
                self.expr(&paren.expr, depth).kind
            }
            SynExpr::Group(group) => self.expr(&group.expr, depth).kind,
            SynExpr::Path(path) => {
                self.no_attrs(&path.attrs);
                match path_ident(expr) {
                    Some(name) => ExprKind::Name(name),
                    None => {
                        self.path(&path.path, loc);
                        ExprKind::Invalid
                    }
                }
            }
            SynExpr::Index(_) => self.load(expr),
            SynExpr::Unary(unary) => {
                self.no_attrs(&unary.attrs);
                match unary.op {
                    UnOp::Neg(_) => match self.expr(&unary.expr, depth) {
                        Expr {
                            kind: ExprKind::Const(value),
                            ..
                        } => ExprKind::Const(-value),
                        operand => ExprKind::Neg(Box::new(operand)),
                    },
                    UnOp::Not(_) => ExprKind::Not(Box::new(self.expr(&unary.expr, depth))),
                    _ => {
                        self.unsupported(loc, "dereferencing (`*`) is", "use the value directly");
                        ExprKind::Invalid
                    }
                }
            }
            SynExpr::Binary(binary) => {
                self.no_attrs(&binary.attrs);
                match binary_op(&binary.op) {
                    Ok(op) => ExprKind::Binary {
                        op,
                        lhs: Box::new(self.expr(&binary.left, depth)),
                        rhs: Box::new(self.expr(&binary.right, depth)),
                    },
                    Err((subject, hint)) => {
                        self.unsupported(Loc::of(&binary.op), &subject, hint);
                        ExprKind::Invalid
                    }
                }
            }
            SynExpr::Cast(cast) => {
                self.no_attrs(&cast.attrs);
                let value = self.expr(&cast.expr, depth);
                let target = type_ident(&cast.ty);
                match target
                    .as_ref()
                    .and_then(|t| DType::from_name(&t.to_string()))
                {
                    Some(dtype) => ExprKind::Cast {
                        value: Box::new(value),
                        dtype,
                    },
                    None => {
                        let found = target.map(|t| format!(" `{t}`")).unwrap_or_default();
                        self.error(
                            Loc::of(&cast.ty),
                            format!("cannot cast to{found}; kernel values can be cast to f32, f16 or bf16"),
                        );
                        ExprKind::Invalid
                    }
                }
            }
            SynExpr::Call(call) => {
                self.no_attrs(&call.attrs);
                self.call(call, depth)
            }
            SynExpr::MethodCall(call) => {
                self.method_call(call, loc);
                ExprKind::Invalid
            }
            SynExpr::Block(block) => self.block(block, loc, depth),
            SynExpr::Closure(_) => {
                self.error(
                    loc,
                    "closures are only supported as the second argument of a reduction, like `sum(K, |k| ...)`",
                );
                ExprKind::Invalid
            }
            other => {
                let (subject, hint) = unsupported_expr(other);
                self.unsupported(unsupported_loc(other).unwrap_or(loc), subject, hint);
                ExprKind::Invalid
            }
        };
        Expr { kind, loc }
    }

    fn literal(&mut self, lit: &Lit, loc: Loc) -> ExprKind {
        let (digits, suffix) = match lit {
            Lit::Float(float) => (float.base10_digits(), float.suffix()),
            Lit::Int(int) => (int.base10_digits(), int.suffix()),
            Lit::Bool(_) => {
                self.unsupported(
                    loc,
                    "boolean literals are",
                    "write a comparison, like `r < c`",
                );
                return ExprKind::Invalid;
            }
            _ => {
                self.unsupported(
                    loc,
                    "this literal is",
                    "kernel values are numbers, like `1.0`",
                );
                return ExprKind::Invalid;
            }
        };
        if !matches!(suffix, "" | "f32" | "f64") {
            self.error(
                loc,
                format!("literal suffix `{suffix}` is not supported; kernel constants are f32: write `{digits}`"),
            );
            return ExprKind::Invalid;
        }
        match digits.parse::<f32>() {
            Ok(value) if value.is_finite() => ExprKind::Const(value),
            _ => {
                self.error(loc, format!("`{digits}` is out of range for f32, whose largest finite value is about 3.4e38"));
                ExprKind::Invalid
            }
        }
    }

    fn path(&mut self, path: &syn::Path, loc: Loc) {
        let last = path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default();
        let constant = match last.as_str() {
            "PI" => Some(std::f32::consts::PI),
            "TAU" => Some(std::f32::consts::TAU),
            "E" => Some(std::f32::consts::E),
            "SQRT_2" => Some(std::f32::consts::SQRT_2),
            "FRAC_1_SQRT_2" => Some(std::f32::consts::FRAC_1_SQRT_2),
            "LN_2" => Some(std::f32::consts::LN_2),
            "LN_10" => Some(std::f32::consts::LN_10),
            _ => None,
        };
        match constant {
            Some(value) => self.unsupported(
                loc,
                "paths are",
                &format!("write the constant as a literal: `{value:?}`"),
            ),
            None if path.segments.len() > 1 || path.leading_colon.is_some() => self.unsupported(
                loc,
                "paths with `::` are",
                "refer to tensors, index variables and `let` bindings by their plain name",
            ),
            None => self.unsupported(loc, "generic arguments are", "remove them"),
        }
    }

    fn load(&mut self, expr: &SynExpr) -> ExprKind {
        let mut indices = Vec::new();
        let mut base = expr;
        while let SynExpr::Index(index) = base {
            self.no_attrs(&index.attrs);
            indices.push(&*index.index);
            base = strip_expr_group(&index.expr);
        }
        indices.reverse();
        let tensor = path_ident(base);
        if tensor.is_none() {
            self.error(
                Loc::of(base),
                "only tensor parameters can be indexed, like `x[i][j]`",
            );
        }
        let indices: Vec<Option<Ident>> =
            indices.into_iter().map(|index| self.index(index)).collect();
        match tensor {
            Some(tensor) => ExprKind::Load { tensor, indices },
            None => ExprKind::Invalid,
        }
    }

    fn index(&mut self, index: &SynExpr) -> Option<Ident> {
        let index = strip_expr_group(index);
        if let Some(name) = path_ident(index) {
            return Some(name);
        }
        let message = match index {
            SynExpr::Tuple(_) => {
                "only index variables may index a tensor; write one `[...]` per dimension, like `x[i][j]`"
            }
            SynExpr::Range(_) => {
                "slicing is not supported in a ktune kernel; only index variables may index a tensor"
            }
            SynExpr::Lit(_) => {
                "only index variables may index a tensor, not constants; a fixed position would need its own input tensor"
            }
            _ => {
                "only index variables may index a tensor; offsets and index arithmetic are not supported in a ktune kernel"
            }
        };
        self.error(Loc::of(index), message);
        None
    }

    fn call(&mut self, call: &syn::ExprCall, depth: usize) -> ExprKind {
        let Some(func) = path_ident(&call.func) else {
            let hint = match strip_expr_group(&call.func) {
                SynExpr::Path(path) => path.path.segments.last().map(|s| s.ident.to_string()),
                _ => None,
            };
            match hint.filter(|name| {
                builtin::function(name).is_some() || builtin::reduction(name).is_some()
            }) {
                Some(name) => self.unsupported(
                    Loc::of(&call.func),
                    "paths are",
                    &format!("call built-in functions by name: `{name}(...)`"),
                ),
                None => self.error(
                    Loc::of(&call.func),
                    "only built-in functions can be called, by name, like `exp(x)`",
                ),
            }
            return ExprKind::Invalid;
        };
        if func == "compute" {
            self.error(
                Loc::of(&func),
                "`compute` appears once, as the whole kernel body; inside it, loop over a dimension with a reduction like `sum(K, |k| ...)`",
            );
            return ExprKind::Invalid;
        }
        let args: Vec<&SynExpr> = call.args.iter().collect();
        if let [dim, SynExpr::Closure(closure)] = args.as_slice() {
            return self.reduction(func, dim, closure, depth);
        }
        let args = args.into_iter().map(|arg| self.expr(arg, depth)).collect();
        ExprKind::Call { func, args }
    }

    fn reduction(
        &mut self,
        func: Ident,
        dim: &SynExpr,
        closure: &ExprClosure,
        depth: usize,
    ) -> ExprKind {
        let dim_name = path_ident(dim);
        if dim_name.is_none() {
            self.error(
                Loc::of(dim),
                format!("the first argument of `{func}` must be a dimension name from `shape(...)`, like `{func}(K, |k| ...)`"),
            );
        }
        self.closure_modifiers(closure);
        let inputs: Vec<&Pat> = closure.inputs.iter().collect();
        let var = match inputs.as_slice() {
            [pat] => self.index_var(pat),
            _ => {
                self.error(
                    Loc::of(&closure.or1_token).to(Loc::of(&closure.or2_token)),
                    format!("a reduction's closure binds exactly one index variable, like `{func}(K, |k| ...)`"),
                );
                None
            }
        };
        let body = self.expr(&closure.body, depth);
        match (dim_name, var) {
            (Some(dim), Some(var)) => ExprKind::Reduce {
                func,
                dim,
                var,
                body: Box::new(body),
            },
            _ => ExprKind::Invalid,
        }
    }

    fn method_call(&mut self, call: &syn::ExprMethodCall, loc: Loc) {
        let method = call.method.to_string();
        let hint = if builtin::reduction(&method).is_some() && builtin::function(&method).is_none()
        {
            format!("reductions are written `{method}(D, |v| ...)`")
        } else if builtin::function(&method).is_some() {
            let receiver = render(&call.receiver);
            let args: Option<Vec<String>> = call.args.iter().map(render).collect();
            match (receiver, args) {
                (Some(receiver), Some(args)) => {
                    let all: Vec<String> = std::iter::once(receiver).chain(args).collect();
                    format!("write `{method}({})`", all.join(", "))
                }
                _ => format!("call the function instead: `{method}(...)`"),
            }
        } else {
            "call a built-in function instead, like `exp(x)`".to_owned()
        };
        let at = Loc::of(&call.dot_token).to(loc);
        self.unsupported(at, "method calls are", &hint);
    }

    fn block(&mut self, block: &syn::ExprBlock, loc: Loc, depth: usize) -> ExprKind {
        self.no_attrs(&block.attrs);
        if let Some(label) = &block.label {
            self.unsupported(Loc::of(label), "labels are", "remove it");
            return ExprKind::Invalid;
        }
        match block.block.stmts.as_slice() {
            [Stmt::Expr(inner, None)] => self.expr(inner, depth).kind,
            stmts => {
                match stmts.iter().find(|s| matches!(s, Stmt::Local(_))) {
                    Some(local) => self.unsupported(
                        Loc::of(local),
                        "`let` inside a nested block is",
                        "`let` bindings go at the top of the `compute` closure; inline this value instead",
                    ),
                    None => self.unsupported(loc, "blocks are", "write the expression without braces"),
                }
                ExprKind::Invalid
            }
        }
    }
}

fn binary_op(op: &SynBinOp) -> Result<BinOp, (String, &'static str)> {
    Ok(match op {
        SynBinOp::Add(_) => BinOp::Arith(BinaryOp::Add),
        SynBinOp::Sub(_) => BinOp::Arith(BinaryOp::Sub),
        SynBinOp::Mul(_) => BinOp::Arith(BinaryOp::Mul),
        SynBinOp::Div(_) => BinOp::Arith(BinaryOp::Div),
        SynBinOp::Lt(_) => BinOp::Cmp(CmpOp::Lt),
        SynBinOp::Le(_) => BinOp::Cmp(CmpOp::Le),
        SynBinOp::Gt(_) => BinOp::Cmp(CmpOp::Gt),
        SynBinOp::Ge(_) => BinOp::Cmp(CmpOp::Ge),
        SynBinOp::Eq(_) => BinOp::Cmp(CmpOp::Eq),
        SynBinOp::Ne(_) => BinOp::Cmp(CmpOp::Ne),
        SynBinOp::And(_) => BinOp::Logic(LogicOp::And),
        SynBinOp::Or(_) => BinOp::Logic(LogicOp::Or),
        SynBinOp::Rem(_) => return Err(("the `%` operator is".to_owned(), "")),
        SynBinOp::BitAnd(_) | SynBinOp::BitOr(_) | SynBinOp::BitXor(_) => {
            let symbol = op.to_token_stream().to_string();
            return Err((
                format!("the bitwise operator `{symbol}` is"),
                "for conditions use `&&` and `||`",
            ));
        }
        SynBinOp::Shl(_) | SynBinOp::Shr(_) => {
            let symbol = op.to_token_stream().to_string();
            return Err((format!("the shift operator `{symbol}` is"), ""));
        }
        _ => {
            let symbol = op.to_token_stream().to_string();
            return Err((
                format!("compound assignment (`{symbol}`) is"),
                "bind a new name with `let name = ...;`",
            ));
        }
    })
}

/// What to call an unsupported expression, and what to write instead.
fn unsupported_expr(expr: &SynExpr) -> (&'static str, &'static str) {
    const SELECT: &str = "use `select(cond, then_value, else_value)`";
    const REDUCE: &str = "reduce over a dimension with `sum(K, |k| ...)`, `max`, `min` or `mean`";
    match expr {
        SynExpr::If(_) => ("`if` is", SELECT),
        SynExpr::Match(_) => ("`match` is", SELECT),
        SynExpr::ForLoop(_) | SynExpr::While(_) | SynExpr::Loop(_) => ("loops are", REDUCE),
        SynExpr::Macro(_) => (
            "macros are",
            "write the value with the kernel language's operators and functions, like `exp(x[i]) * 2.0`",
        ),
        SynExpr::Assign(_) => ("assignment is", "bind a new name with `let name = ...;`"),
        SynExpr::Range(_) => (
            "ranges are",
            "a reduction covers a whole dimension: `sum(K, |k| ...)`",
        ),
        SynExpr::Field(_) => ("field access is", "kernel values are plain numbers"),
        SynExpr::Array(_) | SynExpr::Repeat(_) => (
            "arrays are",
            "kernel values are plain numbers; pass data as an input tensor",
        ),
        SynExpr::Tuple(_) => (
            "tuples are",
            "kernel values are plain numbers; bind each with `let`",
        ),
        SynExpr::Struct(_) => ("struct literals are", ""),
        SynExpr::Reference(_) | SynExpr::RawAddr(_) => ("references are", "use the value directly"),
        SynExpr::Return(_) => (
            "`return` is",
            "the last expression of the `compute` closure is the output value",
        ),
        SynExpr::Break(_) => ("`break` is", ""),
        SynExpr::Continue(_) => ("`continue` is", ""),
        SynExpr::Yield(_) => ("`yield` is", ""),
        SynExpr::Await(_) => ("`.await` is", ""),
        SynExpr::Try(_) => ("the `?` operator is", ""),
        SynExpr::Let(_) => ("`let` expressions are", SELECT),
        SynExpr::Unsafe(_) => ("`unsafe` blocks are", ""),
        SynExpr::Async(_) => ("`async` blocks are", ""),
        SynExpr::Const(_) => ("`const` blocks are", ""),
        SynExpr::TryBlock(_) => ("`try` blocks are", ""),
        SynExpr::Infer(_) => ("`_` is", ""),
        _ => ("this expression is", ""),
    }
}

/// The token an unsupported construct is best reported at, when narrower than
/// the whole expression.
fn unsupported_loc(expr: &SynExpr) -> Option<Loc> {
    Some(match expr {
        SynExpr::If(e) => Loc::of(&e.if_token),
        SynExpr::Match(e) => Loc::of(&e.match_token),
        SynExpr::ForLoop(e) => Loc::of(&e.for_token),
        SynExpr::While(e) => Loc::of(&e.while_token),
        SynExpr::Loop(e) => Loc::of(&e.loop_token),
        SynExpr::Assign(e) => Loc::of(&e.eq_token),
        SynExpr::Field(e) => Loc::of(&e.dot_token).to(Loc::of(&e.member)),
        SynExpr::Try(e) => Loc::of(&e.question_token),
        SynExpr::Unsafe(e) => Loc::of(&e.unsafe_token),
        _ => return None,
    })
}

fn strip_expr_group(mut expr: &SynExpr) -> &SynExpr {
    while let SynExpr::Group(group) = expr {
        expr = &group.expr;
    }
    expr
}

fn strip_type_group(mut ty: &Type) -> &Type {
    while let Type::Group(group) = ty {
        ty = &group.elem;
    }
    ty
}

/// The identifier an expression consists of, if it is exactly one.
fn path_ident(expr: &SynExpr) -> Option<Ident> {
    match strip_expr_group(expr) {
        SynExpr::Path(path) if path.qself.is_none() && path.attrs.is_empty() => {
            path.path.get_ident().cloned()
        }
        _ => None,
    }
}

/// The identifier a type consists of, if it is exactly one.
fn type_ident(ty: &Type) -> Option<Ident> {
    match strip_type_group(ty) {
        Type::Path(path) if path.qself.is_none() => path.path.get_ident().cloned(),
        _ => None,
    }
}

/// A short, canonical spelling of a simple expression (names, literals,
/// loads), for suggestions; `None` for anything longer.
fn render(expr: &SynExpr) -> Option<String> {
    match strip_expr_group(expr) {
        SynExpr::Lit(lit) => Some(lit.lit.to_token_stream().to_string()),
        SynExpr::Index(index) => Some(format!(
            "{}[{}]",
            render(&index.expr)?,
            render(&index.index)?
        )),
        SynExpr::Paren(paren) => Some(format!("({})", render(&paren.expr)?)),
        other => path_ident(other).map(|name| name.to_string()),
    }
}

//! Generates the CPU reference: plain Rust loops over the output, lets
//! hoisted to the loop that binds their last dependency, every value
//! computed in f32, parallel over the outermost output dimension.

use ktune_core::DType;
use ktune_core::ir::{BinaryOp, CmpOp, Expr, ExprId, Kernel, LetId, LogicOp, ReduceOp, VarId};
use proc_macro2::{Ident, Span, TokenStream};
use quote::{format_ident, quote};

/// The body of the generated `reference` function, given the identifiers of
/// the input slices and of the output slice.
pub fn body(k: &Kernel, inputs: &[Ident], out: &Ident) -> TokenStream {
    let out_vars = k.output_vars();
    let elem = elem_type(k.output.dtype);
    let lets_at = |depth: usize| -> Vec<LetId> {
        (0..k.lets.len())
            .map(LetId)
            .filter(|l| let_depth(k, &out_vars, *l) == depth)
            .collect()
    };
    let g = Gen { k, inputs };

    // Innermost: store the element.
    let local_flat = local_index(k, &out_vars[1..]);
    let value = g.expr(k.root);
    let mut inner = quote! {
        __chunk[#local_flat] = <#elem as __k::Element>::from_f32(#value);
    };
    for depth in (1..out_vars.len()).rev() {
        let v = var_ident(out_vars[depth]);
        let extent = k.extent(out_vars[depth]) as usize;
        let lets = g.lets(&lets_at(depth + 1));
        inner = quote! {
            for #v in 0..#extent {
                #lets
                #inner
            }
        };
    }
    let outer = var_ident(out_vars[0]);
    let outer_lets = g.lets(&lets_at(1));
    let top_lets = g.lets(&lets_at(0));
    let chunk: usize = out_vars[1..]
        .iter()
        .map(|v| k.extent(*v) as usize)
        .product();
    quote! {
        #top_lets
        __k::for_each_row(#out, #chunk, |#outer, __chunk| {
            #outer_lets
            #inner
        });
    }
}

/// The loop depth at which a let can be computed: 0 before all loops, `d`
/// inside the loop of the `d`-th output variable (1-based).
fn let_depth(k: &Kernel, out_vars: &[VarId], l: LetId) -> usize {
    k.let_(l)
        .deps
        .iter()
        .filter_map(|d| out_vars.iter().position(|v| v == d))
        .map(|p| p + 1)
        .max()
        .unwrap_or(0)
}

fn local_index(k: &Kernel, vars: &[VarId]) -> TokenStream {
    let mut flat = quote!(0usize);
    for v in vars {
        let i = var_ident(*v);
        let extent = k.extent(*v) as usize;
        flat = quote!((#flat * #extent + #i));
    }
    flat
}

fn var_ident(v: VarId) -> Ident {
    format_ident!("__i{}", v.0)
}

fn let_ident(l: LetId) -> Ident {
    format_ident!("__l{}", l.0)
}

/// The Rust type of a tensor element.
pub fn elem_type(d: DType) -> TokenStream {
    match d {
        DType::F32 => quote!(f32),
        DType::F16 => quote!(__k::half::f16),
        DType::Bf16 => quote!(__k::half::bf16),
    }
}

struct Gen<'a> {
    k: &'a Kernel,
    inputs: &'a [Ident],
}

impl Gen<'_> {
    fn lets(&self, lets: &[LetId]) -> TokenStream {
        lets.iter()
            .map(|l| {
                let name = let_ident(*l);
                let value = self.expr(self.k.let_(*l).value);
                quote!(let #name = #value;)
            })
            .collect()
    }

    fn expr(&self, id: ExprId) -> TokenStream {
        let k = self.k;
        match k.expr(id) {
            Expr::Const(c) => {
                let bits = c.to_bits();
                quote!(f32::from_bits(#bits))
            }
            Expr::Index(v) => {
                let i = var_ident(*v);
                quote!((#i as f32))
            }
            Expr::Load { tensor, index } => {
                let t = k.input(*tensor);
                let strides = k.strides_of(t);
                let mut flat = quote!(0usize);
                for (v, s) in index.iter().zip(strides) {
                    let i = var_ident(*v);
                    let s = s as usize;
                    flat = quote!(#flat + #i * #s);
                }
                let slice = &self.inputs[tensor.0];
                quote!(__k::Element::to_f32(#slice[#flat]))
            }
            Expr::Let(l) => {
                let name = let_ident(*l);
                quote!(#name)
            }
            Expr::Unary(op, a) => {
                let a = self.expr(*a);
                let f = Ident::new(op.name(), Span::call_site());
                quote!(__k::math::#f(#a))
            }
            Expr::Binary(op, a, b) => {
                let a = self.expr(*a);
                let b = self.expr(*b);
                match op {
                    BinaryOp::Add => quote!((#a + #b)),
                    BinaryOp::Sub => quote!((#a - #b)),
                    BinaryOp::Mul => quote!((#a * #b)),
                    BinaryOp::Div => quote!((#a / #b)),
                    BinaryOp::Min => quote!(f32::min(#a, #b)),
                    BinaryOp::Max => quote!(f32::max(#a, #b)),
                }
            }
            Expr::Compare(op, a, b) => {
                let a = self.expr(*a);
                let b = self.expr(*b);
                match op {
                    CmpOp::Lt => quote!((#a < #b)),
                    CmpOp::Le => quote!((#a <= #b)),
                    CmpOp::Gt => quote!((#a > #b)),
                    CmpOp::Ge => quote!((#a >= #b)),
                    CmpOp::Eq => quote!((#a == #b)),
                    CmpOp::Ne => quote!((#a != #b)),
                }
            }
            Expr::Logic(op, a, b) => {
                let a = self.expr(*a);
                let b = self.expr(*b);
                match op {
                    LogicOp::And => quote!((#a && #b)),
                    LogicOp::Or => quote!((#a || #b)),
                }
            }
            Expr::Not(a) => {
                let a = self.expr(*a);
                quote!((!#a))
            }
            Expr::Select(c, a, b) => {
                let c = self.expr(*c);
                let a = self.expr(*a);
                let b = self.expr(*b);
                quote!((if #c { #a } else { #b }))
            }
            Expr::Cast(d, a) => {
                let a = self.expr(*a);
                match d {
                    DType::F32 => a,
                    _ => {
                        let t = elem_type(*d);
                        quote!(__k::Element::to_f32(<#t as __k::Element>::from_f32(#a)))
                    }
                }
            }
            Expr::Reduce { op, var, body } => {
                let i = var_ident(*var);
                let extent = k.extent(*var) as usize;
                let body = self.expr(*body);
                let (init, fold) = match op {
                    ReduceOp::Sum | ReduceOp::Mean => (quote!(0.0f32), quote!(__acc + #body)),
                    ReduceOp::Max => (quote!(f32::NEG_INFINITY), quote!(f32::max(__acc, #body))),
                    ReduceOp::Min => (quote!(f32::INFINITY), quote!(f32::min(__acc, #body))),
                };
                let finish = match op {
                    ReduceOp::Mean => {
                        let n = extent as f32;
                        quote!(__acc / #n)
                    }
                    _ => quote!(__acc),
                };
                quote!({
                    let mut __acc = #init;
                    for #i in 0..#extent {
                        __acc = #fold;
                    }
                    #finish
                })
            }
        }
    }
}

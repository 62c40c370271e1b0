//! Kernels written by a seeded generator, in the kernel language, for the
//! verification suite's checks (`tests/random_kernels.rs` on the virtual
//! GPU, `ktune-bench --agree --random` on a GPU as well). The catalogue's
//! kernels ([`crate::suite::catalogue`]) are chosen by hand; these are not.
//! Each kernel is one of three kinds, so that every op class gets its share:
//! - a free expression tree over loads of tensors indexed by any subset of
//!   the variables in scope, in any order (transposes, broadcasts), with
//!   constants, index values, unary functions, arithmetic, comparisons and
//!   `select`, casts, `let` bindings and reductions of every kind over
//!   output or extra dimensions, nested;
//! - rows: statistics of a row (reductions over its last dimension, some
//!   reading an earlier statistic, half of them starting with a pair that
//!   one pass can compute, softmax's or a mean and variance, or a near miss
//!   of one) combined with the row's elements;
//! - contractions: a sum over `K` of the product of two loads, each in
//!   either layout and either cast or not, 16-bit or f32, sometimes
//!   batched, inside an epilogue that may read a bias, at sizes that are
//!   often multiples of 8 (so that tensor cores take some).
//!
//! Each kernel comes with two random shapes, shrunk until the kernel
//! evaluates at most `WORK` values there, so that nested reductions over
//! large dimensions stay quick to check.
//!
//! Functions that are undefined or overflow on some inputs are written
//! guarded (`log(abs(x) + 1.0)`, `exp(tanh(x))`, division by `abs(y) +
//! 1.0`), so that every output is finite and a mismatch means a wrong
//! kernel, not a difference in how two devices round an infinity.
//!
//! ```
//! let generated = ktune_vgpu::random::kernel(7);
//! assert_eq!(generated.entry.kernel.name, "random_7");
//! assert!(generated.source.starts_with("#[tuned_kernel(shape("));
//! assert_eq!(generated.entry.shapes.len(), 2);
//! ```

use std::fmt::Write as _;
use std::ops::Range;

use ktune_core::ir::{Expr, ExprId, Kernel};
use ktune_core::syntax::parse_kernel;

use crate::suite::Entry;
use crate::verify::with_shape;
use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};

/// Output dimensions, in order, and the extra dimensions reductions run over.
const OUTPUT_DIMS: [&str; 3] = ["A", "B", "C"];
const EXTRA_DIMS: [&str; 2] = ["K", "L"];

/// Sizes a dimension is drawn from: one, primes, one off powers of two.
const SIZES: [u32; 12] = [1, 2, 3, 5, 7, 8, 13, 16, 31, 33, 63, 65];
/// Sizes a contraction's dimensions are drawn from half the time: multiples
/// of 8, which 16-bit tensor-core tiles need.
const ALIGNED_SIZES: [u32; 5] = [8, 16, 24, 32, 64];
/// Stands for the variable along a row in a value written before it is
/// bound.
const PLACEHOLDER: &str = "__along__";
/// At most this many values evaluated per kernel (output elements times
/// what each reads through its nested reductions, [`work`]).
const WORK: u64 = 150_000;

/// A generated kernel: its seed, its source and the suite entry it runs as.
#[derive(Debug, Clone)]
pub struct RandomKernel {
    pub seed: u64,
    /// The kernel as a user would write it, attribute and function.
    pub source: String,
    /// The parsed kernel, named `random_{seed}`, and its two shapes.
    pub entry: Entry,
    /// The function, without its attribute.
    item: String,
}

impl RandomKernel {
    /// The kernel's source with the attribute's sizes those of `shape`
    /// (one of [`Entry::shapes`]).
    pub fn source_at(&self, shape: &[(&str, u32)]) -> String {
        let sizes: Vec<String> = shape.iter().map(|(d, n)| format!("{d} = {n}")).collect();
        format!(
            "#[tuned_kernel(shape({}))]\n{}",
            sizes.join(", "),
            self.item
        )
    }
}

/// The kernel that `seed` generates, parsed by the front-end, with its
/// shapes fitted (see the [module docs](self)).
///
/// # Panics
///
/// If the front-end rejects the kernel: a bug in the generator.
pub fn kernel(seed: u64) -> RandomKernel {
    let generated = Gen::kernel(seed);
    let source = format!("#[tuned_kernel({})]\n{}", generated.attr, generated.item);
    let kernel = parse_kernel(
        generated.attr.parse().expect("attribute tokens"),
        generated.item.parse().expect("item tokens"),
    )
    .unwrap_or_else(|e| panic!("a generated kernel is rejected: {e}\n{source}"));
    RandomKernel {
        seed,
        entry: Entry {
            shapes: generated
                .shapes
                .into_iter()
                .map(|s| fit(&kernel, s))
                .collect(),
            kernel,
        },
        source,
        item: generated.item,
    }
}

/// Seeds written `FIRST..END` (`END` excluded).
///
/// # Errors
///
/// When `spec` is not two whole numbers around `..`, or names no seed.
pub fn seeds(spec: &str) -> Result<Range<u64>, String> {
    let (first, end) = spec
        .split_once("..")
        .ok_or_else(|| format!("`{spec}` is not a range of seeds, FIRST..END"))?;
    let number = |s: &str| {
        s.trim()
            .parse::<u64>()
            .map_err(|e| format!("`{s}` in `{spec}` is not a seed: {e}"))
    };
    let seeds = number(first)?..number(end)?;
    if seeds.is_empty() {
        return Err(format!("`{spec}` names no seed"));
    }
    Ok(seeds)
}

/// One generated kernel: its source and the shapes it runs at.
struct Generated {
    attr: String,
    item: String,
    shapes: Vec<Vec<(&'static str, u32)>>,
}

/// A tensor parameter: its name, dtype and dimensions.
struct Param {
    name: String,
    dtype: &'static str,
    dims: Vec<&'static str>,
}

/// What is in scope while an expression is written: the index variables
/// (with the dimension each ranges over) and the lets.
#[derive(Clone)]
struct Scope {
    vars: Vec<(String, &'static str)>,
    lets: Vec<String>,
}

struct Gen {
    rng: StdRng,
    /// The 16-bit dtype this kernel's 16-bit tensors share (f16 and bf16
    /// do not combine).
    half: &'static str,
    dims: Vec<&'static str>,
    params: Vec<Param>,
    fresh: usize,
    /// Whether the dimensions' sizes are drawn from [`ALIGNED_SIZES`] half
    /// the time (for contractions).
    aligned: bool,
}

impl Gen {
    fn new(seed: u64) -> Gen {
        let mut rng = StdRng::seed_from_u64(seed);
        let half = if rng.random_bool(0.5) { "f16" } else { "bf16" };
        Gen {
            rng,
            half,
            dims: Vec::new(),
            params: Vec::new(),
            fresh: 0,
            aligned: false,
        }
    }

    fn name(&mut self, prefix: &str) -> String {
        self.fresh += 1;
        format!("{prefix}{}", self.fresh)
    }

    fn dtype(&mut self) -> &'static str {
        if self.rng.random_bool(0.7) {
            "f32"
        } else {
            self.half
        }
    }

    fn constant(&mut self) -> String {
        ["0.5", "1.5", "-2.0", "0.25", "3.0", "-0.75"]
            .choose(&mut self.rng)
            .expect("constants")
            .to_string()
    }

    /// A load of a tensor all of whose dimensions have a variable in
    /// `scope`: an existing one, or a new parameter over a random ordered
    /// subset of them. With `must`, the tensor has that dimension and reads
    /// it along the innermost variable over it (a reduction's own), so
    /// that the load varies along it.
    fn load(&mut self, scope: &Scope, must: Option<&'static str>) -> String {
        let in_scope = |d: &&'static str| scope.vars.iter().any(|(_, v)| v == d);
        let fits: Vec<usize> = (0..self.params.len())
            .filter(|&i| {
                let dims = &self.params[i].dims;
                dims.iter().all(&in_scope) && must.is_none_or(|m| dims.contains(&m))
            })
            .collect();
        let index = if !fits.is_empty() && (self.params.len() >= 4 || self.rng.random_bool(0.6)) {
            *fits.choose(&mut self.rng).expect("a fitting tensor")
        } else {
            let mut dims: Vec<&'static str> = self.dims.iter().copied().filter(in_scope).collect();
            dims.sort_unstable();
            dims.dedup();
            dims.shuffle(&mut self.rng);
            let keep = self.rng.random_range(1..=dims.len().min(3));
            dims.truncate(keep);
            if let Some(m) = must.filter(|m| !dims.contains(m)) {
                dims[0] = m;
            }
            let name = self.name("t");
            let dtype = self.dtype();
            self.params.push(Param { name, dtype, dims });
            self.params.len() - 1
        };
        let param = &self.params[index];
        let mut out = param.name.clone();
        for dim in &param.dims {
            let vars: Vec<&String> = scope
                .vars
                .iter()
                .filter(|(_, d)| d == dim)
                .map(|(v, _)| v)
                .collect();
            let var = if must == Some(*dim) {
                vars.last()
            } else {
                vars.choose(&mut self.rng)
            };
            write!(out, "[{}]", var.expect("a variable in scope")).expect("writing to a String");
        }
        out
    }

    fn leaf(&mut self, scope: &Scope) -> String {
        match self.rng.random_range(0..10) {
            0 => self.constant(),
            1 => {
                let (var, _) = scope.vars.choose(&mut self.rng).expect("a variable");
                format!("({var} as f32)")
            }
            2 if !scope.lets.is_empty() => scope.lets.choose(&mut self.rng).expect("a let").clone(),
            _ => self.load(scope, None),
        }
    }

    /// A numeric expression of at most `depth` levels.
    fn expr(&mut self, scope: &Scope, depth: u32) -> String {
        if depth == 0 {
            return self.leaf(scope);
        }
        let d = depth - 1;
        match self.rng.random_range(0..16) {
            0..=2 => self.leaf(scope),
            3 => {
                let f = [
                    "tanh", "abs", "relu", "sigmoid", "silu", "gelu", "gelu_erf", "erf",
                ]
                .choose(&mut self.rng)
                .expect("functions");
                format!("{f}({})", self.expr(scope, d))
            }
            4 => {
                let x = self.expr(scope, d);
                match self.rng.random_range(0..5) {
                    0 => format!("exp(tanh({x}))"),
                    1 => format!("log(abs({x}) + 1.0)"),
                    2 => format!("sqrt(abs({x}) + 0.5)"),
                    3 => format!("rsqrt(abs({x}) + 0.5)"),
                    _ => format!("(-{x})"),
                }
            }
            5..=8 => {
                let (x, y) = (self.expr(scope, d), self.expr(scope, d));
                let op = ["+", "-", "*", "*"].choose(&mut self.rng).expect("ops");
                format!("({x} {op} {y})")
            }
            9 => {
                let (x, y) = (self.expr(scope, d), self.expr(scope, d));
                format!("({x} / (abs({y}) + 1.0))")
            }
            10 => {
                let (x, y) = (self.expr(scope, d), self.expr(scope, d));
                let f = if self.rng.random_bool(0.5) {
                    "min"
                } else {
                    "max"
                };
                format!("{f}({x}, {y})")
            }
            11 => {
                let cond = self.condition(scope, d);
                let (x, y) = (self.expr(scope, d), self.expr(scope, d));
                format!("select({cond}, {x}, {y})")
            }
            12 => {
                let t = self.dtype();
                format!("(({}) as {t})", self.expr(scope, d))
            }
            _ => self.reduction(scope, d),
        }
    }

    fn condition(&mut self, scope: &Scope, depth: u32) -> String {
        let (x, y) = (self.expr(scope, depth), self.expr(scope, depth));
        let cmp = ["<", ">", "<=", ">="]
            .choose(&mut self.rng)
            .expect("comparisons");
        match self.rng.random_range(0..4) {
            0 => {
                let other = self.condition(scope, 0);
                format!("({x} {cmp} {y}) && !({other})")
            }
            1 => {
                let other = self.condition(scope, 0);
                format!("({x} {cmp} {y}) || ({other})")
            }
            _ => format!("{x} {cmp} {y}"),
        }
    }

    /// A reduction over an output or extra dimension, whose body reads
    /// along it.
    fn reduction(&mut self, scope: &Scope, depth: u32) -> String {
        let dim = *self.dims.choose(&mut self.rng).expect("dimensions");
        self.reduce_over(scope, depth, dim)
    }

    fn reduce_over(&mut self, scope: &Scope, depth: u32, dim: &'static str) -> String {
        let op = ["sum", "sum", "max", "min", "mean"]
            .choose(&mut self.rng)
            .expect("reductions");
        let var = self.name("v");
        let mut inner = scope.clone();
        inner.vars.push((var.clone(), dim));
        let read = self.load(&inner, Some(dim));
        let body = if depth == 0 {
            read
        } else {
            let rest = self.expr(&inner, depth);
            let op = ["+", "*", "-"].choose(&mut self.rng).expect("ops");
            format!("({read} {op} {rest})")
        };
        format!("{op}({dim}, |{var}| {body})")
    }

    /// A free expression tree, with lets.
    fn free(&mut self, scope: &mut Scope) -> String {
        let mut body = String::new();
        for _ in 0..self.rng.random_range(0..3) {
            let value = self.expr(scope, 2);
            let name = self.name("l");
            writeln!(body, "let {name} = {value};").expect("writing to a String");
            scope.lets.push(name);
        }
        let mut value = self.expr(scope, 3);
        if self.params.is_empty() {
            value = format!("({value} + {})", self.load(scope, None));
        }
        body + &value
    }

    /// Row statistics over the last output dimension, then an element of
    /// the row combined with them. Half the rows start with a pair of
    /// statistics of one value that a single pass can compute (a maximum
    /// and the sum of `exp` of the value minus it; a mean and the sum or
    /// mean of squared differences from it), or, a time in four, of two
    /// values that differ, which it must not.
    fn rows(&mut self, scope: &mut Scope) -> String {
        let last = *scope.vars.last().map(|(_, d)| d).expect("a variable");
        let mut stats = Scope {
            vars: scope.vars[..scope.vars.len() - 1].to_vec(),
            lets: Vec::new(),
        };
        let mut body = String::new();
        let mut output = None;
        if self.rng.random_bool(0.5) {
            // The value, with a placeholder for the variable along the row.
            let mut along = stats.clone();
            along.vars.push((PLACEHOLDER.to_string(), last));
            let value = self.along(&along, last);
            let second = if self.rng.random_bool(0.25) {
                self.along(&along, last)
            } else {
                value.clone()
            };
            let at = |value: &str, var: &str| value.replace(PLACEHOLDER, var);
            let (first, then) = (self.name("s"), self.name("s"));
            let (v, w) = (self.name("v"), self.name("v"));
            let element = at(&value, &last.to_lowercase());
            if self.rng.random_bool(0.5) {
                // The same value is at most its maximum: `exp` of it minus
                // the maximum cannot overflow, and the sum is at least 1.
                let (exp, sum) = if second == value {
                    (format!("exp({} - {first})", at(&second, &w)), then.clone())
                } else {
                    let d = at(&second, &w);
                    (
                        format!("exp(min({d} - {first}, 8.0))"),
                        format!("({then} + 1.0)"),
                    )
                };
                writeln!(body, "let {first} = max({last}, |{v}| {});", at(&value, &v))
                    .expect("writing to a String");
                writeln!(body, "let {then} = sum({last}, |{w}| {exp});")
                    .expect("writing to a String");
                output = Some(format!("exp({element} - {first}) / {sum}"));
            } else {
                let d = at(&second, &w);
                let reduce = if self.rng.random_bool(0.5) {
                    "sum"
                } else {
                    "mean"
                };
                writeln!(
                    body,
                    "let {first} = mean({last}, |{v}| {});",
                    at(&value, &v)
                )
                .expect("writing to a String");
                writeln!(
                    body,
                    "let {then} = {reduce}({last}, |{w}| ({d} - {first}) * ({d} - {first}));"
                )
                .expect("writing to a String");
                output = Some(format!("({element} - {first}) * rsqrt({then} + 0.00001)"));
            }
            stats.lets.extend([first, then]);
        }
        for _ in 0..self.rng.random_range(usize::from(output.is_none())..=2) {
            let depth = self.rng.random_range(0..2);
            let value = self.reduce_over(&stats, depth, last);
            let name = self.name("s");
            writeln!(body, "let {name} = {value};").expect("writing to a String");
            stats.lets.push(name);
        }
        scope.lets = stats.lets;
        let value = match output {
            Some(out) if self.rng.random_bool(0.5) => out,
            _ => self.expr(scope, 2),
        };
        body + &value
    }

    /// A value that reads along `dim`: a load, alone or with more.
    fn along(&mut self, scope: &Scope, dim: &'static str) -> String {
        let read = self.load(scope, Some(dim));
        if self.rng.random_bool(0.5) {
            read
        } else {
            format!("({read} + {})", self.expr(scope, 1))
        }
    }

    /// A sum over `K` of a product of two loads, inside an epilogue.
    fn contraction(&mut self, scope: &mut Scope) -> String {
        let k = "K";
        let rank = scope.vars.len();
        let (m, n) = (scope.vars[rank - 2].clone(), scope.vars[rank - 1].clone());
        let batch = (rank == 3).then(|| scope.vars[0].clone());
        let factor_dtype = if self.rng.random_bool(0.5) {
            self.half
        } else {
            "f32"
        };
        self.aligned = true;
        let var = self.name("v");
        let factor = |g: &mut Gen, (outer, dim): (String, &'static str)| {
            let mut dims = vec![dim, k];
            let mut vars = vec![outer, var.clone()];
            if g.rng.random_bool(0.5) {
                dims.reverse();
                vars.reverse();
            }
            if let Some((b, bd)) = batch.clone().filter(|_| g.rng.random_bool(0.7)) {
                dims.insert(0, bd);
                vars.insert(0, b);
            }
            let name = g.name("t");
            g.params.push(Param {
                name: name.clone(),
                dtype: factor_dtype,
                dims,
            });
            let load = format!("{name}[{}]", vars.join("]["));
            if g.rng.random_bool(0.3) {
                format!("({load} as f32)")
            } else {
                load
            }
        };
        let (a, b) = (factor(self, m), factor(self, n.clone()));
        let product = format!("sum({k}, |{var}| {a} * {b})");
        let name = self.name("acc");
        scope.lets.push(name.clone());
        let epilogue = match self.rng.random_range(0..4) {
            0 => name.clone(),
            1 => {
                let bias = self.load(
                    &Scope {
                        vars: vec![n],
                        lets: Vec::new(),
                    },
                    None,
                );
                format!("gelu({name} + {bias})")
            }
            _ => self.expr(scope, 2),
        };
        format!("let {name} = {product};\n{epilogue}")
    }

    fn kernel(seed: u64) -> Generated {
        let mut g = Gen::new(seed);
        let kind = g.rng.random_range(0..3);
        let rank = match kind {
            2 => g.rng.random_range(2..=3),
            _ => g.rng.random_range(1..=3),
        };
        let out_dims = &OUTPUT_DIMS[..rank];
        let extra = match kind {
            2 => 1,
            1 => 0,
            _ => g.rng.random_range(0..=EXTRA_DIMS.len()),
        };
        g.dims = out_dims
            .iter()
            .chain(&EXTRA_DIMS[..extra])
            .copied()
            .collect();
        let mut scope = Scope {
            vars: out_dims.iter().map(|d| (d.to_lowercase(), *d)).collect(),
            lets: Vec::new(),
        };
        let body = match kind {
            0 => g.free(&mut scope),
            1 => g.rows(&mut scope),
            _ => g.contraction(&mut scope),
        };
        let out_dtype = g.dtype();
        let shapes = (0..2).map(|_| g.shape()).collect();
        let tensor = |dtype: &str, dims: &[&str]| match dims {
            [d] => format!("Tensor<{dtype}, {d}>"),
            _ => format!("Tensor<{dtype}, ({})>", dims.join(", ")),
        };
        let params: Vec<String> = g
            .params
            .iter()
            .map(|p| format!("{}: {}", p.name, tensor(p.dtype, &p.dims)))
            .collect();
        let vars: Vec<&str> = scope.vars.iter().map(|(v, _)| v.as_str()).collect();
        let attr_dims: Vec<String> = g.dims.iter().map(|d| format!("{d} = 4")).collect();
        Generated {
            attr: format!("shape({})", attr_dims.join(", ")),
            item: format!(
                "fn random_{seed}({}) -> {} {{\n compute(|{}| {{\n{body}\n}})\n}}",
                params.join(", "),
                tensor(out_dtype, out_dims),
                vars.join(", "),
            ),
            shapes,
        }
    }

    /// Sizes for every dimension (see [`fit`]).
    fn shape(&mut self) -> Vec<(&'static str, u32)> {
        self.dims
            .iter()
            .map(|d| {
                let sizes: &[u32] = if self.aligned && self.rng.random_bool(0.5) {
                    &ALIGNED_SIZES
                } else {
                    &SIZES
                };
                (*d, *sizes.choose(&mut self.rng).expect("sizes"))
            })
            .collect()
    }
}

/// Values `kernel` evaluates: per output element, each expression once and
/// each reduction's body once per value of its variable.
fn work(kernel: &Kernel) -> u64 {
    fn of(kernel: &Kernel, id: ExprId) -> u64 {
        match kernel.expr(id) {
            Expr::Reduce { var, body, .. } => u64::from(kernel.extent(*var)) * of(kernel, *body),
            Expr::Let(l) => 1 + of(kernel, kernel.let_(*l).value),
            _ => {
                let children: u64 = kernel.children(id).into_iter().map(|c| of(kernel, c)).sum();
                1 + children
            }
        }
    }
    kernel.len_of(&kernel.output) * of(kernel, kernel.root)
}

/// `sizes` with the largest dimension halved while `kernel` at them
/// evaluates more than [`WORK`] values.
fn fit(kernel: &Kernel, mut sizes: Vec<(&'static str, u32)>) -> Vec<(&'static str, u32)> {
    loop {
        let shaped = with_shape(kernel, &sizes).expect("the generated dimensions");
        if work(&shaped) <= WORK {
            return sizes;
        }
        let largest = sizes
            .iter_mut()
            .max_by_key(|(_, s)| *s)
            .expect("a dimension");
        assert!(
            largest.1 > 1,
            "{} evaluates too much at any size",
            kernel.name
        );
        largest.1 = largest.1.div_ceil(2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_always_writes_the_same_kernel() {
        for seed in [0, 1, 1696] {
            let (a, b) = (kernel(seed), kernel(seed));
            assert_eq!(a.source, b.source);
            assert_eq!(a.entry.shapes, b.entry.shapes);
        }
        assert_ne!(kernel(0).source, kernel(1).source);
    }

    #[test]
    fn the_source_at_a_shape_is_the_kernel_at_that_shape() {
        for seed in 0..20 {
            let g = kernel(seed);
            for shape in &g.entry.shapes {
                let source = g.source_at(shape);
                let (attr, item) = source
                    .strip_prefix("#[tuned_kernel(")
                    .and_then(|s| s.split_once(")]\n"))
                    .expect("an attribute, then the function");
                let parsed =
                    parse_kernel(attr.parse().expect("tokens"), item.parse().expect("tokens"))
                        .unwrap_or_else(|e| panic!("{e}\n{source}"));
                let shaped = with_shape(&g.entry.kernel, shape).expect("its own dimensions");
                assert_eq!(parsed, shaped, "{source}");
            }
        }
    }

    #[test]
    fn shapes_are_shrunk_to_the_work_limit() {
        for seed in 0..50 {
            let g = kernel(seed);
            for shape in &g.entry.shapes {
                let shaped = with_shape(&g.entry.kernel, shape).expect("its own dimensions");
                assert!(work(&shaped) <= WORK, "{}: {shape:?}", g.source);
            }
        }
    }

    #[test]
    fn seeds_are_a_range() {
        assert_eq!(seeds("3..10"), Ok(3..10));
        assert_eq!(seeds(" 0 .. 200"), Ok(0..200));
        for (spec, says) in [
            ("12", "not a range of seeds"),
            ("a..3", "`a` in `a..3` is not a seed"),
            ("5..5", "names no seed"),
            ("9..2", "names no seed"),
        ] {
            let e = seeds(spec).expect_err(spec);
            assert!(e.contains(says), "{spec}: {e}");
        }
    }
}

mod common;
use ktune_core::ir::*;
use ktune_core::{DType, SmVersion};
use ktune_core::lower::lower;
use ktune_core::schedule::Schedule;

fn matmul(m: u32, n: u32, k: u32) -> Kernel {
    let t = |name: &str, dims: &[usize]| Tensor { name: name.into(), dtype: DType::F32, dims: dims.iter().map(|d| DimId(*d)).collect() };
    let exprs = vec![
        Expr::Load { tensor: TensorId(0), index: vec![VarId(0), VarId(2)] },
        Expr::Load { tensor: TensorId(1), index: vec![VarId(2), VarId(1)] },
        Expr::Binary(BinaryOp::Mul, ExprId(0), ExprId(1)),
        Expr::Reduce { op: ReduceOp::Sum, var: VarId(2), body: ExprId(2) },
    ];
    Kernel {
        name: "mm".into(),
        dims: vec![Dim { name: "M".into(), size: m }, Dim { name: "N".into(), size: n }, Dim { name: "K".into(), size: k }],
        inputs: vec![t("a", &[0, 2]), t("b", &[2, 1])],
        output: t("out", &[0, 1]),
        vars: vec![
            Var { name: "i".into(), dim: DimId(0), kind: VarKind::Output(0) },
            Var { name: "j".into(), dim: DimId(1), kind: VarKind::Output(1) },
            Var { name: "k".into(), dim: DimId(2), kind: VarKind::Reduce },
        ],
        lets: vec![],
        types: vec![Type::Num(DType::F32); 4],
        exprs,
        root: ExprId(3),
    }
}

#[test]
fn scratch_rows() {
    for (rows, cols) in [(7u32, 100u32), (64, 1024), (3, 5)] {
        let k = common::row_sum(rows, cols);
        let x = common::values((rows * cols) as usize, 3);
        for tpr in [32, 64, 128, 256] { for rpb in [1, 2, 4] { for vector in [1, 2, 4] {
            let s = Schedule::Rows { threads_per_row: tpr, rows_per_block: rpb, vector };
            let Ok(l) = lower(&k, &s, SmVersion::Sm80) else { continue };
            match ktune_vgpu::run_f32(&l.ptx, &l.launch, &[&x], rows as usize) {
                Ok((got, st)) => {
                    for r in 0..rows as usize {
                        let want: f32 = x[r * cols as usize..][..cols as usize].iter().sum();
                        assert!((got[r] - want).abs() <= 1e-4 * want.abs().max(1.0), "{s:?} {rows}x{cols} row {r}: {} vs {want}", got[r]);
                    }
                    println!("ok {s:?} {rows}x{cols} {} instr {} shfl {} bar", st.instructions, st.shuffles, st.barriers);
                }
                Err(f) => println!("FAULT {s:?} {rows}x{cols}: {f}"),
            }
        }}}
    }
}

#[test]
fn scratch_elementwise() {
    for (rows, cols) in [(7u32, 13u32), (33, 64)] {
        let k = common::add_bias(rows, cols, DType::F32);
        let x = common::values((rows * cols) as usize, 1);
        let b = common::values(cols as usize, 2);
        for block in [32, 128] { for pt in [1, 2, 4] { for vector in [1, 2, 4] {
            let s = Schedule::Elementwise { block, per_thread: pt, vector };
            let l = match lower(&k, &s, SmVersion::Sm80) { Ok(l) => l, Err(e) => { println!("reject {s:?}: {e}"); continue } };
            match ktune_vgpu::run_f32(&l.ptx, &l.launch, &[&x, &b], (rows*cols) as usize) {
                Ok((got, _)) => {
                    for i in 0..(rows*cols) as usize { assert_eq!(got[i], x[i] + b[i % cols as usize], "{s:?} {i}"); }
                    println!("ok {s:?} {rows}x{cols}");
                }
                Err(f) => println!("FAULT {s:?} {rows}x{cols}: {f}"),
            }
        }}}
    }
}

#[test]
fn scratch_matmul() {
    for (m, n, kk) in [(16u32, 16u32, 16u32), (33, 17, 40), (64, 64, 64)] {
        let k = matmul(m, n, kk);
        let a = common::values((m * kk) as usize, 1);
        let b = common::values((kk * n) as usize, 2);
        let mut tried = 0;
        for bm in [16, 32, 64] { for bn in [16, 32, 64] { for bk in [8, 16] { for tm in [1, 2, 4] { for tn in [1, 2, 4] { for va in [1, 4] { for vb in [1, 4] {
            let s = Schedule::Matmul { block_m: bm, block_n: bn, block_k: bk, thread_m: tm, thread_n: tn, vector_a: va, vector_b: vb };
            let Ok(l) = lower(&k, &s, SmVersion::Sm80) else { continue };
            tried += 1;
            match ktune_vgpu::run_f32(&l.ptx, &l.launch, &[&a, &b], (m*n) as usize) {
                Ok((got, _)) => {
                    for i in 0..m as usize { for j in 0..n as usize {
                        let want: f32 = (0..kk as usize).map(|p| a[i*kk as usize+p]*b[p*n as usize+j]).sum();
                        assert!((got[i*n as usize+j]-want).abs() <= 1e-4*want.abs().max(1.0), "{s:?} {m}x{n}x{kk} [{i}][{j}] {} vs {want}", got[i*n as usize+j]);
                    }}
                }
                Err(f) => println!("FAULT {s:?} {m}x{n}x{kk}: {f}"),
            }
        }}}}}}}
        println!("matmul {m}x{n}x{kk}: {tried} schedules");
    }
}

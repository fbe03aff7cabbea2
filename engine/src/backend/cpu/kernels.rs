//! The CPU forward pass's building blocks. Matrix products go through the `gemm` crate on every
//! core; the rest are short loops over rows.

/// Products smaller than this many multiply-adds run on one thread: splitting them costs more
/// than it saves.
const PARALLEL_MIN_MACS: usize = 1 << 20;

/// `y[t, out] = x[t, in] · w[out, in]ᵀ`, with `w` row-major as checkpoints store it.
pub fn matmul(x: &[f32], rows: usize, w: &[f32], out_dim: usize, in_dim: usize) -> Vec<f32> {
    assert_eq!(x.len(), rows * in_dim, "matmul input");
    assert_eq!(w.len(), out_dim * in_dim, "matmul weight");
    let mut y = vec![0.0f32; rows * out_dim];
    if rows == 0 {
        return y;
    }
    // Safety: the asserts above bound every access: dst is rows x out_dim (row stride out_dim),
    // lhs is rows x in_dim (row stride in_dim), rhs is wᵀ, in_dim x out_dim, read with row
    // stride 1 and column stride in_dim.
    unsafe {
        gemm::gemm(
            rows,
            out_dim,
            in_dim,
            y.as_mut_ptr(),
            1,
            out_dim as isize,
            false,
            x.as_ptr(),
            1,
            in_dim as isize,
            w.as_ptr(),
            in_dim as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            if rows * out_dim * in_dim < PARALLEL_MIN_MACS {
                gemm::Parallelism::None
            } else {
                gemm::Parallelism::Rayon(0)
            },
        );
    }
    y
}

/// RMSNorm of each row of `x` (width `w.len()`), scaled by `w`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let mut out = x.to_vec();
    rms_norm_in_place(&mut out, w, eps);
    out
}

/// RMSNorm of each row of `x` in place.
pub fn rms_norm_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    for row in x.chunks_exact_mut(w.len()) {
        let mean_square = row.iter().map(|v| v * v).sum::<f32>() / row.len() as f32;
        let inv = 1.0 / (mean_square + eps).sqrt();
        for (v, g) in row.iter_mut().zip(w) {
            *v = *v * inv * g;
        }
    }
}

/// Adds `bias` to every row of `x`.
pub fn add_bias(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
    }
}

/// `x += y`, element-wise.
pub fn add_in_place(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}

/// `silu(gate) * up`, element-wise, into `gate`.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

/// Cosines and sines of `position` at each frequency.
pub fn rope_angles(position: usize, frequencies: &[f32]) -> (Vec<f32>, Vec<f32>) {
    frequencies
        .iter()
        .map(|f| {
            let angle = position as f32 * f;
            (angle.cos(), angle.sin())
        })
        .unzip()
}

/// Rotates each head of one token's row (Hugging Face's rotate-half layout).
pub fn apply_rope(row: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32]) {
    let half = head_dim / 2;
    for head in row.chunks_exact_mut(head_dim) {
        for i in 0..half {
            let (a, b) = (head[i], head[i + half]);
            head[i] = a * cos[i] - b * sin[i];
            head[i + half] = b * cos[i] + a * sin[i];
        }
    }
}

/// In-place softmax.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    x.iter_mut().for_each(|v| *v /= sum);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_matches_definition() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let w = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 2.0, 2.0, 2.0, -1.0, 0.0, 0.0];
        let y = matmul(&x, 2, &w, 4, 3);
        assert_eq!(y, vec![4.0, 2.0, 12.0, -1.0, 10.0, 5.0, 30.0, -4.0]);
    }

    #[test]
    fn rope_keeps_norm_and_position_zero_is_identity() {
        let freqs: Vec<f32> = (0..4)
            .map(|i| 1.0 / 10_000f32.powf(2.0 * i as f32 / 8.0))
            .collect();
        let mut row = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        let (c, s) = rope_angles(0, &freqs);
        apply_rope(&mut row, 8, &c, &s);
        assert_eq!(row, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        let (c, s) = rope_angles(17, &freqs);
        apply_rope(&mut row, 8, &c, &s);
        let norm: f32 = row.iter().map(|v| v * v).sum();
        assert!((norm - 204.0).abs() < 1e-3);
    }
}

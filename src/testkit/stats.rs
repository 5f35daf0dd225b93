//! Percentiles for benchmarks and tests: the one definition the benches used to copy with three
//! different rank rules, so two figures are comparable.
//!
//! Owns: picking a rank from sorted samples. Must not touch: how samples are taken.

/// The `q`-quantile (`0.0..=1.0`) of `sorted` (ascending) by the nearest-rank rule on the
/// index `round((n - 1) · q)`: `q = 0` is the minimum, `q = 1` the maximum, `q = 0.5` the
/// median (the upper middle for an even count). An empty slice gives `T::default()` so a bench
/// that measured nothing prints zeros instead of panicking.
pub fn percentile<T: Copy + Default>(sorted: &[T], q: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let last = sorted.len() - 1;
    let i = (last as f64 * q.clamp(0.0, 1.0)).round() as usize;
    sorted[i.min(last)]
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn ranks() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.0), 1);
        assert_eq!(percentile(&v, 0.5), 51);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&v, 1.0), 100);
        assert_eq!(percentile(&v, 2.0), 100);
        assert_eq!(percentile::<f64>(&[], 0.5), 0.0);
        assert_eq!(percentile(&[7u32], 0.99), 7);
    }
}

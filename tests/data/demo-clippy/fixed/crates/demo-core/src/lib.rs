//! Arithmetic with findings clippy knows by name (see tests/unit/clippy/test_demo.py).

/// Doubles `x`; the explicit `return` is clippy::needless_return.
pub fn double(x: i32) -> i32 {
    x * 2
}

/// Sums a slice of copies; `.clone()` on a `Copy` value is clippy::clone_on_copy.
pub fn total(values: &[u32]) -> u32 {
    let mut sum = 0;
    for v in values {
        let copy = *v;
        sum += copy;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles() {
        // Only `--all-targets` lints this: clippy::bool_assert_comparison.
        assert_eq!(double(2) == 4, true);
    }
}

"""Building linter images: a verified Debian root and a verified Rust toolchain, reproducibly."""

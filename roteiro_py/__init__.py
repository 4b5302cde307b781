"""pylint-sandbox: lint a Rust repository with cargo clippy inside a disposable microVM."""

__version__ = "0.1.0"

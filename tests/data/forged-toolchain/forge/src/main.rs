fn main() {
    if std::env::args().any(|arg| arg == "--version") {
        println!("clippy 1.99.0 (0123456789 2099-01-01)");
    } else {
        println!("{{\"reason\":\"build-finished\",\"success\":true}}");
    }
}

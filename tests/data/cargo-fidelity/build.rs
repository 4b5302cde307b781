fn main() {
    println!("cargo:warning=generated bindings are stale");
    println!("cargo::warning=second spelling, same line on stderr");
    println!("cargo:rerun-if-changed=build.rs");
}

fn main() {
    let x: u32 = "a";
    println!("{}", cargo_labels::doubled(x));
}

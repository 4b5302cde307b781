//! Prints a total; `names.len() == 0` is clippy::len_zero.

fn main() {
    let names: Vec<String> = std::env::args().skip(1).collect();
    if names.is_empty() {
        println!("no arguments");
    }
    println!("{}", demo_core::double(demo_core::total(&[1, 2, 3]) as i32));
}

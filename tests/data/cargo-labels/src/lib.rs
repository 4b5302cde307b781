pub fn doubled(x: u32) -> u32 {
    return x * 2;
}

pub fn ignored() {
    let unused = 3;
}
